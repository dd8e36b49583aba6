"""Why the scheduler has not placed a pod yet, in words a condition can quote, for both job kinds.

A pod the scheduler cannot place stays Pending, and the scheduler says why in the pod's
`PodScheduled` condition: status False, reason `Unschedulable` and a message such as `0/1 nodes are
available: 1 Insufficient cpu.`, or reason `SchedulingGated` while a scheduling gate (Kueue's, say)
holds it. That condition is the one place the reason is read from: the hooks stay pure, and the
same observed pods give the same words.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from hooks.shared.termination import MAX_MESSAGE, MAX_REASON, first_line

POD_SCHEDULED = "PodScheduled"


def unscheduled_reason(status: Mapping[str, Any]) -> str | None:
    """The PodScheduled condition's reason (`Unschedulable`, `SchedulingGated`) while False, bounded; else None."""
    for condition in status.get("conditions") or ():
        if isinstance(condition, Mapping) and condition.get("type") == POD_SCHEDULED:
            return first_line(condition.get("reason"), MAX_REASON) if condition.get("status") == "False" else None
    return None


def unscheduled(status: Mapping[str, Any]) -> str | None:
    """The scheduler's reason a pod is not placed (its PodScheduled condition's message, one line,
    bounded; its reason when it has no message), or None when it is placed or nothing said why."""
    for condition in status.get("conditions") or ():
        if isinstance(condition, Mapping) and condition.get("type") == POD_SCHEDULED:
            if condition.get("status") != "False":
                return None
            return first_line(condition.get("message"), MAX_MESSAGE) or first_line(condition.get("reason"), MAX_MESSAGE)
    return None


def held_words(held: Sequence[tuple[str, str, str]], verbs: Mapping[str, str], limit: int) -> list[tuple[str, str]]:
    """What holds pods back, for a condition's message: `held` is (who, pod, reason) in the job's
    order; the first `limit` pods are named, those with the same holder and reason together
    (`pods a, b are not scheduled: reason`, the verb by holder from `verbs`), then how many more.
    Returns (who, words) in order of first appearance."""
    groups: dict[tuple[str, str], list[str]] = {}
    for who, pod, reason in held[:limit]:
        groups.setdefault((who, reason.rstrip(".")), []).append(pod)
    said = [(who, f"pod {pods[0]} is not {verbs[who]}: {reason}" if len(pods) == 1 else
             f"pods {', '.join(pods)} are not {verbs[who]}: {reason}") for (who, reason), pods in groups.items()]
    if len(held) > limit:
        said[-1] = (said[-1][0], f"{said[-1][1]}; and {len(held) - limit} more")
    return said
