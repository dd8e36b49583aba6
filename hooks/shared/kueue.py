"""Why Kueue (v0.11 and later, plain-pod groups) has not admitted a job's pods yet, in Kueue's own words.

Kueue's pod webhook holds every pod of a queued group behind the scheduling gate
`kueue.x-k8s.io/admission` and writes nothing on the pods while the group waits: the pod's
PodScheduled condition only says `SchedulingGated`. Kueue's reason is on the group's Workload (named
after the group, in the job's namespace), in its `QuotaReserved` condition (status False, reason
`Pending` or `Inadmissible`, and a message such as `couldn't assign flavors to pod set 5e0a3ffd:
insufficient unused quota for cpu in flavor default, 200m more needed`), and in its `Admitted`
condition when quota is reserved but admission checks are still due (Kueue v0.17.0:
`pkg/scheduler/scheduler.go`, `pkg/workload/workload.go`). A job's customize hook relates that
Workload (docs/ecosystem.md, "Kueue"); this module reads it. Pure functions over objects handed in.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from hooks.shared.errors import InvalidRequest
from hooks.shared.termination import MAX_MESSAGE, MAX_REASON, first_line

KUEUE_GATE = "kueue.x-k8s.io/admission"
WORKLOAD_API_VERSION = "kueue.x-k8s.io/v1beta2"
# The `related` key of the Workloads a customize hook relates (`<Kind>.<apiVersion>`, as children are keyed).
WORKLOAD_KEY = f"Workload.{WORKLOAD_API_VERSION}"


@dataclass(frozen=True)
class Pending:
    """Why Kueue has not admitted a Workload: its condition's reason and message (one line, bounded)."""

    reason: str
    message: str | None


def workload_rule(names: list[str]) -> dict[str, Any]:
    """A customize hook's relatedResources entry for the Workloads of these names, in the parent's namespace."""
    return {"apiVersion": WORKLOAD_API_VERSION, "resource": "workloads", "names": names}


def gated_by_kueue(spec: Any) -> bool:
    """Whether a pod's spec still carries Kueue's admission gate."""
    gates = spec.get("schedulingGates") if isinstance(spec, Mapping) else None
    return isinstance(gates, list) and any(isinstance(g, Mapping) and g.get("name") == KUEUE_GATE for g in gates)


def read_related_workloads(request: Mapping[str, Any]) -> Mapping[str, Any]:
    """The related Workloads of a sync request by name; none when the request relates none."""
    related = request.get("related")
    if related is None:
        return {}
    if not isinstance(related, Mapping):
        raise InvalidRequest("related: must be an object (kind -> name -> object)")
    workloads = related.get(WORKLOAD_KEY)
    if workloads is None:
        return {}
    if not isinstance(workloads, Mapping):
        raise InvalidRequest(f"related.{WORKLOAD_KEY}: must be an object (name -> Workload)")
    return workloads


def pending(workload: Any) -> Pending | None:
    """Why Kueue holds a Workload back: its QuotaReserved condition when False, else its Admitted
    condition when False (quota reserved, admission checks due); None when it is admitted, or when
    Kueue has said nothing yet."""
    status = workload.get("status") if isinstance(workload, Mapping) else None
    conditions = status.get("conditions") if isinstance(status, Mapping) else None
    by_type = {c.get("type"): c for c in conditions if isinstance(c, Mapping)} if isinstance(conditions, list) else {}
    if (by_type.get("Admitted") or {}).get("status") == "True":
        return None
    for kind in ("QuotaReserved", "Admitted"):
        condition = by_type.get(kind)
        if condition is not None and condition.get("status") == "False":
            reason = first_line(condition.get("reason"), MAX_REASON) or kind
            return Pending(reason, first_line(condition.get("message"), MAX_MESSAGE))
    return None
