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
# A job's pods form one plain-pod group per attempt (docs/ecosystem.md, "Kueue"): every pod names
# its LocalQueue (QUEUE_LABEL), its group and the group's size.
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_CLASS_LABEL = "kueue.x-k8s.io/priority-class"
KUEUE_POD_GROUP_LABEL = "kueue.x-k8s.io/pod-group-name"
KUEUE_POD_GROUP_TOTAL_ANNOTATION = "kueue.x-k8s.io/pod-group-total-count"
# Kueue finishes a pod group marked so once none of its pods is active, and only then lets its
# failed pods go (its finalizer); unmarked, it keeps them for replacements in the same group,
# which pods of the same names can never be (docs/ecosystem.md, "Kueue").
KUEUE_RETRIABLE_IN_GROUP_ANNOTATION = "kueue.x-k8s.io/retriable-in-group"
# The job name's share of a group name: the rest is `-<uid prefix>-<attempt>` within a label value's 63.
_GROUP_NAME_PREFIX = 45


def pod_group_name(job_name: str, uid: str, job_attempt: int) -> str:
    """The Kueue pod group of one attempt of a job: `<job>-<uid prefix>-<attempt>`.

    One group per attempt: Kueue finishes a group once, so a restarted job's pods form a new one. The
    uid keeps a job created again under the same name out of the old one's group."""
    return f"{job_name[:_GROUP_NAME_PREFIX]}-{uid[:8]}-{job_attempt}"


def group_marks(queue: str, group: str, total: int) -> tuple[dict[str, str], dict[str, str]]:
    """The labels and annotations that put a pod in a Kueue plain-pod group of `total` pods."""
    return ({QUEUE_LABEL: queue, KUEUE_POD_GROUP_LABEL: group},
            {KUEUE_POD_GROUP_TOTAL_ANNOTATION: str(total), KUEUE_RETRIABLE_IN_GROUP_ANNOTATION: "false"})


WORKLOAD_API_VERSION = "kueue.x-k8s.io/v1beta2"
# The `related` key of the Workloads a customize hook relates (`<Kind>.<apiVersion>`, as children are keyed).
WORKLOAD_KEY = f"Workload.{WORKLOAD_API_VERSION}"


# The installation says its Kueue is v0.11 or later (docs/hooks-server.md): queued jobs' pods then
# form plain-pod groups. One setting for both kinds (its name is the one first shipped for MXJobs).
KUEUE_POD_GROUPS_SETTING = "MXJOB_KUEUE_POD_GROUPS"


def kueue_setting(value: str) -> bool:
    """MXJOB_KUEUE_POD_GROUPS read: "true" or "false"; anything else is the installation's error (ValueError)."""
    if value not in ("true", "false"):
        raise ValueError(f"{KUEUE_POD_GROUPS_SETTING}={value!r}: use true (Kueue v0.11 and later: plain-pod groups) "
                         "or false (Kueue v0.5-v0.10, or none: the default)")
    return value == "true"


# How many job attempts' Workloads, from the status's attempt on, one customize answer relates.
# Metacontroller keeps an answer per parent uid and generation (up to 20 minutes; docs/chainerjob.md),
# not per attempt: a job restarted more often than this within that time shows Kueue's words again
# once the answer is asked anew, and until then says only that Kueue holds its pods.
KUEUE_ATTEMPTS_RELATED = 8


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
