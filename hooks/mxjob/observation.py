"""What one sync of a valid MXJob observes, read once: the old status, the pods and the memories.

Everything the lifecycle decides from is in the frozen Observation that `observe` builds: the
failures are classified and the memories merged here, so the transitions only choose and build.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple

from hooks.mxjob.names import pod_group_name
from hooks.mxjob.observed import PodView, replica_slots, stopped_by_queue
from hooks.mxjob.replicas import completed_before
from hooks.mxjob.restarts import (
    Failures,
    carried_restarts,
    classify_failures,
    live_restarts,
    merge_history,
    no_failures,
    read_history,
    restart_total,
    with_collateral,
)
from hooks.mxjob.spec import MXJob
from hooks.mxjob.vocabulary import STATE_ORDER, TERMINAL, ConditionType
from hooks.shared.conditions import Conditions
from hooks.shared.k8s import RestartRecord
from hooks.shared.kueue import counts_against_restarts, group_eviction
from hooks.shared.memory import Record
from hooks.shared.progress import Report
from hooks.shared.status import OldStatus


class Memory(NamedTuple):
    """What the children remember: the outcome record and the restart records by pod name."""

    outcome: Record | None = None
    restarts: Mapping[str, Mapping[int, Record]] = {}
    attempts: Mapping[int, Record] = {}  # the job-restart records `<job>-attempt-<n>`, by n
    progress: Mapping[str, Report] = {}  # the reports in the observed `<job>-progress` ConfigMap
    run_started: str | None = None  # when the run began, as the Services keep it (hooks.mxjob.children.run_started)
    suspended_since: datetime | None = None  # when the job was suspended, as `<job>-suspension` keeps it


NO_MEMORY = Memory()


class Stall(NamedTuple):
    """A stall found now (hooks.mxjob.stall): the stallPolicy action, and the clause that says why."""

    action: str
    clause: str


@dataclass(frozen=True)
class Observation:
    """The facts one sync decides from; nothing here changes once `observe` has built it."""

    job: MXJob
    now: datetime
    old: OldStatus  # the status as the parent shows it (it collects the warnings of what was ignored)
    old_conditions: tuple[Mapping[str, Any], ...]
    all_pods: Mapping[str, PodView]
    pods: Mapping[str, PodView]  # all_pods but those leaving
    # Pods of an earlier attempt that did not succeed: left out of the answer (so deleted), of
    # the counts and of the failures.
    leaving: Mapping[str, PodView]
    restarts: Mapping[str, Mapping[int, Record]]
    attempt_records: Mapping[int, Record]
    was_terminal: bool
    resumed: bool  # the old status says Suspended: a transition that runs the job resumes it
    start_time: str | None  # as the parent shows it
    run_started: str | None  # as the job's Services keep it: what a stale parent cannot undo
    completion_time: str | None
    cleaned_up_time: str | None
    old_attempt: int
    known_attempt: int  # the attempt the children show (its records, the pods' labels)
    attempt: int  # the attempt this sync runs: one more when a pod is lost for a whole-job restart now
    # The indexes completed as last written, with this sync's successes folded in (also after
    # the job has finished: workers often exit a moment after the scheduler).
    completed: Mapping[str, frozenset[int]]
    succeeded: bool  # every deciding pod (MXJob.deciding_slots) has succeeded
    failures: Failures
    restart_total: int
    stall: Stall | None = None  # the job has stalled now (runPolicy.stallPolicy, hooks.mxjob.stall)
    evicting: bool = False  # this sync decides a whole-job restart because Kueue stopped the job's pods
    # Attempts a queue eviction began (their records say so; and the one decided now, if Kueue
    # stopped its pods): not counted against backoffLimit or failurePolicy.maxRestarts.
    uncounted_attempts: int = 0
    # The container restarts of the attempt a queue eviction replaces now, for its record to carry.
    evicted_restarts: int = 0
    # The container restarts queue evictions carried over: their records', and the one decided now.
    carried_restarts: int = 0

    @property
    def counted_attempts(self) -> int:
        """The whole-job restarts counted against backoffLimit and failurePolicy.maxRestarts."""
        return self.attempt - self.uncounted_attempts

    @property
    def history(self) -> Mapping[str, RestartRecord]:
        """The restart history with this sync's failures counted."""
        return self.failures.history

    def conditions(self) -> Conditions[ConditionType]:
        """A fresh copy of the old conditions, for one transition to set."""
        return Conditions(self.old_conditions, self.now, state_order=STATE_ORDER)


