"""What the core reads from observed children: each child rule's objects, and a small, flat view of each pod."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple, TypeGuard, get_args

from hooks.mxjob.names import JOB_ATTEMPT_LABEL, KUEUE_POD_GROUP_LABEL, RESTART_ATTEMPT_LABEL, child_name
from hooks.mxjob.spec import KUEUE_QUEUE_KEY, MXJob
from hooks.mxjob.template import MAIN_CONTAINER
from hooks.mxjob.vocabulary import one_of
from hooks.shared.k8s import CONFIG_MAP_KEY, POD_KEY, SERVICE_KEY
from hooks.shared.kueue import GroupEviction, evicted_by_queue, gated_by_kueue, pending
from hooks.shared.scheduling import unscheduled, unscheduled_reason
from hooks.shared.termination import (
    MAX_REASON,
    Said,
    disruption,
    end_of,
    exit_code,
    is_log_tail,
    terminated,
    terminated_said,
)

# A pod's status.phase as Kubernetes spells it. A value outside these (no kubelet writes one)
# reads as Unknown, which the lifecycle treats like any phase it does not act on.
PodPhase = Literal["Pending", "Running", "Succeeded", "Failed", "Unknown"]
POD_PHASES: tuple[PodPhase, ...] = get_args(PodPhase)


class Observed(NamedTuple):
    """The observed children of one MXJob, by child rule, each keyed by name."""

    pods: Mapping[str, Any]
    services: Mapping[str, Any]
    config_maps: Mapping[str, Any]
    podgroups: Mapping[str, Any]  # empty unless gang scheduling is on
    podgroup_key: str = ""  # the PodGroup child rule's key when gang scheduling is on
    # The ServiceAccount, Role and RoleBinding rules' children (progress reporting,
    # hooks.shared.progress), by rule key, for the rules the request has.
    access: Mapping[str, Mapping[str, Any]] = {}

    def any(self) -> bool:
        """Whether the job has any child at all."""
        return bool(self.pods or self.services or self.config_maps or self.podgroups
                    or any(self.access.values()))

    def by_key(self) -> list[tuple[str, Mapping[str, Any]]]:
        """Each child rule's key ("<Kind>.<apiVersion>") with its observed children."""
        groups = [(POD_KEY, self.pods), (SERVICE_KEY, self.services), (CONFIG_MAP_KEY, self.config_maps)]
        if self.podgroup_key:
            groups.append((self.podgroup_key, self.podgroups))
        groups += list(self.access.items())
        return groups


@dataclass(frozen=True)
class PodView:
    """The facts of one observed pod that decide the job's lifecycle."""

    name: str
    rtype: str
    index: int
    uid: str
    phase: PodPhase
    terminating: bool
    exit_code: int | None
    restarts: int
    last_exit_code: int | None = None  # of the mxnet container's previous run (lastState), if it restarted
    attempt: int = 0  # how many times the operator had recreated this pod's slot when it created it
    finished_at: str | None = None  # when the mxnet container terminated (state.terminated.finishedAt)
    started_at: str | None = None  # when the mxnet container started running (state.running.startedAt)
    job_attempt: int = 0  # the job attempt the pod was created for (its job-attempt label)
    # Why it ended: the DisruptionTarget condition's reason (PreemptionByScheduler, ...), else the
    # pod's (Evicted, ...), else the container's (OOMKilled, Error); hooks.shared.termination.
    reason: str | None = None
    # The line quoted of that condition's, the pod's or the termination message, bounded
    # (hooks.shared.termination.quoted_line); log_line: it is only the last line of a log tail.
    message: str | None = None
    log_line: bool = False
    # Why the scheduler has not placed it (its PodScheduled condition; hooks.shared.scheduling), while Pending.
    unscheduled: str | None = None
    # While Kueue's admission gate holds it: why Kueue has not admitted its group, in Kueue's words
    # (the group's Workload, related by the customize hook; hooks.shared.kueue).
    queued: str | None = None
    # Who holds it back and their short reason (`Kueue: Pending`, `Scheduler: Unschedulable`), while Pending.
    held: str | None = None
    last_reason: str | None = None  # the container's previous run's reason and message, after an in-place restart
    last_message: str | None = None
    last_log_line: bool = False
    # Taken away by a disruption (its DisruptionTarget condition True: preempted, evicted) rather than
    # failed on its own; see view_pods.
    disrupted: bool = False
    grouped: bool = False  # in a Kueue plain-pod group (its pod-group-name label): Kueue keeps it until the group ends
    # Stopped by Kueue (its TerminationTarget condition True: the queue evicted or preempted the
    # job's Workload, or stopped the group otherwise), as it goes or once Failed; not a Succeeded pod
    # (Kueue deletes those too when the Workload is deleted, and a succeeded index is never rerun).
    # Its reason and message are `reason` and `message`; the job restarts whole, not counted
    # (docs/lifecycle.md, "Evictions by the queue").
    evicted: bool = False

    @property
    def said(self) -> Said | None:
        """What the pod said as it ended, as hooks.shared.termination quotes it."""
        return Said(self.message, self.log_line) if self.message else None

    @property
    def last_said(self) -> Said | None:
        """What its container's previous run said, after an in-place restart."""
        return Said(self.last_message, self.last_log_line) if self.last_message else None

    @property
    def active(self) -> bool:
        """Running and not on its way out."""
        return self.phase == "Running" and not self.terminating

    @property
    def finished(self) -> bool:
        """Succeeded or Failed."""
        return self.phase in ("Succeeded", "Failed")


