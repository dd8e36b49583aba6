"""The job lifecycle: from the old status, the observed children and the time, the new status and plan.

The hook is stateless. What it must remember across syncs is written in status and, because a
sync often reads a stale parent (docs/lifecycle.md, "Why the outcome is recorded in a child"),
also in children that stay (hooks.shared.memory): the job's outcome in `<job>-outcome`, each
recreation of a pod in `<pod>-restart-<n>` and in the restart-attempt label of the new pod, each
whole-job restart (runPolicy.failurePolicy RestartJob) in `<job>-attempt-<n>` and in the
job-attempt label of the new attempt's pods. The hook takes the larger of the memories, and
deletes a pod only on a sync that sees the record that makes the deletion safe: cleanup waits for
the outcome record, a failed pod's deletion for its restart record, the old attempt's pods for
the attempt record (restart accounting: hooks.mxjob.restarts; completed indexes and counts:
hooks.mxjob.replicas). A field of the status memory not in the shape written here is treated as
absent (hooks.shared.status).

One sync reads its observations once, into a frozen Observation; `judge` returns the verdict as
a value; each transition builds its conditions locally and returns one frozen Plan. The
transition table in docs/lifecycle.md is checked against this module by
tests/mxjob/test_lifecycle_table.py.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, NamedTuple

from hooks.mxjob.attempts import (
    attempt_cause,
    attempt_evicted,
    attempt_record,
    attempt_runs,
    attempt_stalled,
    decided_at,
    deciding_pods_run,
    job_restart_message,
    stalled,
)
from hooks.mxjob.grace import SUCCESS_GRACE_SECONDS, failed_in_grace, still_running_in_grace, success_part
from hooks.mxjob.losses import losses
from hooks.mxjob.observation import NO_MEMORY, Memory, Observation, observe
from hooks.mxjob.observed import PodView, Slot
from hooks.mxjob.outcome import OUTCOME_FIELDS, read_outcome, recorded_status, status_fields
from hooks.mxjob.replicas import final_counts, frozen_from, replica_counts
from hooks.mxjob.restarts import (
    MAX_NAMED,
    awaiting_recreation,
    fatal_message,
    in_job_order,
    restart_message,
    restarted_at,
)
from hooks.mxjob.spec import MXJob
from hooks.mxjob.stall import check_stall, job_reports
from hooks.mxjob.vocabulary import (
    CREATED,
    EVICTED_BY_QUEUE,
    FAILED,
    RESTARTING,
    RESUMED,
    RUNNING,
    STALLED,
    SUCCEEDED,
    SUSPENDED,
    TERMINAL,
    ConditionType,
    Outcome,
    Reason,
    subject,
)
from hooks.shared.conditions import Conditions, parse_rfc3339, rfc3339
from hooks.shared.k8s import JSON
from hooks.shared.memory import Record, attempt_record_name
from hooks.shared.progress import progress_status
from hooks.shared.scheduling import held_words
from hooks.shared.status import parse_time, plus_seconds


@dataclass(frozen=True)
class Plan:
    """What one sync decides: the status, which children to keep or create, when to sync again."""

    status: JSON
    pods: tuple[str, ...] = ()  # held back while the PodGroup they need is not observed yet
    services: tuple[str, ...] = ()
    resync_after: float | None = None
    finished: bool = False  # the job has succeeded or failed: it never gets a new pod
    # The job's PodGroup (under gang scheduling) is wanted while the job may still get pods: a
    # finished job's would keep holding its queue's share, and a suspended job has no pods to group.
    podgroup: bool = False
    attempts: Mapping[str, int] = field(default_factory=dict)  # restart-attempt label of a pod, when not 0
    job_attempt: int = 0  # the job attempt new pods are created for (MXJOB_ATTEMPT, job-attempt label)
    restart_records: Mapping[str, JSON] = field(default_factory=dict)  # new restart records: name -> data
    outcome: JSON | None = None  # the outcome record to create (the job has just finished)
    cleaned_up: bool = False  # the TTL has run: every child but the outcome record goes
    suspension: str | None = None  # the job is suspended since then: its record is kept, or created

    @property
    def needs_cluster_map(self) -> bool:
        """The cluster ConfigMap is kept while the job has pods or may still get some.

        So it goes with the last pod: at completion under cleanPodPolicy All, at the TTL otherwise.
        """
        return bool(self.pods) or not self.finished


class GangView(NamedTuple):
    """What gang scheduling means for this sync's new pods."""

    wait_message: str | None = None  # the Created message while new pods wait for the PodGroup; None: no wait


