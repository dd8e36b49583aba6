"""Training-job operator hooks: one pure sub-package per job kind, shared pure code, and the HTTP shell (server)."""

# The release: the VERSION file at the root, as are pyproject.toml's version, the hooks image tag in
# metacontroller/kustomization.yaml and the newest CHANGELOG.md entry (tests/install/test_docs.py checks
# that they agree). Written out here because the hooks image holds hooks/ without the VERSION file.
__version__ = "0.3.0"