@dataclass(frozen=True)
class Slot:
    """One replica of the job: its type and index (its Pod and Service are named after both)."""

    rtype: str
    index: int


def is_live(obj: Any) -> TypeGuard[Mapping[str, Any]]:
    """An observed child that is not on its way out (deleting it again would change nothing)."""
    return isinstance(obj, Mapping) and not (obj.get("metadata") or {}).get("deletionTimestamp")


def replica_slots(job: MXJob) -> dict[str, Slot]:
    """Every child name of the job mapped to its slot, in creation order."""
    return {child_name(job.name, rtype, i): Slot(rtype, i)
            for rtype, spec in job.replicas.items() for i in range(spec.replicas)}


def view_pods(slots: Mapping[str, Slot], observed: Mapping[str, Any],
              workloads: Mapping[str, Any] | None = None) -> dict[str, PodView]:
    """Views of the observed pods that belong to a replica slot; strays are left out (deleted).
    `workloads`: the related Kueue Workloads by name (the customize hook's; none without it)."""
    views = {}
    for name, pod in observed.items():
        slot = slots.get(name)
        if slot is None or not isinstance(pod, Mapping):
            continue
        meta = pod.get("metadata") or {}
        status = pod.get("status") or {}
        main = _main_container_status(status)
        state, last_state = main.get("state"), main.get("lastState")
        labels = meta.get("labels") or {}
        log_tail = is_log_tail(_main_container_spec(pod.get("spec")))
        reason, said = end_of(status, state, log_tail=log_tail)
        last_said = terminated_said(last_state, log_tail=log_tail)
        phase, terminating = _phase(status.get("phase")), bool(meta.get("deletionTimestamp"))
        disrupted = disruption(status) is not None and (terminating or phase == "Failed")
        evicted = evicted_by_queue(status, terminating=terminating) is not None
        # A pod being taken away by a disruption (kube-scheduler preemption, the eviction API) is lost
        # from the first sync that sees it: Failed, with no exit code (its container shows only the kill,
        # which says nothing of why). Read so whether it still runs, stops or has stopped, the view stays
        # the same while it goes (a fixed point); a sync that never sees it (gone before) only recreates it.
        # A pod Kueue stops is taken alike: Kueue deletes it right after the condition.
        taken = terminating and (disrupted or evicted)
        views[name] = PodView(
            name=name, rtype=slot.rtype, index=slot.index, uid=str(meta.get("uid", "")),
            phase="Failed" if taken else phase,
            terminating=terminating, disrupted=disrupted, evicted=evicted,
            grouped=isinstance(labels.get(KUEUE_POD_GROUP_LABEL), str),
            exit_code=None if taken else exit_code(state), restarts=_int(main.get("restartCount")),
            last_exit_code=exit_code(last_state),
            attempt=_attempt(labels.get(RESTART_ATTEMPT_LABEL)),
            finished_at=_state_time(state, "terminated", "finishedAt"),
            started_at=_state_time(state, "running", "startedAt"),
            job_attempt=_attempt(labels.get(JOB_ATTEMPT_LABEL)),
            reason=reason, message=said.text if said else None, log_line=bool(said and said.log),
            **({} if taken else _held(pod, workloads or {})),
            last_reason=terminated(last_state, "reason", MAX_REASON),
            last_message=last_said.text if last_said else None, last_log_line=bool(last_said and last_said.log),
        )
    return views


