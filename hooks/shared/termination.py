"""How a pod ended, in words a condition can quote: reason and message, bounded, from one place.

Both job kinds report a lost or failed pod the same way: its exit code, why it ended, and the
first line of what it said, cut so that a condition (and a record that keeps it) stays small
whatever a container writes to its termination log.

Why it ended, most telling first:
- the pod's `DisruptionTarget` condition when True: Kubernetes adds it before it disrupts a pod
  (PreemptionByScheduler, EvictionByEvictionAPI, DeletionByTaintManager, TerminationByKubelet),
  and the container then shows only a kill by signal, which says nothing of why;
- the pod's own `status.reason` (Evicted, DeadlineExceeded, ...);
- the container's terminated reason (OOMKilled, Error, ...).
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

MAX_REASON = 64  # characters of a reason (Kubernetes' own are CamelCase words)
MAX_MESSAGE = 200  # characters of a termination message a condition quotes
DISRUPTION_TARGET = "DisruptionTarget"


def first_line(value: Any, limit: int) -> str | None:
    """The first non-empty line of a text, at most `limit` characters (an ellipsis says it was cut)."""
    if not isinstance(value, str):
        return None
    line = next((part.strip() for part in value.splitlines() if part.strip()), "")
    if not line:
        return None
    return line if len(line) <= limit else line[: limit - 1] + "…"


def terminated(state: Any, key: str, limit: int) -> str | None:
    """A text field of a container state's `terminated` part, bounded; None when there is none."""
    part = state.get("terminated") if isinstance(state, Mapping) else None
    return first_line(part.get(key), limit) if isinstance(part, Mapping) else None


def exit_code(state: Any) -> int | None:
    """The exit code of a container state's `terminated` part, if it has one."""
    part = state.get("terminated") if isinstance(state, Mapping) else None
    code = part.get("exitCode") if isinstance(part, Mapping) else None
    return code if isinstance(code, int) and not isinstance(code, bool) else None


def disruption(status: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The pod's DisruptionTarget condition when it is True and names a reason, else None."""
    for cond in status.get("conditions") or ():
        # A decoded request holds dicts: test the exact type first, the ABC only for other mappings
        # (this runs for every condition of every observed pod on every sync).
        if ((type(cond) is dict or isinstance(cond, Mapping)) and cond.get("type") == DISRUPTION_TARGET
                and cond.get("status") == "True" and first_line(cond.get("reason"), MAX_REASON)):
            return cond
    return None


def end_of(status: Mapping[str, Any], state: Any) -> tuple[str | None, str | None]:
    """Why a pod ended and what it said, first lines, bounded (see the module): its disruption's
    reason and message, else its own, else its container's termination (which, under
    FallbackToLogsOnError, is the tail of its log). A message falls through on its own: a
    disruption without one still gives the reason, and the next message found."""
    disrupted = disruption(status)
    if disrupted is not None:
        reason = first_line(disrupted.get("reason"), MAX_REASON)
        message = first_line(disrupted.get("message"), MAX_MESSAGE)
        if message is not None:
            return reason, message
    else:
        reason = first_line(status.get("reason"), MAX_REASON) or terminated(state, "reason", MAX_REASON)
    return reason, first_line(status.get("message"), MAX_MESSAGE) or terminated(state, "message", MAX_MESSAGE)


# The framework container's default terminationMessagePolicy, where the user set none: the tail of
# its log becomes the termination message when it fails without writing one, so the job's status
# can still say why after the pod is gone.
LOG_FALLBACK = "FallbackToLogsOnError"


def with_log_fallback(container: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of a container with terminationMessagePolicy LOG_FALLBACK unless the user chose one."""
    return {**container, "terminationMessagePolicy": container.get("terminationMessagePolicy") or LOG_FALLBACK}