NO_GANG = GangView()


class Verdict(NamedTuple):
    """The job has just finished: how, and why."""

    outcome: Outcome
    reason: Reason
    message: str


class GraceWait(NamedTuple):
    """The deciding pods succeeded; these others still run and get the rest of the success grace."""

    pods: tuple[PodView, ...]
    seconds_left: float


def decide(*, job: MXJob, old_status: Any, pods: Mapping[str, PodView], slots: Mapping[str, Slot],
           observed_services: Mapping[str, Any], now: datetime, memory: Memory = NO_MEMORY,
           gang: GangView = NO_GANG, workloads: Mapping[str, Any] | None = None) -> Plan:
    """The whole lifecycle step for a valid MXJob: a pure function of its arguments. `workloads`: the
    Kueue Workloads of its pod groups by name (the customize hook relates them)."""
    obs = observe(job, old_status, pods, now, memory, workloads)
    plan = _step(obs, slots, observed_services, memory, gang)
    if job.run_policy.progress.enabled:
        # status.progress, on every path: the reports of the attempt the status says the job is on
        # (so the sync that decides a whole-job restart already drops the old attempt's).
        attempt = plan.status.get("attempt", 0)
        progress = progress_status(job_reports(obs, memory.progress, attempt if isinstance(attempt, int) else 0))
        if progress is not None:
            plan.status["progress"] = progress
    return plan


def _step(obs: Observation, slots: Mapping[str, Slot], observed_services: Mapping[str, Any], memory: Memory,
          gang: GangView) -> Plan:
    if memory.outcome is not None:
        return finished_with_record(obs, memory.outcome, slots, observed_services)
    if obs.was_terminal:
        return record_outcome(obs, slots, observed_services, None)
    if obs.job.run_policy.suspend:
        return suspended(obs, memory.suspended_since)
    verdict = judge(obs)
    if isinstance(verdict, GraceWait):
        return waiting_in_grace(obs, verdict, slots)
    if verdict is not None:
        return record_outcome(obs, slots, observed_services, verdict)
    stall = check_stall(obs, slots, memory.progress)  # runPolicy.stallPolicy: has the running job stalled?
    if stall.fail_message is not None:
        return record_outcome(stall.obs, slots, observed_services, Verdict("Failed", FAILED, stall.fail_message))
    plan = running(stall.obs, slots, gang)
    if stall.resync_after is not None and (plan.resync_after is None or stall.resync_after < plan.resync_after):
        plan = replace(plan, resync_after=stall.resync_after)
    return plan


def judge(obs: Observation) -> Verdict | GraceWait | None:
    """Whether the running job has finished now (or waits out the success grace); None: it runs on."""
    job = obs.job
    if obs.succeeded:
        late = failed_in_grace(obs)
        waiting, grace_left = still_running_in_grace(obs)
        if late:
            return Verdict("Failed", FAILED, fatal_message(job, late, after=success_part(job)))
        if waiting and grace_left is not None:
            return GraceWait(tuple(waiting), grace_left)
        return Verdict("Succeeded", SUCCEEDED, f"{subject(job.key)} successfully completed: {success_part(job)}.")
    deadline = active_deadline(obs)
    max_restarts = job.run_policy.failure.max_restarts
    if obs.failures.fatal:
        # A permanent error fails the job even beside a loss that would be retried (docs/lifecycle.md,
        # "Several losses in one sync"); the message names those too.
        also = [p for p in (*obs.failures.job_losses, *obs.failures.recreate) if p not in obs.failures.fatal]
        return Verdict("Failed", FAILED, fatal_message(job, obs.failures.fatal, also=also))
    if job.run_policy.backoff_limit is not None and obs.restart_total > job.run_policy.backoff_limit:
        return Verdict("Failed", FAILED,
                       f"{subject(job.key)} has reached the specified backoff limit: "
                       f"{obs.restart_total} restarts, backoffLimit "
                       f"{job.run_policy.backoff_limit}; {losses(obs) or 'no lost pod is observed'}.")
    if max_restarts is not None and obs.counted_attempts > max_restarts:
        return Verdict("Failed", FAILED, f"{subject(job.key)} has reached failurePolicy.maxRestarts "
                                         f"({max_restarts}): {losses(obs) or 'no lost pod is observed'}.")
    if deadline is not None and obs.now >= deadline:
        lost, unplaced = losses(obs), not_scheduled(obs)
        return Verdict("Failed", FAILED,
                       f"{subject(job.key)} was active longer than activeDeadlineSeconds "
                       f"({job.run_policy.active_deadline_seconds} s) and is stopped; "
                       f"{f'pods lost before: {lost}' if lost else 'no pod was lost'}"
                       f"{f'; {unplaced}' if unplaced else ''}.")
    return None


