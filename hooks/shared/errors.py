"""Errors the pure core raises on purpose; anything else escaping it is a bug."""


class InvalidRequest(ValueError):
    """The request body is not a Metacontroller sync request for an MXJob (HTTP 400)."""