def stopped_by_queue(slots: Mapping[str, Slot], missing: list[str], eviction: GroupEviction,
                     job_attempt: int) -> dict[str, PodView]:
    """Views of the pods of a job attempt's group that Kueue stopped and let go before any sync saw
    them go (`missing`: their slots' names), as a sync that saw them stopping would have read them:
    Failed, evicted, in Kueue's words (`eviction`, from the group's Workload). Kueue's finalizer keeps a
    stopped pod only until its group is finished, a moment after the pod stops; without these a sync
    would create the same pods again, in the group Kueue has just evicted."""
    return {name: PodView(name=name, rtype=slots[name].rtype, index=slots[name].index, uid="", phase="Failed",
                          terminating=True, exit_code=None, restarts=0, job_attempt=job_attempt, evicted=True,
                          grouped=True, reason=eviction.reason, message=eviction.message)
            for name in missing}


def _held(pod: Mapping[str, Any], workloads: Mapping[str, Any]) -> dict[str, str | None]:
    """A Pending pod's `unscheduled`, `queued` and `held` (PodView): Kueue holds a pod of a Kueue pod group
    while its admission gate is on (the words of its group's Workload, when related), else the scheduler,
    if it says so."""
    status = pod.get("status") or {}
    if _phase(status.get("phase")) != "Pending":
        return {}
    why = {"unscheduled": unscheduled(status)}
    labels = (pod.get("metadata") or {}).get("labels") or {}
    group, queue = labels.get(KUEUE_POD_GROUP_LABEL), labels.get(KUEUE_QUEUE_KEY)
    if gated_by_kueue(pod.get("spec")) and isinstance(group, str) and isinstance(queue, str):
        said = pending(workloads.get(group))
        if said is None:
            return {**why, "queued": f"LocalQueue {queue} has not admitted them yet", "held": "Kueue"}
        words = f"Workload {group} of LocalQueue {queue} is {said.reason}"
        return {**why, "queued": f"{words}: {said.message}" if said.message else words, "held": f"Kueue: {said.reason}"}
    reason = unscheduled_reason(status)
    return {**why, "held": f"Scheduler: {reason}"} if why["unscheduled"] and reason else why


def _main_container_spec(spec: Any) -> Mapping[str, Any] | None:
    """The main container of an observed pod's spec (its termination message policy), if listed."""
    containers = spec.get("containers") if isinstance(spec, Mapping) else None
    for container in containers if isinstance(containers, list) else ():
        if isinstance(container, Mapping) and container.get("name") == MAIN_CONTAINER:
            return container
    return None


def _main_container_status(status: Mapping[str, Any]) -> Mapping[str, Any]:
    for cs in status.get("containerStatuses") or []:
        if isinstance(cs, Mapping) and cs.get("name") == MAIN_CONTAINER:
            return cs
    return {}


def _state_time(state: Any, part: str, key: str) -> str | None:
    """A time of a container state: `terminated.finishedAt`, `running.startedAt`."""
    inner = state.get(part) if isinstance(state, Mapping) else None
    value = inner.get(key) if isinstance(inner, Mapping) else None
    return value if isinstance(value, str) else None


def _attempt(value: Any) -> int:
    """The restart-attempt label as written (a decimal counter); anything else reads as 0."""
    if isinstance(value, str) and value.isdigit() and len(value) <= 9:
        return int(value)
    return 0


def _phase(value: Any) -> PodPhase:
    """status.phase; a pod without one has not been scheduled yet: Pending."""
    if not value:
        return "Pending"
    return one_of(value, POD_PHASES) or "Unknown"


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0