# --- transitions ---------------------------------------------------------------------------------

def suspended(obs: Observation, recorded: datetime | None) -> Plan:
    """No pods or services; startTime and the restart records are kept.

    The suspension is stamped with when it began as its record keeps it (`recorded`), so a sync that
    reads the Running status of before stamps it as the sync that made it did. Until the record is
    observed: the status's time if it already says Suspended, else now; a new record keeps that."""
    said = f"{subject(obs.job.key)} is suspended."
    conds = obs.conditions()
    before = conds.get("Suspended")
    written = parse_time(before.get("lastTransitionTime")) if before and before.get("status") == "True" else None
    since = recorded or written or obs.now
    conds.set("Created", True, CREATED, f"{subject(obs.job.key)} is created.")
    conds.set("Suspended", True, SUSPENDED, said, at=since)
    for ctype in ("Running", "Restarting"):
        conds.clear(ctype, SUSPENDED, said, at=since)
    return Plan(status=_status(obs, conds, replicas=_counts(obs, frozenset(obs.pods)), start_time=obs.start_time,
                               completion_time=obs.completion_time, attempt=obs.attempt), suspension=rfc3339(since))


def waiting_in_grace(obs: Observation, wait: GraceWait, slots: Mapping[str, Slot]) -> Plan:
    """The deciding pods succeeded and others still run: Running stays True, nothing new starts."""
    conds = _started(obs, f"{subject(obs.job.key)} is created.")
    names = ", ".join(f"{p.rtype} {p.index}" for p in wait.pods)
    # The message changes when a pod it names ends: stamped with when the last pod ended, as the
    # pods keep it, so a sync reading the status of one write earlier stamps it alike.
    ends = [parse_time(p.finished_at) for p in obs.pods.values() if p.finished]
    conds.set("Running", True, RUNNING,
              f"{subject(obs.job.key)}: {success_part(obs.job)}; waiting up to "
              f"{SUCCESS_GRACE_SECONDS} s for the pods still running to end ({names}) "
              f"before the job is Succeeded.", at=max((e for e in ends if e is not None), default=None))
    return Plan(status=_status(obs, conds, replicas=_counts(obs, _not_counted(obs)), start_time=started_at(obs),
                               completion_time=obs.completion_time, attempt=obs.attempt),
                pods=tuple(name for name in slots if name in obs.pods), services=tuple(slots),
                resync_after=wait.seconds_left, podgroup=True)


