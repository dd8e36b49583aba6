"""Errors the pure core raises on purpose; anything else escaping it is a bug."""


class InvalidRequest(ValueError):
    """The request body is not a Metacontroller sync request for the route's kind (HTTP 400)."""


class SpecError(ValueError):
    """A job's spec is invalid; `problems` lists every problem with its field path and the fix."""

    def __init__(self, problems: list[str]):
        super().__init__("; ".join(problems))
        self.problems = problems
