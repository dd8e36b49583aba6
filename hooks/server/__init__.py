"""The HTTP shell: the Flask app, its gunicorn settings and metrics. Everything else in hooks/ is pure."""
