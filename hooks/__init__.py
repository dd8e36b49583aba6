"""Training-job operator hooks: one pure sub-package per job kind, shared pure code, and the HTTP shell (server)."""

# The release: the same as pyproject.toml's version, the hooks image tag in metacontroller/kustomization.yaml
# and the newest CHANGELOG.md entry (tests/install/test_docs.py checks that they agree).
__version__ = "0.2.0"