def running(obs: Observation, slots: Mapping[str, Slot], gang: GangView) -> Plan:
    """A running job: every slot gets its pod except finished ones gone, and failed ones
    whose restart is recorded in a child (deleted now, created again on a later sync)."""
    job, failures = obs.job, obs.failures
    pods = [name for name, slot in slots.items() if name not in failures.recorded
            and (name in obs.pods or slot.index not in obs.completed[slot.rtype])]
    if obs.attempt > obs.known_attempt or obs.leaving:
        # A whole-job restart: first its record (this sync, when new), then the old attempt's
        # pods go; the new attempt's are created once none of them is observed.
        pods = [name for name in slots if name in obs.pods]
    # Every pod is rendered with its slot's count, so an answer does not depend on whether the
    # pod exists yet (an existing pod is never updated: OnDelete).
    attempts = {name: obs.history[name]["recreations"] for name in pods
                if obs.history.get(name, {}).get("recreations")}
    # Under gang scheduling a new pod waits until its PodGroup is observed; Created says so, and
    # says which pods the scheduler has not placed, and why.
    created = f"{subject(job.key)} is created{waits_for(obs)}."
    if gang.wait_message is not None and any(name not in obs.all_pods for name in pods):
        pods, created = [name for name in pods if name in obs.all_pods], gang.wait_message
    records = dict(failures.new_records)
    if obs.attempt > obs.known_attempt:
        records[attempt_record_name(job.name, obs.attempt)] = attempt_record(obs)
    conds = _started(obs, created)
    _say_how_it_runs(obs, conds, slots)
    deadline = active_deadline(obs)
    status = _status(obs, conds, replicas=_counts(obs, _not_counted(obs)), start_time=started_at(obs),
                     completion_time=obs.completion_time, attempt=obs.attempt)
    waiting = waiting_column(obs)
    if waiting is not None:
        status["waiting"] = waiting
    return Plan(status=status,
                pods=tuple(pods), services=tuple(slots), attempts=attempts, restart_records=records,
                job_attempt=obs.known_attempt, podgroup=True,
                resync_after=(deadline - obs.now).total_seconds() if deadline is not None else None)


def _say_how_it_runs(obs: Observation, conds: Conditions[ConditionType], slots: Mapping[str, Slot]) -> None:
    """Restarting while a job restart or a recreation is under way; else Running, or Stalled."""
    key = obs.job.key
    waiting = awaiting_recreation(obs.history, obs.pods, slots, obs.completed, {p.name for p in obs.failures.recreate})
    if obs.attempt and not attempt_runs(obs, slots):
        message = job_restart_message(obs)
        reason = STALLED if attempt_stalled(obs) else EVICTED_BY_QUEUE if attempt_evicted(obs) else RESTARTING
        at = decided_at(obs)
        conds.set("Restarting", True, reason, message, at=at)
        conds.clear("Running", reason, message, at=at)
        return
    if waiting:
        message = restart_message(obs.job, waiting, obs.history, obs.restarts, obs.failures.new_records,
                                  obs.restart_total)
        at = None if conds.is_true("Restarting") else restarted_at(
            waiting, obs.pods, obs.history, obs.restarts, obs.failures.new_records)
        conds.set("Restarting", True, RESTARTING, message, at=at)
        conds.clear("Running", RESTARTING, message, at=at)
        return
    again = (f"{subject(key)}: every pod of attempt {obs.attempt} is running (the job was "
             f"restarted after {attempt_cause(obs)})." if obs.attempt
             else f"{subject(key)}: every recreated pod is running again.")
    # Each transition is stamped with when its premise came true, as the pods keep it (a sync reading
    # the status of one write earlier then stamps it as the sync that made it); a later change of
    # the message only is stamped now, as it happens.
    recreated = [p for p in obs.pods.values() if (p.job_attempt == obs.attempt if obs.attempt else p.attempt)]
    conds.clear("Restarting", RUNNING, again, at=running_since(recreated))
    if not deciding_pods_run(obs):
        return
    deciding = set(obs.job.deciding_slots())
    began = None if conds.is_true("Running") else running_since(
        p for p in obs.pods.values() if (p.rtype, p.index) in deciding)
    lagging = stalled(obs)
    if obs.stall is not None:  # runPolicy.stallPolicy action Report: it runs on, and says so
        conds.set("Running", True, STALLED, f"{subject(key)} may have stalled: {obs.stall.clause}.", at=began)
    elif lagging:
        conds.set("Running", True, STALLED,
                  f"{subject(key)} may make no progress: {lagging} while its peers ran, "
                  f"and ps-lite does not admit a process that comes back (docs/lifecycle.md, "
                  f"\"Recovery measured\": such a job waits until activeDeadlineSeconds); "
                  f"runPolicy.failurePolicy RestartJob, the default, restarts the whole job instead.", at=began)
    else:
        # The deciding pods run while another waits for room (ps-lite then waits for it too): say which, and why.
        conds.set("Running", True, RUNNING, f"{subject(key)} is running{waits_for(obs)}.", at=began)


