"""Job conditions: setting them without churn, and keeping the current state last.

The kind names its condition types: a kind that spells them as a `Literal` gets a type error
for a misspelt one, as the class is generic in them.
"""
from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any, Generic, TypeVar, cast

from hooks.shared.k8s import Condition

T = TypeVar("T", bound=str)  # the kind's condition types
S = TypeVar("S", bound=str)


def rfc3339(moment: datetime) -> str:
    """A UTC timestamp with second precision, as Kubernetes writes them."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_rfc3339(text: str) -> datetime:
    """Parse a timestamp written by rfc3339 (or any ISO 8601 form Kubernetes uses)."""
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


class Conditions(Generic[T]):
    """An ordered condition list being updated for one sync at one instant.

    `state_order` names the kind's condition types, highest first: the first of them that is True
    is the job's state, which `ordered` moves last (the State printer column reads the last one).
    """

    def __init__(self, existing: Iterable[Any] | None, now: datetime, *, state_order: tuple[T, ...]):
        self._items: list[Condition] = [cast(Condition, dict(c)) for c in existing or [] if isinstance(c, dict)]
        self._now = rfc3339(now)
        self._order = state_order

    def get(self, ctype: T) -> Condition | None:
        """The condition of this type, if the job has one."""
        return self._get(ctype)

    def is_true(self, ctype: T) -> bool:
        """Whether the condition exists with status True."""
        return self._is_true(ctype)

    def terminal(self, types: tuple[S, ...]) -> S | None:
        """The first of the kind's terminal `types` that is True (the job has finished), else None.

        Typed by `types`, a subset of the kind's condition types, so the answer names only them.
        """
        return next((t for t in types if self._is_true(t)), None)

    def _get(self, ctype: str) -> Condition | None:
        return next((c for c in self._items if c.get("type") == ctype), None)

    def _is_true(self, ctype: str) -> bool:
        cond = self._get(ctype)
        return cond is not None and cond.get("status") == "True"

    def set(self, ctype: T, status: bool, reason: str, message: str, *, at: datetime | None = None) -> None:
        """Set a condition; its times move only when something about it really changes.

        `at`: when the change happened, if a child keeps that time (else now). A sync that reads the
        status of one write earlier then stamps the change as the sync that made it did, so the two
        statuses it alternates between under stale reads are one and the status is a fixed point."""
        value = "True" if status else "False"
        stamp = rfc3339(at) if at is not None else self._now
        cond = self.get(ctype)
        if cond is None:
            self._items.append({"type": ctype, "status": value, "reason": reason,
                                "message": message, "lastUpdateTime": stamp,
                                "lastTransitionTime": stamp})
            return
        if (cond.get("status"), cond.get("reason"), cond.get("message")) == (value, reason, message):
            return
        if cond.get("status") != value:
            cond["lastTransitionTime"] = stamp
        cond["status"], cond["reason"], cond["message"] = value, reason, message
        cond["lastUpdateTime"] = stamp

    def clear(self, ctype: T, reason: str, message: str, *, at: datetime | None = None) -> None:
        """Set a condition False if the job has it True; never add a False condition."""
        if self.is_true(ctype):
            self.set(ctype, False, reason, message, at=at)

    def ordered(self) -> list[Condition]:
        """The list with the current state's condition moved last (the State printer column)."""
        state = next((t for t in self._order if self._is_true(t)), None)
        if state is None:
            return list(self._items)
        return [c for c in self._items if c["type"] != state] + [c for c in self._items if c["type"] == state]
