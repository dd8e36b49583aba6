"""Job conditions: setting them without churn, and keeping the current state last."""
from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, cast

from hooks.shared.k8s import Condition

# Highest first: the first of these that is True is the job's state, shown by `kubectl get mxj`.
STATE_ORDER = ("Succeeded", "Failed", "Suspended", "Restarting", "Running", "Created")
TERMINAL = ("Succeeded", "Failed")


def rfc3339(moment: datetime) -> str:
    """A UTC timestamp with second precision, as Kubernetes writes them."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_rfc3339(text: str) -> datetime:
    """Parse a timestamp written by rfc3339 (or any ISO 8601 form Kubernetes uses)."""
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


class Conditions:
    """An ordered condition list being updated for one sync at one instant."""

    def __init__(self, existing: list[Any] | None, now: datetime):
        self._items: list[Condition] = [cast(Condition, dict(c)) for c in existing or [] if isinstance(c, dict)]
        self._now = rfc3339(now)

    def get(self, ctype: str) -> Condition | None:
        """The condition of this type, if the job has one."""
        return next((c for c in self._items if c.get("type") == ctype), None)

    def is_true(self, ctype: str) -> bool:
        """Whether the condition exists with status True."""
        cond = self.get(ctype)
        return cond is not None and cond.get("status") == "True"

    def terminal(self) -> str | None:
        """Succeeded or Failed when the job has finished, else None."""
        return next((t for t in TERMINAL if self.is_true(t)), None)

    def set(self, ctype: str, status: bool, reason: str, message: str) -> None:
        """Set a condition; its times move only when something about it really changes."""
        value = "True" if status else "False"
        cond = self.get(ctype)
        if cond is None:
            self._items.append({"type": ctype, "status": value, "reason": reason,
                                "message": message, "lastUpdateTime": self._now,
                                "lastTransitionTime": self._now})
            return
        if (cond.get("status"), cond.get("reason"), cond.get("message")) == (value, reason, message):
            return
        if cond.get("status") != value:
            cond["lastTransitionTime"] = self._now
        cond["status"], cond["reason"], cond["message"] = value, reason, message
        cond["lastUpdateTime"] = self._now

    def clear(self, ctype: str, reason: str, message: str) -> None:
        """Set a condition False if the job has it True; never add a False condition."""
        if self.is_true(ctype):
            self.set(ctype, False, reason, message)

    def ordered(self, state_order: tuple[str, ...] = STATE_ORDER) -> list[Condition]:
        """The list with the current state's condition moved last (the State printer column).

        `state_order` names a kind's condition types, highest first; MXJob's by default.
        """
        state = next((t for t in state_order if self.is_true(t)), None)
        if state is None:
            return list(self._items)
        return [c for c in self._items if c["type"] != state] + [c for c in self._items if c["type"] == state]
