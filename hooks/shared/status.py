"""Reading back the status the hook wrote on an earlier sync, whatever the job kind.

Status is the hook's only memory, but anyone with write access to the status subresource (or an
object stored before the CRD's status schema) can put anything there. A field that is not in the
shape the hook writes is treated as absent, and the reason is recorded in `statusWarnings`, a
short list kept in status so the user can see what was ignored; it never makes the sync fail.
"""
from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any, TypeGuard

from hooks.shared.conditions import parse_rfc3339
from hooks.shared.validation import MAX_INT32

WARNINGS_FIELD = "statusWarnings"
MAX_WARNINGS = 10
MAX_WARNING_LENGTH = 300
MAX_COUNTER = MAX_INT32  # the CRD declares status counters int32
_CONDITION_STATUSES = ("True", "False", "Unknown")
_CONDITION_STRINGS = ("reason", "message")
_CONDITION_TIMES = ("lastUpdateTime", "lastTransitionTime", "lastProbeTime")


class OldStatus:
    """The previous status, read field by field; each reader returns None (or empty) for a field
    of the wrong shape and records why. `condition_types`: the kind's, the only ones kept."""

    def __init__(self, raw: Any, *, condition_types: tuple[str, ...]):
        self._new_warnings: list[str] = []
        self._types = condition_types
        if raw is not None and not isinstance(raw, Mapping):
            self.warn("status", "is not an object")
            raw = {}
        self.raw: Mapping[str, Any] = raw or {}

    def warn(self, path: str, why: str) -> None:
        """Record that a field was ignored."""
        text = f"{path} {why}; it was ignored"
        self._new_warnings.append(text if len(text) <= MAX_WARNING_LENGTH
                                  else text[:MAX_WARNING_LENGTH - 3] + "...")

    def time(self, key: str) -> str | None:
        """An RFC 3339 timestamp with a zone, as rfc3339() writes it."""
        value = self.raw.get(key)
        if value is None:
            return None
        # parse_time refuses every non-string; the isinstance check is for the type checker.
        if not isinstance(value, str) or parse_time(value) is None:
            self.warn(f"status.{key}", "is not an RFC 3339 time with a zone (like 2026-01-01T00:00:00Z)")
            return None
        return value

    def counter(self, key: str) -> int | None:
        """A non-negative int32."""
        value = self.raw.get(key)
        if value is None:
            return None
        if not is_counter(value):
            self.warn(f"status.{key}", f"is not an integer from 0 to {MAX_COUNTER}")
            return None
        return value

    def object(self, key: str) -> Mapping[str, Any]:
        """A JSON object; {} when absent or of another type."""
        value = self.raw.get(key)
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            self.warn(f"status.{key}", "is not an object")
            return {}
        return value

    def conditions(self) -> list[dict[str, Any]]:
        """The conditions whose fields all have the shape the hook writes, one per type."""
        value = self.raw.get("conditions")
        if value is None:
            return []
        if not isinstance(value, list):
            self.warn("status.conditions", "is not a list")
            return []
        kept: list[dict[str, Any]] = []
        for i, cond in enumerate(value):
            problem = condition_problem(cond, self._types)
            if problem is None and any(c["type"] == cond["type"] for c in kept):
                problem = "repeats a condition type"
            if problem is not None:
                self.warn(f"status.conditions[{i}]", problem)
                continue
            kept.append(dict(cond))
        return kept

    def warnings(self) -> list[str]:
        """The warnings to write: those already in status, then this sync's new ones, newest kept."""
        old = self.raw.get(WARNINGS_FIELD)
        kept = [w for w in old if isinstance(w, str) and len(w) <= MAX_WARNING_LENGTH] \
            if isinstance(old, list) else []
        for warning in self._new_warnings:
            if warning not in kept:
                kept.append(warning)
        return kept[-MAX_WARNINGS:]


def parse_time(value: Any) -> datetime | None:
    """A timestamp with a zone, or None when the value is anything else."""
    if not isinstance(value, str) or len(value) > 64:
        return None
    try:
        moment = parse_rfc3339(value)
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else None


def plus_seconds(moment: datetime, seconds: int) -> datetime | None:
    """moment + seconds, or None when that is past the year 9999 (a timer that never fires)."""
    try:
        return moment + timedelta(seconds=seconds)
    except OverflowError:
        return None


def is_counter(value: Any) -> TypeGuard[int]:
    """A non-negative int32, the type of every status counter."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_COUNTER


def condition_problem(cond: Any, types: tuple[str, ...]) -> str | None:
    """Why a condition is not in the shape the hooks write (None when it is)."""
    if not isinstance(cond, Mapping):
        return "is not an object"
    if cond.get("type") not in types:
        return f"has no type of {', '.join(types)}"
    if cond.get("status") not in _CONDITION_STATUSES:
        return "has no status of True, False, Unknown"
    if any(cond.get(k) is not None and not isinstance(cond[k], str) for k in _CONDITION_STRINGS):
        return "has a reason or message that is not a string"
    if any(cond.get(k) is not None and parse_time(cond[k]) is None for k in _CONDITION_TIMES):
        return "has a time that is not RFC 3339 with a zone"
    return None