def _gone_with_their_group(job: MXJob, all_pods: Mapping[str, PodView], completed: Mapping[str, set[int]],
                           workloads: Mapping[str, Any], attempt: int) -> dict[str, PodView]:
    """The pods of the attempt's group that Kueue evicted (its Workload says so: hooks.shared.kueue.group_eviction)
    and let go before a sync saw them stop: the slots with no pod, but those completed
    (hooks.mxjob.observed.stopped_by_queue). They are lost as a pod Kueue stops is; they are not
    observed, so nothing else counts or keeps them."""
    eviction = group_eviction(workloads.get(pod_group_name(job.name, str(job.uid), attempt))) if workloads else None
    if eviction is None:
        return {}
    slots = replica_slots(job)
    missing = [name for name, slot in slots.items() if name not in all_pods and slot.index not in completed[slot.rtype]]
    return stopped_by_queue(slots, missing, eviction, attempt)


def observe(job: MXJob, old_status: Any, all_pods: Mapping[str, PodView], now: datetime, memory: Memory,
            workloads: Mapping[str, Any] | None = None) -> Observation:
    """Read the observations once, in one order (the status warnings keep that order).
    `workloads`: the Kueue Workloads of the job's pod groups by name."""
    # Whole-job restarts: a succeeded index is never rerun (its pod stays); the new attempt's pods
    # wait until no pod of an earlier attempt is observed.
    known_attempt = max([0, *memory.attempts, *(p.job_attempt for p in all_pods.values())])
    leaving = {n: p for n, p in all_pods.items() if p.job_attempt < known_attempt and p.phase != "Succeeded"}
    pods = {n: p for n, p in all_pods.items() if n not in leaving}
    old = OldStatus(old_status, condition_types=STATE_ORDER)
    old_conditions = tuple(old.conditions())
    before = Conditions(old_conditions, now, state_order=STATE_ORDER)
    was_terminal = before.terminal(TERMINAL) is not None
    start_time, completion_time = old.time("startTime"), old.time("completionTime")
    cleaned_up_time = old.time("cleanedUpTime")
    written_restarts = old.counter("restartCount") or 0
    completed = completed_before(job, old)
    for pod in pods.values():
        if pod.phase == "Succeeded":
            completed[pod.rtype].add(pod.index)
    succeeded = all(index in completed[rtype] for rtype, index in job.deciding_slots())
    # Once the deciding pods have succeeded nothing is recreated: a pod that fails then is judged
    # by the success grace, not counted as a restart; a finished or suspended job counts nothing.
    history = merge_history(read_history(old), memory.restarts, pods)
    if was_terminal or job.run_policy.suspend or succeeded:
        failures = no_failures(history)
    else:
        gone = _gone_with_their_group(job, all_pods, completed, workloads or {}, known_attempt)
        failures = classify_failures(job, {**pods, **gone}, history, memory.restarts, now=now)
    old_attempt = old.counter("attempt") or 0
    failures = with_collateral(job, failures, job_restart_pending=old_attempt > known_attempt)
    # A pod lost for a whole-job restart now: its record is created; the old pods go on a later sync.
    attempt = known_attempt + (1 if failures.job_losses and not failures.fatal else 0)
    # Queue evictions are not counted: the records of the attempts they began say so, and carry the
    # container restarts of the pods they replaced; the one decided now is read from the pods.
    evictions = [r.data for r in memory.attempts.values() if not counts_against_restarts(r.data)]
    evicting = attempt > known_attempt and bool(failures.evicted)
    evicted_restarts = live_restarts(failures.history, pods, memory.restarts, attempt=known_attempt) if evicting else 0
    uncounted = len(evictions) + evicting
    carried = sum(carried_restarts(data) for data in evictions) + evicted_restarts
    return Observation(
        job=job, now=now, old=old, old_conditions=old_conditions, all_pods=all_pods, pods=pods, leaving=leaving,
        restarts=memory.restarts, attempt_records=memory.attempts, was_terminal=was_terminal,
        resumed=before.is_true("Suspended"), start_time=start_time, run_started=memory.run_started,
        completion_time=completion_time, cleaned_up_time=cleaned_up_time, old_attempt=old_attempt,
        known_attempt=known_attempt, attempt=attempt,
        completed={rtype: frozenset(indexes) for rtype, indexes in completed.items()}, succeeded=succeeded,
        failures=failures, evicting=evicting, uncounted_attempts=uncounted, evicted_restarts=evicted_restarts,
        carried_restarts=carried,
        # A finished job counts nothing more: its terminal status keeps the count, as its outcome
        # record does (a recount could differ: pods kept after the end restart in place, and a
        # refused whole-job restart read back recounts the lost pods' own restarts).
        restart_total=written_restarts if was_terminal else restart_total(
            failures.history, pods, memory.restarts, attempt=attempt, counted_attempts=attempt - uncounted,
            carried=carried, written=written_restarts))

