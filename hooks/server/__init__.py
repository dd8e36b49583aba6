"""The HTTP shell: the Flask app, its gunicorn settings and metrics.

The domain packages (hooks.mxjob, hooks.chainerjob, hooks.shared) are pure functions; this
package and hooks.cli (the manifest converter's command line) are the only shells.
"""
