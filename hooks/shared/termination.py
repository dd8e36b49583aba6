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
    for cond in status.get("conditions") or []:
        if (isinstance(cond, Mapping) and cond.get("type") == DISRUPTION_TARGET and cond.get("status") == "True"
                and first_line(cond.get("reason"), MAX_REASON)):
            return cond
    return None


def end_reason(status: Mapping[str, Any], state: Any) -> str | None:
    """Why a pod ended: its disruption, else its own reason, else its container's (see the module)."""
    disrupted = disruption(status)
    if disrupted is not None:
        return first_line(disrupted.get("reason"), MAX_REASON)
    return first_line(status.get("reason"), MAX_REASON) or terminated(state, "reason", MAX_REASON)


def end_message(status: Mapping[str, Any], state: Any) -> str | None:
    """What it said, first line: the disruption's message, else the pod's, else the container's
    termination message (which, under FallbackToLogsOnError, is the tail of its log)."""
    disrupted = disruption(status)
    if disrupted is not None and first_line(disrupted.get("message"), MAX_MESSAGE):
        return first_line(disrupted.get("message"), MAX_MESSAGE)
    return first_line(status.get("message"), MAX_MESSAGE) or terminated(state, "message", MAX_MESSAGE)


# The framework container's default terminationMessagePolicy, where the user set none: the tail of
# its log becomes the termination message when it fails without writing one, so the job's status
# can still say why after the pod is gone.
LOG_FALLBACK = "FallbackToLogsOnError"


def with_log_fallback(container: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of a container with terminationMessagePolicy LOG_FALLBACK unless the user chose one."""
    return {**container, "terminationMessagePolicy": container.get("terminationMessagePolicy") or LOG_FALLBACK}