def record_outcome(obs: Observation, slots: Mapping[str, Slot], observed_services: Mapping[str, Any],
                   verdict: Verdict | None) -> Plan:
    """A job that has finished, now (`verdict`) or as far as status says, with no outcome record
    observed yet.

    Nothing is created and nothing is deleted: the answer records the outcome in a child,
    and only a sync that sees that record applies cleanPodPolicy and the TTL. A restart
    record still being written is kept, so no counted restart is lost either.
    """
    if verdict is None:
        conds, start_time = obs.conditions(), obs.start_time
        completion_time = obs.completion_time or rfc3339(obs.now)  # lost from status: the TTL counts from now
    else:
        conds = _started(obs, f"{subject(obs.job.key)} is created.")
        start_time = started_at(obs)
        conds.set(verdict.outcome, True, verdict.reason, verdict.message)
        for other in ("Running", "Restarting"):
            conds.clear(other, verdict.reason, verdict.message)
        completion_time = rfc3339(obs.now)
    status = _status(obs, conds, replicas=_final_replicas(obs, conds.terminal(TERMINAL)), start_time=start_time,
                     completion_time=completion_time, attempt=obs.known_attempt)
    kept = tuple(p.name for p in in_job_order(obs.job, obs.all_pods.values()) if not p.terminating)
    return Plan(status=status, pods=kept,
                services=tuple(n for n in sorted(observed_services) if n in slots), finished=True,
                outcome={k: status[k] for k in OUTCOME_FIELDS if k in status},
                restart_records=obs.failures.new_records)


def finished_with_record(obs: Observation, record: Record, slots: Mapping[str, Slot],
                         observed_services: Mapping[str, Any]) -> Plan:
    """A finished job whose outcome record is observed: the record is the status; cleanPodPolicy,
    then the TTL, decide which children stay. Never a new pod."""
    job, now = obs.job, obs.now
    read = read_outcome(record, obs.old, key=job.key, now=now)
    policy = job.run_policy.clean_pod_policy
    keep = tuple(p.name for p in in_job_order(job, obs.all_pods.values()) if not p.terminating and (
        policy == "None" or (policy == "Running" and p.finished)))
    # A Service of no slot gets here only on its way out: a live one is a sign of another
    # layout, which the layout guard refuses first (hooks.mxjob.layout).
    services = tuple(name for name in (sorted(observed_services) if policy == "None" else keep)
                     if name in observed_services and name in slots)
    ttl = job.run_policy.ttl_seconds_after_finished
    expiry = plus_seconds(parse_rfc3339(read.completion_time), ttl) if ttl is not None else None
    cleaned_up = expiry is not None and now >= expiry
    cleaned_up_time = rfc3339(expiry) if expiry is not None and cleaned_up else obs.cleaned_up_time
    return Plan(status=recorded_status(read, obs.old, cleaned_up_time=cleaned_up_time,
                                       counted=lambda: _final_replicas(obs, read.conds.terminal(TERMINAL))),
                pods=() if cleaned_up else keep, services=() if cleaned_up else services, finished=True,
                cleaned_up=cleaned_up,
                resync_after=(expiry - now).total_seconds() if expiry is not None and not cleaned_up else None)


# --- rules -------------------------------------------------------------------------------------

def started_at(obs: Observation) -> str:
    """startTime once the job runs: set when children are first created, and again on resume.

    Read from the run's Services once they are observed (the parent read may be one status write
    behind: hooks.mxjob.children.run_started); before, the status's, or now on the run's first sync."""
    if obs.run_started is not None:
        return obs.run_started
    return rfc3339(obs.now) if obs.resumed or obs.start_time is None else obs.start_time


def running_since(pods: Iterable[PodView]) -> datetime | None:
    """When the last of the running `pods` started running, as their containers keep it (which a
    stale parent cannot undo); None when none runs or one does not say (the sync's own time then)."""
    times = [parse_time(p.started_at) for p in pods if p.active]
    if not times or any(t is None for t in times):
        return None
    return max(t for t in times if t is not None)


