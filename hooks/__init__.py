"""MXJob operator hooks: pure sync logic (every module but app) and the Flask shell (app)."""
