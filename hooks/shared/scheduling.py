"""Why the scheduler has not placed a pod yet, in words a condition can quote, for both job kinds.

A pod the scheduler cannot place stays Pending, and the scheduler says why in the pod's
`PodScheduled` condition: status False, reason `Unschedulable` and a message such as `0/1 nodes are
available: 1 Insufficient cpu.`, or reason `SchedulingGated` while a scheduling gate (Kueue's, say)
holds it. That condition is the one place the reason is read from: the hooks stay pure, and the
same observed pods give the same words.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hooks.shared.termination import MAX_MESSAGE, first_line

POD_SCHEDULED = "PodScheduled"


def unscheduled(status: Mapping[str, Any]) -> str | None:
    """The scheduler's reason a pod is not placed (its PodScheduled condition's message, one line,
    bounded; its reason when it has no message), or None when it is placed or nothing said why."""
    for condition in status.get("conditions") or ():
        if isinstance(condition, Mapping) and condition.get("type") == POD_SCHEDULED:
            if condition.get("status") != "False":
                return None
            return first_line(condition.get("message"), MAX_MESSAGE) or first_line(condition.get("reason"), MAX_MESSAGE)
    return None