def _started(obs: Observation, created: str) -> Conditions[ConditionType]:
    """The conditions of a job that runs: resumed if it was suspended, Created with `created`.

    Both transitions happen when the run begins, and are stamped with startTime: a sync that reads
    the parent of before them (Suspended, or no status) stamps them as the sync that made them."""
    conds = obs.conditions()
    began = parse_rfc3339(started_at(obs))
    if obs.resumed:
        conds.set("Suspended", False, RESUMED, f"{subject(obs.job.key)} is resumed.", at=began)
    conds.set("Created", True, CREATED, created, at=began if conds.get("Created") is None else None)
    return conds


def held_back(obs: Observation) -> list[tuple[str, str]]:
    """The live pods Kueue or the scheduler holds back, as (who, what): Kueue, while its admission
    gate is on, with the words of the group's Workload (hooks.shared.kueue); else the scheduler, with
    its reason (hooks.shared.scheduling). Pods with the same reason go together: the first MAX_NAMED
    pods, then how many more. A job that waits for room or for its queue says so while it waits, and
    in its Failed message when activeDeadlineSeconds (the only timeout) ends it."""
    pods = [p for p in in_job_order(obs.job, obs.pods.values())
            if (p.queued or p.unscheduled) and not p.terminating]
    held = [("Kueue", p.name, p.queued) if p.queued else ("the scheduler", p.name, str(p.unscheduled)) for p in pods]
    return held_words(held, {"Kueue": "admitted", "the scheduler": "scheduled"}, MAX_NAMED)


def not_scheduled(obs: Observation) -> str:
    """What held_back says, in one clause; "" when nothing holds a pod back."""
    return "; ".join(what for _, what in held_back(obs))


def waits_for(obs: Observation) -> str:
    """`; it waits for Kueue: ...; it waits for the scheduler: ...` for a condition's message; "" when
    nothing holds a pod back."""
    said: dict[str, list[str]] = {}
    for who, what in held_back(obs):
        said.setdefault(who, []).append(what)
    return "".join(f"; it waits for {who}: {'; '.join(whats)}" for who, whats in said.items())


def waiting_column(obs: Observation) -> str | None:
    """status.waiting (the Waiting column): who holds the first held-back pod back, and their short
    reason (`Kueue: Pending`, `Scheduler: Unschedulable`); None when nothing does."""
    return next((p.held for p in in_job_order(obs.job, obs.pods.values()) if p.held and not p.terminating), None)


def active_deadline(obs: Observation) -> datetime | None:
    """startTime + activeDeadlineSeconds, if both are set."""
    seconds = obs.job.run_policy.active_deadline_seconds
    if seconds is None:
        return None
    return plus_seconds(parse_rfc3339(started_at(obs)), seconds)


# --- output ------------------------------------------------------------------------------------

def _not_counted(obs: Observation) -> frozenset[str]:
    """Pods left out of the counts of a job that runs: those recreated now, and those a whole-job
    restart replaces, from the sync that decides it on, so the status does not change when they go."""
    return obs.failures.not_counted | {p.name for p in obs.pods.values()
                                       if p.job_attempt < obs.attempt and p.phase != "Succeeded"}


def _final_replicas(obs: Observation, outcome: Outcome | None) -> JSON:
    """replicaStatuses as the job ends, kept from then on: read back from a terminal status that
    has them, else counted now (hooks.mxjob.replicas.final_counts)."""
    if obs.was_terminal and (frozen := frozen_from(obs.old)):
        return frozen
    return final_counts(obs.job, obs.pods, obs.completed, obs.failures.not_counted, outcome)


def _counts(obs: Observation, not_counted: frozenset[str]) -> JSON:
    return replica_counts(obs.job, obs.pods, obs.completed, not_counted)


def _status(obs: Observation, conds: Conditions[ConditionType], *, replicas: JSON, start_time: str | None,
            completion_time: str | None, attempt: int) -> JSON:
    """The status to write: the same observations always give the same bytes."""
    return status_fields(conds=conds, replicas=replicas, start_time=start_time, completion_time=completion_time,
                         restart_count=obs.restart_total, attempt=max(attempt, obs.old_attempt),
                         history=obs.history, cleaned_up_time=obs.cleaned_up_time, old=obs.old)
