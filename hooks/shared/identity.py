"""A job's identity as every kind's parsed parent carries it, and the one way messages name a job."""
from __future__ import annotations

from dataclasses import dataclass


def job_key(namespace: str, name: str) -> str:
    """`namespace/name`, as messages name a job."""
    return f"{namespace}/{name}"


@dataclass(frozen=True)
class JobIdentity:
    """The parent's name, namespace (defaulted) and uid: the base of each kind's typed job."""

    name: str
    namespace: str
    uid: str

    @property
    def key(self) -> str:
        """namespace/name, as messages name the job."""
        return job_key(self.namespace, self.name)
