"""Training-job operator hooks: one pure sub-package per job kind, shared pure code, and the HTTP shell (server)."""
