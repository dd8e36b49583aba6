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

It also holds the one rule both kinds follow when Kueue stops a running job's pods (below).
"""
from __future__ import annotations

import ast
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from hooks.shared.errors import InvalidRequest
from hooks.shared.termination import MAX_MESSAGE, MAX_REASON, first_line, queue_eviction

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


def _conditions(workload: Any) -> dict[Any, Mapping[str, Any]]:
    """A Workload's status conditions by type, read defensively (none when it has no such list)."""
    status = workload.get("status") if isinstance(workload, Mapping) else None
    conditions = status.get("conditions") if isinstance(status, Mapping) else None
    return {c.get("type"): c for c in conditions if isinstance(c, Mapping)} if isinstance(conditions, list) else {}


def pending(workload: Any) -> Pending | None:
    """Why Kueue holds a Workload back: its QuotaReserved condition when False, else its Admitted
    condition when False (quota reserved, admission checks due); None when it is admitted, or when
    Kueue has said nothing yet."""
    by_type = _conditions(workload)
    if (by_type.get("Admitted") or {}).get("status") == "True":
        return None
    for kind in ("QuotaReserved", "Admitted"):
        condition = by_type.get(kind)
        if condition is not None and condition.get("status") == "False":
            reason = first_line(condition.get("reason"), MAX_REASON) or kind
            return Pending(reason, first_line(condition.get("message"), MAX_MESSAGE))
    return None


@dataclass(frozen=True)
class GroupEviction:
    """Kueue's words for the pods of a group it stopped: what it writes in each pod's TerminationTarget."""

    reason: str
    message: str | None


def group_eviction(workload: Any) -> GroupEviction | None:
    """Kueue's eviction of a pod group, read off the group's Workload: its Evicted condition when True,
    worded as Kueue words the TerminationTarget of each pod it stops (Kueue v0.17.0, jobframework's
    stopJob: reason `WorkloadEvictedDueTo<the condition's reason>`, the condition's message). Kueue
    sets the condition False again once it reserves quota for the Workload. The Workload outlives the
    pods it stopped (until they are gone): what tells a sync that first looks after they went that
    the queue took them. None when it says no eviction."""
    condition = _conditions(workload).get("Evicted")
    if condition is None or condition.get("status") != "True":
        return None
    cause = first_line(condition.get("reason"), MAX_REASON)
    reason = first_line(f"WorkloadEvictedDueTo{cause}", MAX_REASON) if cause else "WorkloadEvicted"
    return GroupEviction(reason or "WorkloadEvicted", first_line(condition.get("message"), MAX_MESSAGE))


# --- Evictions by the queue: one rule for both kinds (docs/lifecycle.md, "Evictions by the queue") ---
#
# Kueue stops a pod group (eviction, preemption, deactivation, a deleted Workload ...) by writing
# TerminationTarget on each of its pods and deleting them (hooks.shared.termination.queue_eviction).
# Decided: the job restarts whole as a new attempt, in a new group that Kueue queues and admits
# again, and that attempt is NOT counted against the job's restart budget (an MXJob's backoffLimit
# and failurePolicy.maxRestarts, a ChainerJob's runPolicy.maxRestarts): the queue took its pods back,
# the job did not fail, and Kueue's own integrations requeue a job for it without counting anything.

# The attempt record's field of an attempt a queue eviction began: Kueue's reason and message. It is
# the one mark that leaves an attempt uncounted (records are written once, so a stale read cannot
# count it again or give it back).
QUEUE_EVICTION = "queueEviction"
EVICTED_WORDS = "Kueue evicted it"


def evicted_by_queue(status: Mapping[str, Any], *, terminating: bool) -> Mapping[str, Any] | None:
    """Kueue's TerminationTarget condition of a pod the queue stopped, seen as it goes (`terminating`)
    or once the kubelet wrote it Failed; None otherwise. A Succeeded pod is none: Kueue deletes those
    too when a Workload is deleted, and a success stays a success."""
    found = queue_eviction(status)
    phase = status.get("phase")
    return found if found is not None and (terminating or phase == "Failed") and phase != "Succeeded" else None


def eviction_record(reason: str | None, message: str | None) -> dict[str, str]:
    """What an attempt record keeps of a queue eviction (under QUEUE_EVICTION): Kueue's reason and
    message, as hooks.shared.termination.end_of bounds them."""
    kept = {"reason": reason or ""}
    if message:
        kept["message"] = message
    return kept


def queue_eviction_of(data: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """What an attempt record keeps of the queue eviction that began the attempt, None for any other record."""
    value = data.get(QUEUE_EVICTION)
    return value if isinstance(value, Mapping) else None


def counts_against_restarts(data: Mapping[str, Any]) -> bool:
    """Whether the attempt this record began counts against the job's restart budget: every one but
    those a queue eviction began (see above)."""
    return queue_eviction_of(data) is None


def kueue_words(queue: Mapping[str, Any]) -> str:
    """Kueue's reason and message as a record keeps them: `WorkloadEvictedDueToPreempted: 'Preempted
    to accommodate ...'`, read defensively (only the hook writes a record)."""
    reason = first_line(queue.get("reason"), MAX_REASON) or "no reason given"
    message = first_line(queue.get("message"), MAX_MESSAGE)
    return f"{reason}: {message!r}" if message else reason


def eviction_cause(queue: Mapping[str, Any]) -> str:
    """Why an attempt began, as a condition says it: `Kueue evicted it (<reason>: '<message>')`."""
    return f"{EVICTED_WORDS} ({kueue_words(queue)})"


def eviction_from_cause(cause: str) -> dict[str, str]:
    """The record's part read back from eviction_cause's words (a restart the status shows before
    its record is observed is answered again from them); a reason alone when they do not parse."""
    words = cause.removeprefix(f"{EVICTED_WORDS} (").removesuffix(")")
    reason, sep, quoted = words.partition(": ")
    try:
        message = ast.literal_eval(quoted) if sep else None
    except (ValueError, SyntaxError):
        return eviction_record(words, None)
    return eviction_record(reason, message if isinstance(message, str) else None)
