"""The job lifecycle: from the old status, the observed children and the time, the new status and plan.

The hook is stateless. What it must remember across syncs is written in status and, because a
sync often reads a stale parent (docs/lifecycle.md, "Why the outcome is recorded in a child"),
also in children that stay (hooks.shared.memory): the job's outcome in `<job>-outcome`, each
recreation of a pod in `<pod>-restart-<n>` and in the restart-attempt label of the new pod, each
whole-job restart (runPolicy.failurePolicy RestartJob) in `<job>-attempt-<n>` and in the
job-attempt label of the new attempt's pods. The hook takes the larger of the memories, and
deletes a pod only on a sync that sees the record that makes the deletion safe: cleanup waits for
the outcome record, a failed pod's deletion for its restart record, the old attempt's pods for
the attempt record. Completed indexes are kept in status and by the succeeded pods themselves,
which the hook never deletes while the job runs. A field of the status memory not in the shape
written here is treated as absent (hooks.shared.status).
The transition table in docs/lifecycle.md is checked against
this module by tests/mxjob/test_lifecycle_table.py.
"""
from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, NamedTuple, cast

from hooks.mxjob.observed import PodView, Slot
from hooks.mxjob.spec import FAIL_JOB, RESTART_JOB, RESTART_POD, FailureRule, MXJob
from hooks.mxjob.vocabulary import (
    CREATED,
    FAILED,
    RESTARTING,
    RESUMED,
    RUNNING,
    SCHEDULER,
    STALLED,
    SUCCEEDED,
    SUSPENDED,
    WORKER,
    subject,
)
from hooks.shared.conditions import Conditions, parse_rfc3339, rfc3339
from hooks.shared.k8s import JSON, RestartRecord
from hooks.shared.memory import Record, attempt_record_name, restart_record_name
from hooks.shared.status import WARNINGS_FIELD, OldStatus, is_counter, parse_time, plus_seconds

RETRYABLE_EXIT_CODES = frozenset({130, 137, 138, 143})
# Exits by a signal (SIGINT, SIGKILL, SIGTERM): what a pod stopped at teardown shows. Within the
# success grace they are not failures.
TEARDOWN_EXIT_CODES = frozenset({130, 137, 143})
# When the deciding pods succeed, the other pods still running get this long to end on their own
# before the job is Succeeded and cleanPodPolicy stops the rest: ps-lite servers and workers leave
# a moment after the scheduler, and one of them may still fail (mxnet-operator#38).
SUCCESS_GRACE_SECONDS = 30
_INDEX = re.compile(r"[0-9]{1,10}")
# The status fields an outcome record holds: the whole terminal status but what a later sync adds.
OUTCOME_FIELDS = ("conditions", "replicaStatuses", "startTime", "completionTime", "restartCount",
                  "attempt", "restartHistory")


class Memory(NamedTuple):
    """What the children remember: the outcome record and the restart records by pod name."""

    outcome: Record | None = None
    restarts: Mapping[str, Mapping[int, Record]] = {}
    attempts: Mapping[int, Record] = {}  # the job-restart records `<job>-attempt-<n>`, by n


NO_MEMORY = Memory()


@dataclass
class Plan:
    """What one sync decides: the status, which children to keep or create, when to sync again."""

    status: JSON
    pods: list[str] = field(default_factory=list)
    services: list[str] = field(default_factory=list)
    resync_after: float | None = None
    finished: bool = False  # the job has succeeded or failed: it never gets a new pod
    attempts: dict[str, int] = field(default_factory=dict)  # restart-attempt label of a pod, when not 0
    job_attempt: int = 0  # the job attempt new pods are created for (MXJOB_ATTEMPT, job-attempt label)
    restart_records: dict[str, JSON] = field(default_factory=dict)  # new restart records: name -> data
    outcome: JSON | None = None  # the outcome record to create (the job has just finished)
    cleaned_up: bool = False  # the TTL has run: every child but the outcome record goes

    @property
    def needs_cluster_map(self) -> bool:
        """The cluster ConfigMap is kept while the job has pods or may still get some.

        So it goes with the last pod: at completion under cleanPodPolicy All, at the TTL otherwise.
        """
        return bool(self.pods) or not self.finished


def is_retryable(exit_code: int | None) -> bool:
    """Signals (130, 137, 143), 138 (user asks for a retry), and no exit code at all (eviction)."""
    return exit_code is None or exit_code in RETRYABLE_EXIT_CODES


def distributed(job: MXJob) -> bool:
    """An MXTrain job with a Scheduler: its processes meet once in ps-lite, which admits no
    process that comes back later (docs/lifecycle.md, "Recovery measured")."""
    return job.job_mode == "MXTrain" and job.has(SCHEDULER)


def failure_action(job: MXJob, rtype: str, exit_code: int | None, *, retried: bool) -> str:
    """What a lost pod does to the job: the first rule of runPolicy.failurePolicy that matches
    its replica type and exit code, else the default. `retried`: its restartPolicy retries it
    (OnFailure, Always, or ExitCode with a retryable code). By default a pod its policy does
    not retry fails the job, and one it retries restarts the whole job when the job is
    distributed and only itself otherwise (a single process, or independent ones)."""
    rule = matching_rule(job, rtype, exit_code)
    if rule is not None:
        return rule.action
    if not retried:
        return FAIL_JOB
    return RESTART_JOB if distributed(job) else RESTART_POD


def matching_rule(job: MXJob, rtype: str, exit_code: int | None) -> FailureRule | None:
    """The first rule of runPolicy.failurePolicy that matches a lost pod's replica type and exit
    code (a pod lost without one matches only a rule without onExitCodes)."""
    for rule in job.run_policy.failure.rules:
        if rule.replica_types is not None and rtype not in rule.replica_types:
            continue
        if rule.exit_codes is not None and (exit_code is None or exit_code not in rule.exit_codes):
            continue
        return rule
    return None


def decide(*, job: MXJob, old_status: Any, pods: Mapping[str, PodView], slots: Mapping[str, Slot],
           observed_services: Mapping[str, Any], now: datetime, memory: Memory = NO_MEMORY) -> Plan:
    """The whole lifecycle step for a valid MXJob: a pure function of its arguments.

    The observations are read once, into a _State built in one step (the failures classified,
    the memories merged); the branches below only choose the transition and build the Plan.
    """
    state = _State(job, old_status, pods, now, memory.restarts, memory.attempts)
    if memory.outcome is not None:
        return state.finish_recorded(memory.outcome, slots, observed_services)
    if state.conds.terminal():
        return state.finish_unrecorded(slots, observed_services)
    if job.run_policy.suspend:
        return state.suspend()
    state.start()
    failures = state.failures
    deadline = state.deadline()
    if state.succeeded():
        late = state.failed_in_grace()
        waiting, grace_left = state.still_running_in_grace()
        if late:
            state.conclude("Failed", FAILED, _fatal_message(job, late, after=state.success_part()))
        elif waiting and grace_left is not None:
            return state.wait_for(waiting, grace_left, slots)
        else:
            state.conclude("Succeeded", SUCCEEDED, state.success_message())
    elif failures.fatal:
        state.conclude("Failed", FAILED, _fatal_message(job, failures.fatal))
    elif state.over_backoff_limit():
        state.conclude("Failed", FAILED,
                       f"{subject(job.key)} has reached the specified backoff limit: "
                       f"{state.restart_total()} restarts, backoffLimit "
                       f"{job.run_policy.backoff_limit}{state.exit_codes_note()}.")
    elif state.over_max_restarts():
        state.conclude("Failed", FAILED,
                       f"{subject(job.key)} has reached failurePolicy.maxRestarts "
                       f"({job.run_policy.failure.max_restarts}): {state.losses_part()}.")
    elif deadline is not None and now >= deadline:
        state.conclude("Failed", FAILED,
                       f"{subject(job.key)} was active longer than activeDeadlineSeconds "
                       f"({job.run_policy.active_deadline_seconds} s) and is stopped.")
    if state.conds.terminal():
        return state.finish_unrecorded(slots, observed_services)
    plan = state.run(slots)
    if deadline is not None:
        plan.resync_after = (deadline - now).total_seconds()
    return plan


class Failures(NamedTuple):
    """Failed pods of one sync: those that fail the job, those to recreate, and the new records."""

    fatal: list[PodView]
    recreate: list[PodView]
    recorded: frozenset[str]  # pods to recreate whose restart record is observed: safe to delete
    new_records: dict[str, JSON]
    history: dict[str, RestartRecord]  # the restart history with these failures counted
    job_losses: list[PodView]  # lost pods whose failurePolicy action is RestartJob

    @property
    def not_counted(self) -> frozenset[str]:
        """Pods left out of replicaStatuses: being recreated is not a job failure."""
        return frozenset(p.name for p in self.recreate)


class _State:
    """The status being rebuilt for one sync."""

    def __init__(self, job: MXJob, old: Any, pods: Mapping[str, PodView], now: datetime,
                 restarts: Mapping[str, Mapping[int, Record]], attempts: Mapping[int, Record]):
        # Whole-job restarts: the attempt the children show (its records, the pods' labels). A
        # pod of an earlier attempt that did not succeed is leaving: left out of the answer (so
        # deleted), of the counts and of the failures; the new attempt's pods wait until none is
        # observed. A succeeded index is never rerun (its pod stays).
        self.attempt_records = attempts
        self.known_attempt = max([0, *attempts, *(p.job_attempt for p in pods.values())])
        self.all_pods = pods
        self.leaving = {n: p for n, p in pods.items()
                        if p.job_attempt < self.known_attempt and p.phase != "Succeeded"}
        pods = {n: p for n, p in pods.items() if n not in self.leaving}
        self.job, self.pods, self.now = job, pods, now
        self.old = OldStatus(old)
        self.conds = Conditions(self.old.conditions(), now)
        self.was_terminal = self.conds.terminal() is not None
        self.start_time = self.old.time("startTime")
        self.completion_time = self.old.time("completionTime")
        self.cleaned_up_time = self.old.time("cleanedUpTime")
        self.old_restart_count = self.old.counter("restartCount") or 0
        self.restarts = restarts
        # The indexes completed as last written, with this sync's successes folded in (also after
        # the job has finished: workers often exit a moment after the scheduler).
        completed = _completed_before(job, self.old)
        for pod in pods.values():
            if pod.phase == "Succeeded":
                completed[pod.rtype].add(pod.index)
        self.completed = completed
        # Once the deciding pods have succeeded nothing is recreated: a pod that fails then is
        # judged by the success grace, not counted as a restart; a finished or suspended job
        # counts nothing either.
        history = _merge_history(_read_history(self.old), restarts, pods)
        if self.was_terminal or job.run_policy.suspend or self.succeeded():
            self.failures = Failures([], [], frozenset(), {}, history, [])
        else:
            self.failures = _classify_failures(job, pods, history, restarts)
        self.history = self.failures.history
        self.old_attempt = self.old.counter("attempt") or 0
        failures = self.failures
        if failures.fatal and (failures.job_losses or self.old_attempt > self.known_attempt):
            # One loss, one restart: a peer that fails by default (no rule says FailJob) beside a
            # pod lost for a whole-job restart, or after one was decided whose record is not
            # observed yet, is collateral (a ps-lite process giving up when a peer vanished).
            collateral = [p for p in failures.fatal if matching_rule(job, p.rtype, lost_exit_code(p)) is None]
            self.failures = failures._replace(
                fatal=[p for p in failures.fatal if p not in collateral],
                job_losses=failures.job_losses + collateral)
        # The attempt this sync runs: one more than the children show when a pod was lost for a
        # whole-job restart now (its record is created; the old pods go on a later sync).
        self.attempt = self.known_attempt + (1 if self.failures.job_losses and not self.failures.fatal else 0)

    # --- transitions -------------------------------------------------------------------------

    def start(self) -> None:
        """Created on the first sync; startTime when children are first created or on resume."""
        key = self.job.key
        if self.conds.is_true("Suspended"):
            self.conds.set("Suspended", False, RESUMED, f"{subject(key)} is resumed.")
            self.start_time = None
        self.conds.set("Created", True, CREATED, f"{subject(key)} is created.")
        if self.start_time is None:
            self.start_time = rfc3339(self.now)

    def suspend(self) -> Plan:
        """No pods or services; startTime and the restart records are kept."""
        key = self.job.key
        self.conds.set("Created", True, CREATED, f"{subject(key)} is created.")
        self.conds.set("Suspended", True, SUSPENDED, f"{subject(key)} is suspended.")
        for ctype in ("Running", "Restarting"):
            self.conds.clear(ctype, SUSPENDED, f"{subject(key)} is suspended.")
        return Plan(status=self.status(not_counted=frozenset(self.pods)))

    def conclude(self, ctype: str, reason: str, message: str) -> None:
        """Enter a terminal state: Running and Restarting go False, completionTime is set."""
        self.conds.set(ctype, True, reason, message)
        for other in ("Running", "Restarting"):
            self.conds.clear(other, reason, message)
        self.completion_time = rfc3339(self.now)

    def finish_unrecorded(self, slots: Mapping[str, Slot], observed_services: Mapping[str, Any]) -> Plan:
        """A job that has finished, as far as status says, with no outcome record observed yet.

        Nothing is created and nothing is deleted: the answer records the outcome in a child,
        and only a sync that sees that record applies cleanPodPolicy and the TTL. A restart
        record still being written is kept, so no counted restart is lost either.
        """
        if self.completion_time is None:  # lost from status: the TTL counts from now
            self.completion_time = rfc3339(self.now)
        keep = [p.name for p in self._sorted(self.all_pods.values()) if not p.terminating]
        status = self.status(frozen=self._frozen_replicas())
        return Plan(status=status, pods=keep, services=[n for n in sorted(observed_services) if n in slots],
                    finished=True, outcome={k: status[k] for k in OUTCOME_FIELDS if k in status},
                    restart_records=self.failures.new_records)

    def finish_recorded(self, outcome: Record, slots: Mapping[str, Slot],
                        observed_services: Mapping[str, Any]) -> Plan:
        """A finished job whose outcome record is observed: the record is the status; cleanPodPolicy,
        then the TTL, decide which children stay. Never a new pod."""
        read = read_outcome(outcome, self.old, key=self.job.key, now=self.now)
        self.conds = read.conds  # what _frozen_replicas counts by, when the record holds no counts
        policy = self.job.run_policy.clean_pod_policy
        keep = [p.name for p in self._sorted(self.all_pods.values()) if not p.terminating and (
            policy == "None" or (policy == "Running" and p.finished))]
        services = sorted(observed_services) if policy == "None" else keep
        # A Service of no slot gets here only on its way out: a live one is a sign of another
        # layout, which the layout guard refuses first (hooks.mxjob.sync.changed_since_created).
        services = [name for name in services if name in observed_services and name in slots]
        plan = Plan(status={}, pods=keep, services=services, finished=True)
        ttl = self.job.run_policy.ttl_seconds_after_finished
        expiry = plus_seconds(parse_rfc3339(read.completion_time), ttl) if ttl is not None else None
        if expiry is not None:
            if self.now >= expiry:
                plan.pods, plan.services, plan.cleaned_up = [], [], True
                self.cleaned_up_time = rfc3339(expiry)
            else:
                plan.resync_after = (expiry - self.now).total_seconds()
        plan.status = recorded_status(read, self.old, cleaned_up_time=self.cleaned_up_time,
                                      counted=self._frozen_replicas)
        return plan

    def wait_for(self, waiting: list[PodView], grace_left: float, slots: Mapping[str, Slot]) -> Plan:
        """The deciding pods succeeded and others still run: Running stays True, nothing new starts."""
        names = ", ".join(f"{p.rtype} {p.index}" for p in waiting)
        self.conds.set("Running", True, RUNNING,
                       f"{subject(self.job.key)}: {self.success_part()}; waiting up to "
                       f"{SUCCESS_GRACE_SECONDS} s for the pods still running to end ({names}) "
                       f"before the job is Succeeded.")
        keep = [name for name in slots if name in self.pods]
        return Plan(status=self.status(), pods=keep, services=list(slots), resync_after=grace_left)

    def run(self, slots: Mapping[str, Slot]) -> Plan:
        """A running job: every slot gets its pod except finished ones gone, and failed ones
        whose restart is recorded in a child (deleted now, created again on a later sync)."""
        failures = self.failures
        gone = failures.recorded
        pods = [name for name, slot in slots.items()
                if name not in gone and (name in self.pods or slot.index not in self.completed[slot.rtype])]
        if self.attempt > self.known_attempt or self.leaving:
            # A whole-job restart: first its record (this sync, when new), then the old attempt's
            # pods go; the new attempt's are created once none of them is observed.
            pods = [name for name in slots if name in self.pods]
        # Every pod is rendered with its slot's count, so an answer does not depend on whether the
        # pod exists yet (an existing pod is never updated: OnDelete).
        attempts = {name: self.history[name]["recreations"] for name in pods
                    if self.history.get(name, {}).get("recreations")}
        waiting = self._awaiting_recreation({p.name for p in failures.recreate}, slots)
        key = self.job.key
        records = dict(failures.new_records)
        if self.attempt > self.known_attempt:
            records[attempt_record_name(self.job.name, self.attempt)] = self._attempt_record()
        if self.attempt and not self._attempt_runs(slots):
            message = self._job_restart_message()
            self.conds.set("Restarting", True, RESTARTING, message)
            self.conds.clear("Running", RESTARTING, message)
        elif waiting:
            message = self._restart_message(waiting)
            self.conds.set("Restarting", True, RESTARTING, message)
            self.conds.clear("Running", RESTARTING, message)
        else:
            again = (f"{subject(key)}: every pod of attempt {self.attempt} is running (the job was "
                     f"restarted after {self._attempt_cause()})." if self.attempt
                     else f"{subject(key)}: every recreated pod is running again.")
            self.conds.clear("Restarting", RUNNING, again)
            stalled = self._stalled()
            if self._deciding_pods_run() and stalled:
                self.conds.set("Running", True, STALLED,
                               f"{subject(key)} may make no progress: {stalled} while its peers ran, "
                               f"and ps-lite does not admit a process that comes back (docs/lifecycle.md, "
                               f"\"Recovery measured\": such a job waits until activeDeadlineSeconds); "
                               f"runPolicy.failurePolicy RestartJob, the default, restarts the whole job instead.")
            elif self._deciding_pods_run():
                self.conds.set("Running", True, RUNNING, f"{subject(key)} is running.")
        return Plan(status=self.status(), pods=pods, services=list(slots), attempts=attempts,
                    restart_records=records, job_attempt=self.known_attempt)

    # --- whole-job restarts --------------------------------------------------------------------

    def _attempt_record(self) -> JSON:
        """What the record of the attempt decided now keeps: the first pod lost and how it ended."""
        pod = self.failures.job_losses[0]
        data: JSON = {"lostPod": pod.name, "failedUID": pod.uid}
        code = lost_exit_code(pod)
        if code is not None:
            data["exitCode"] = code
        data["cause"] = loss_cause(pod)
        if len(self.failures.job_losses) > 1:
            data["alsoLost"] = [p.name for p in self.failures.job_losses[1:]]
        return data

    def _attempt_runs(self, slots: Mapping[str, Slot]) -> bool:
        """Every slot not completed has a running pod of the current attempt."""
        if self.attempt > self.known_attempt or self.leaving:
            return False
        for name, slot in slots.items():
            pod = self.pods.get(name)
            if slot.index in self.completed[slot.rtype]:
                continue
            if pod is None or not pod.active:
                return False
        return True

    def _attempt_cause(self) -> str:
        """Why the current attempt began, from its record: the lost pod and how it ended."""
        if self.attempt > self.known_attempt:
            data: Mapping[str, Any] = self._attempt_record()
        else:
            record = self.attempt_records.get(self.attempt)
            data = record.data if record is not None else {}
        lost = data.get("lostPod")
        cause = data.get("cause")
        what = (f"pod {lost} was lost ({cause})" if isinstance(lost, str) and isinstance(cause, str)
                else "a pod was lost")
        also = data.get("alsoLost")
        if isinstance(also, list) and also:
            what += f", and {len(also)} more"
        return what

    def _job_restart_message(self) -> str:
        """The Restarting condition of a whole-job restart: the attempt, the lost pod and why."""
        what = self._attempt_cause()
        limit = self.job.run_policy.backoff_limit
        budget = f" of backoffLimit {limit}" if limit is not None else ""
        return (f"{subject(self.job.key)} is restarting as attempt {self.attempt}: {what}; every pod "
                f"that has not succeeded is deleted and created again with MXJOB_ATTEMPT="
                f"{self.attempt} (restarts so far: {self.restart_total()}{budget}).")

    def _stalled(self) -> str:
        """In a distributed job, the running pods restarted on their own (failurePolicy RestartPod:
        recreated, or restarted in place) while their peers ran on, as a clause; "" when none."""
        if not distributed(self.job):
            return ""
        names = [p.name for p in self._sorted(self.pods.values())
                 if p.active and p.index not in self.completed[p.rtype]
                 and (p.restarts or p.attempt) and p.job_attempt == self.attempt]
        if not names:
            return ""
        return f"pod{'s' if len(names) > 1 else ''} {', '.join(names)} restarted"

    def over_max_restarts(self) -> bool:
        """More whole-job restarts than runPolicy.failurePolicy.maxRestarts allows."""
        limit = self.job.run_policy.failure.max_restarts
        return limit is not None and self.attempt > limit

    def losses_part(self) -> str:
        """The pods lost now, and how, as a clause."""
        return "; ".join(f"pod {p.name} was lost ({loss_cause(p)})" for p in self.failures.job_losses) \
            or "no pod lost now"

    # --- rules -------------------------------------------------------------------------------

    def succeeded(self) -> bool:
        """Every deciding pod (MXJob.deciding_slots) has succeeded."""
        return all(index in self.completed[rtype] for rtype, index in self.job.deciding_slots())

    def success_part(self) -> str:
        """What decided the success, as a clause."""
        rtype = self.job.deciding_type
        n = self.job.replicas[rtype].replicas
        return f"all {n} {WORKER} replicas succeeded" if rtype == WORKER else f"{rtype} 0 succeeded"

    def success_message(self) -> str:
        """Names what decided the success."""
        return f"{subject(self.job.key)} successfully completed: {self.success_part()}."

    def _others(self) -> list[PodView]:
        deciding = set(self.job.deciding_slots())
        return [p for p in self._sorted(self.pods.values())
                if (p.rtype, p.index) not in deciding and not p.terminating]

    def failed_in_grace(self) -> list[PodView]:
        """Pods other than the deciding ones that ended with a code their policy treats as a
        failure (a signal exit at teardown is none; neither is an eviction)."""
        late = []
        for pod in self._others():
            policy = self.job.replicas[pod.rtype].restart_policy
            code = pod.exit_code
            if pod.phase != "Failed" or code is None or code in TEARDOWN_EXIT_CODES:
                continue
            if policy == "Never" or (policy == "ExitCode" and not is_retryable(code)):
                late.append(pod)
        return late

    def still_running_in_grace(self) -> tuple[list[PodView], float | None]:
        """The other pods still running, and the seconds left of the grace (None when it is over).

        The grace counts from when the last deciding pod ended (its container's finishedAt, read
        from the pod, so a stale status cannot restart it); without that time there is none.
        """
        ends = [parse_time(p.finished_at) for p in self.pods.values()
                if (p.rtype, p.index) in set(self.job.deciding_slots()) and p.phase == "Succeeded"]
        known = [e for e in ends if e is not None]
        running = [p for p in self._others() if p.active]
        if not known:
            return running, None
        left = (max(known) + timedelta(seconds=SUCCESS_GRACE_SECONDS) - self.now).total_seconds()
        return running, (left if left > 0 else None)

    def _deciding_pods_run(self) -> bool:
        deciding = self.job.deciding_slots()
        by_slot = {(p.rtype, p.index): p for p in self.pods.values()}
        states = [by_slot.get(slot) for slot in deciding]
        return (any(p is not None and p.active for p in states)
                and all((p is not None and p.active) or slot[1] in self.completed[slot[0]]
                        for p, slot in zip(states, deciding, strict=True)))

    def over_backoff_limit(self) -> bool:
        """Container restarts plus recreations, over the whole job, beyond backoffLimit."""
        limit = self.job.run_policy.backoff_limit
        return limit is not None and self.restart_total() > limit

    def restart_total(self) -> int:
        """Every restart so far: earlier pods' (from the merged history) plus the live pods' own.

        Never less than the count already written: a pod that goes away (cleaned up, deleted by
        hand) takes its restartCount with it, and the count must not drop.
        """
        past = sum(r.get("recreations", 0) + r.get("priorContainerRestarts", 0)
                   for r in self.history.values())
        # A whole-job restart counts once; the restarts of the pods it replaces are in it.
        live = sum(p.restarts for p in self.pods.values()
                   if p.uid != self.history.get(p.name, {}).get("lastFailedUID")
                   and not self._counted_in_records(p) and p.job_attempt == self.attempt)
        return max(past + self.attempt + live, self.old_restart_count)

    def _counted_in_records(self, pod: PodView) -> bool:
        return pod.phase == "Failed" and any(n > pod.attempt or r.data.get("failedUID") == pod.uid
                                             for n, r in self.restarts.get(pod.name, {}).items())

    def exit_codes_note(self) -> str:
        """'; last exit codes: pod code, ...' for the pods that restarted, so the cause is in the message."""
        codes: dict[str, int] = {}
        for name, record in self.history.items():
            if isinstance(record.get("lastExitCode"), int):
                codes[name] = record["lastExitCode"]
        for pod in self.pods.values():
            code = pod.exit_code if pod.phase == "Failed" else pod.last_exit_code
            if code is not None and (pod.restarts or pod.phase == "Failed"):
                codes[pod.name] = code
        if not codes:
            return ""
        return "; last exit codes: " + ", ".join(f"{name} {codes[name]}" for name in sorted(codes))

    def deadline(self) -> datetime | None:
        """startTime + activeDeadlineSeconds, if both are set."""
        seconds = self.job.run_policy.active_deadline_seconds
        if seconds is None or self.start_time is None:
            return None
        return plus_seconds(parse_rfc3339(self.start_time), seconds)

    def _awaiting_recreation(self, gone: set[str],
                             slots: Mapping[str, Slot]) -> list[str]:
        waiting = set(gone)
        for name, record in self.history.items():
            pod = self.pods.get(name)
            if pod is None:
                slot = slots.get(name)
                if slot is not None and slot.index not in self.completed[slot.rtype]:
                    waiting.add(name)
            elif pod.uid == record.get("lastFailedUID") or pod.phase == "Pending":
                waiting.add(name)
        return sorted(waiting)

    def _restart_message(self, names: list[str]) -> str:
        parts = []
        for name in names:
            record = self.history.get(name, {})
            code = record.get("lastExitCode")
            cause = f"exited with code {code}" if code is not None else "failed without an exit code"
            # How it ended, from its restart record (observed, or created now).
            n = record.get("recreations", 0)
            observed = self.restarts.get(name, {}).get(n)
            data = observed.data if observed is not None else self.failures.new_records.get(
                restart_record_name(name, n), {})
            reason, text = data.get("reason"), data.get("message")
            if isinstance(reason, str):
                cause += f", reason {reason}" + (f": {text!r}" if isinstance(text, str) else "")
            parts.append(f"pod {name} {cause} and is recreated")
        limit = self.job.run_policy.backoff_limit
        budget = f" of backoffLimit {limit}" if limit is not None else ""
        return (f"{subject(self.job.key)} is restarting: {'; '.join(parts)} "
                f"(restarts so far: {self.restart_total()}{budget}).")

    # --- output ------------------------------------------------------------------------------

    def status(self, *, frozen: JSON | None = None, not_counted: frozenset[str] | None = None) -> JSON:
        """The status to write: the same observations always give the same bytes."""
        if not_counted is None:
            # Pods a whole-job restart replaces are not counted from the sync that decides it on,
            # so the status does not change when they go.
            not_counted = self.failures.not_counted | {
                p.name for p in self.pods.values() if p.job_attempt < self.attempt and p.phase != "Succeeded"}
        replicas = frozen if frozen is not None else self._replicas(not_counted)
        attempt = self.known_attempt if self.conds.terminal() else self.attempt
        return _status(conds=self.conds, replicas=replicas, start_time=self.start_time,
                       completion_time=self.completion_time, restart_count=self.restart_total(),
                       attempt=max(attempt, self.old_attempt),
                       history=self.history, cleaned_up_time=self.cleaned_up_time, old=self.old)

    def _frozen_replicas(self) -> JSON:
        """replicaStatuses as the job ends, kept from then on (Argo's conditions read them).

        Read back from a terminal status when it has them; else counted now. Pods still running
        that the policy stops count as succeeded on success, as training-operator counts them,
        and as no longer active on failure.
        """
        if self.was_terminal and (frozen := _frozen_from(self.old)):
            return frozen
        not_counted = self.failures.not_counted
        counts = self._replicas(not_counted)
        if self.conds.terminal() == "Failed" and self.job.run_policy.clean_pod_policy != "None":
            for entry in counts.values():
                entry["active"] = 0  # the policy stops them: the record does not show them running
        if self.conds.terminal() == "Succeeded":
            for rtype, entry in counts.items():
                running = {p.index for p in self.pods.values()
                           if p.rtype == rtype and p.active and p.name not in not_counted}
                done = self.completed[rtype] | running
                entry.update({"active": 0, "succeeded": len(done)})
                if done:
                    entry["completedIndexes"] = _format_indexes(done)
        return counts

    def _replicas(self, not_counted: frozenset[str]) -> JSON:
        counts: JSON = {}
        for rtype in self.job.replicas:
            mine = [p for p in self.pods.values()
                    if p.rtype == rtype and not p.terminating and p.name not in not_counted]
            entry: JSON = {"active": sum(p.phase == "Running" for p in mine),
                           "succeeded": len(self.completed[rtype]),
                           "failed": sum(p.phase == "Failed" for p in mine)}
            if self.completed[rtype]:
                entry["completedIndexes"] = _format_indexes(self.completed[rtype])
            counts[rtype] = entry
        return counts

    def _sorted(self, pods: Any) -> list[PodView]:
        order = {rtype: n for n, rtype in enumerate(self.job.replicas)}
        return sorted(pods, key=lambda p: (order[p.rtype], p.index))


class Outcome(NamedTuple):
    """A finished job as its observed outcome record tells it (hooks.shared.memory)."""

    recorded: OldStatus  # the record's fields; for a record that cannot be read, the last status
    conds: Conditions  # always with Succeeded or Failed True
    completion_time: str


def read_outcome(record: Record, old: OldStatus, *, key: str, now: datetime) -> Outcome:
    """The outcome an observed `<job>-outcome` record holds; `old` is the status the parent shows.

    Only the hook writes the record, so one that cannot be read, or holds no Succeeded or Failed
    condition, is a damaged object: the job has an outcome nobody can read. It stays finished (a
    rerun is the worse mistake): Failed, with a message naming the record.
    """
    recorded = OldStatus(record.data)
    conds = Conditions(recorded.conditions(), now)
    completion = recorded.time("completionTime") or old.time("completionTime")
    if record.problem is not None or conds.terminal() is None:
        why = record.problem or "it holds no Succeeded or Failed condition"
        conds = Conditions(old.conditions(), parse_rfc3339(completion) if completion else now)
        conds.set("Failed", True, FAILED,
                  f"{subject(key)} has an outcome record that cannot be read ({why}); "
                  f"the job is treated as finished.")
        for other in ("Running", "Restarting"):
            conds.clear(other, FAILED, "The outcome record cannot be read.")
        recorded = OldStatus({**old.raw, "conditions": conds.ordered()})
    return Outcome(recorded, conds, completion or rfc3339(now))


def recorded_status(outcome: Outcome, old: OldStatus, *, cleaned_up_time: str | None,
                    counted: Callable[[], JSON] = dict) -> JSON:
    """The status of a job whose outcome record is observed: the record, whatever the parent's
    status says (a stale read, an edited status), plus cleanedUpTime and statusWarnings.

    Every answer that sees the record writes this, on a valid spec and on an invalid edit alike,
    so a stale read gives byte for byte the status already written (docs/lifecycle.md).
    `counted` gives replicaStatuses for a record that holds none.
    """
    recorded = outcome.recorded
    return _status(conds=outcome.conds, replicas=_frozen_from(recorded) or counted(),
                   start_time=recorded.time("startTime"), completion_time=outcome.completion_time,
                   restart_count=recorded.counter("restartCount") or 0,
                   attempt=recorded.counter("attempt") or 0, history=_read_history(recorded),
                   cleaned_up_time=cleaned_up_time, old=old)


def _status(*, conds: Conditions, replicas: JSON, start_time: str | None, completion_time: str | None,
            restart_count: int, attempt: int, history: Mapping[str, RestartRecord],
            cleaned_up_time: str | None, old: OldStatus) -> JSON:
    """The status to write, fields in one order: the same values always give the same bytes."""
    status: JSON = {"conditions": conds.ordered(), "replicaStatuses": replicas}
    if start_time:
        status["startTime"] = start_time
    if completion_time:
        status["completionTime"] = completion_time
    if restart_count:
        status["restartCount"] = restart_count
    if attempt:
        status["attempt"] = attempt
    if history:
        # Fields in one order, however the record was read (status or a restart record).
        status["restartHistory"] = {k: {f: history[k][f] for f in RestartRecord.__annotations__  # type: ignore[literal-required]
                                        if f in history[k]} for k in sorted(history)}
    if cleaned_up_time:
        status["cleanedUpTime"] = cleaned_up_time
    warnings = old.warnings()
    if warnings:
        status[WARNINGS_FIELD] = warnings
    return status


def _classify_failures(job: MXJob, pods: Mapping[str, PodView], history: Mapping[str, RestartRecord],
                       restarts: Mapping[str, Mapping[int, Record]]) -> Failures:
    """Split failed pods into job failures and pods to recreate; count each failure once.

    A failure is counted when it is new to both memories: the status history (by the failed
    pod's uid) and the restart records (by uid, or by a record numbered past the pod's own
    attempt). Counting it adds a restart record; the pod is deleted only once that record is
    observed, so a stale parent can never make the hook forget the restart. The history given
    is not changed: the one with this sync's failures is returned.
    """
    order = {rtype: n for n, rtype in enumerate(job.replicas)}
    counted = dict(history)
    fatal, recreate, recorded, new_records, job_losses = [], [], set(), {}, []
    for pod in sorted(pods.values(), key=lambda p: (order[p.rtype], p.index)):
        if pod.terminating or pod.phase == "Succeeded":
            continue
        policy = job.replicas[pod.rtype].restart_policy
        in_place = pod.phase != "Failed"
        if in_place and not (pod.restarts and policy in ("OnFailure", "Always")):
            continue
        code = lost_exit_code(pod)
        retried = policy in ("OnFailure", "Always") or (policy == "ExitCode" and is_retryable(code))
        action = failure_action(job, pod.rtype, code, retried=retried)
        if action == FAIL_JOB:
            fatal.append(pod)
            continue
        if action == RESTART_JOB:
            job_losses.append(pod)
            continue
        if in_place:  # RestartPod: the kubelet restarts it in place, counted as a container restart
            continue
        recreate.append(pod)
        in_records = any(n > pod.attempt or r.data.get("failedUID") == pod.uid
                         for n, r in restarts.get(pod.name, {}).items())
        record: JSON = dict(counted.get(pod.name, {}))
        if not in_records and record.get("lastFailedUID") != pod.uid:
            record["lastFailedUID"] = pod.uid
            if pod.exit_code is not None:
                record["lastExitCode"] = pod.exit_code
            else:
                record.pop("lastExitCode", None)
            record["recreations"] = max(record.get("recreations", 0), pod.attempt) + 1
            record["priorContainerRestarts"] = record.get("priorContainerRestarts", 0) + pod.restarts
            counted[pod.name] = cast(RestartRecord, record)
        if in_records:
            recorded.add(pod.name)
        else:
            data: JSON = {"failedUID": pod.uid, "containerRestarts": pod.restarts}
            if pod.exit_code is not None:
                data["exitCode"] = pod.exit_code
            if pod.reason:
                data["reason"] = pod.reason
            if pod.message:
                data["message"] = pod.message
            new_records[restart_record_name(pod.name, record.get("recreations", 1))] = data
    return Failures(fatal, recreate, frozenset(recorded), new_records, counted, job_losses)


def lost_exit_code(pod: PodView) -> int | None:
    """The exit code a lost pod shows: its container's, or the previous run's after an in-place restart."""
    return pod.exit_code if pod.phase == "Failed" else pod.last_exit_code


def loss_cause(pod: PodView) -> str:
    """How a lost pod ended, for a condition: exit code, reason and the first line of its message."""
    in_place = pod.phase != "Failed"
    code = lost_exit_code(pod)
    reason = pod.last_reason if in_place else pod.reason
    message = pod.last_message if in_place else pod.message
    text = f"exit code {code}" if code is not None else "no exit code"
    if reason:
        text += f", reason {reason}"
    if message:
        text += f": {message!r}"
    return text


def _merge_history(history: dict[str, RestartRecord], restarts: Mapping[str, Mapping[int, Record]],
                   pods: Mapping[str, PodView]) -> dict[str, RestartRecord]:
    """The status history, raised to what the restart records and the pods' attempt labels show.

    A new dict: the history read from status is not changed.
    """
    merged = {name: cast(RestartRecord, dict(record)) for name, record in history.items()}
    for name, records in restarts.items():
        last = max(records)
        record = cast(JSON, dict(merged.get(name, {})))
        if last > record.get("recreations", 0):
            data = records[last].data
            record["recreations"] = last
            if isinstance(data.get("failedUID"), str):
                record["lastFailedUID"] = data["failedUID"]
            code = data.get("exitCode")
            if isinstance(code, int) and not isinstance(code, bool) and -(2**31) <= code < 2**31:
                record["lastExitCode"] = code
            else:
                record.pop("lastExitCode", None)
        prior = sum(r.data["containerRestarts"] for r in records.values()
                    if is_counter(r.data.get("containerRestarts")))
        record["priorContainerRestarts"] = max(record.get("priorContainerRestarts", 0), prior)
        merged[name] = cast(RestartRecord, record)
    for pod in pods.values():
        if pod.attempt > merged.get(pod.name, {}).get("recreations", 0):
            record = cast(JSON, dict(merged.get(pod.name, {})))
            record["recreations"] = pod.attempt
            record.setdefault("priorContainerRestarts", 0)
            merged[pod.name] = cast(RestartRecord, record)
    return merged


def _frozen_from(old: OldStatus) -> JSON:
    """replicaStatuses read back, each counter kept only in the shape written."""
    frozen: JSON = {}
    for rtype, entry in old.object("replicaStatuses").items():
        if not isinstance(entry, Mapping):
            continue
        kept: JSON = {k: entry[k] for k in ("active", "succeeded", "failed") if is_counter(entry.get(k))}
        if isinstance(entry.get("completedIndexes"), str):
            kept["completedIndexes"] = entry["completedIndexes"]
        frozen[str(rtype)] = kept
    return frozen


def _fatal_message(job: MXJob, fatal: list[PodView], *, after: str = "") -> str:
    parts = []
    for pod in fatal:
        policy = job.replicas[pod.rtype].restart_policy
        code = lost_exit_code(pod)
        retried = policy in ("OnFailure", "Always") or (policy == "ExitCode" and is_retryable(code))
        if failure_action(job, pod.rtype, code, retried=retried) == FAIL_JOB and retried:
            why = "runPolicy.failurePolicy says FailJob"
        elif policy == "Never":
            why = "restartPolicy Never does not retry"
        else:
            why = "a permanent error under restartPolicy ExitCode"
        when = f" after {after}" if after else ""
        parts.append(f"{pod.rtype} {pod.index} (pod {pod.name}) failed with {loss_cause(pod)}{when}; {why}")
    return f"{subject(job.key)} failed: {'; '.join(parts)}."


def _completed_before(job: MXJob, old: OldStatus) -> dict[str, set[int]]:
    """Replica indexes that already succeeded, as the last status recorded them.

    Jobs adopted from an older operator carry its status: mxnet-operator before v1.1 wrote
    `mxReplicaStatuses`, later ones `replicaStatuses` without `completedIndexes`, both with counts
    only, keyed by the replica key as the user spelt it. A succeeded count that covers every
    replica of a type names every index (there is one pod per index); a smaller count cannot say
    which indexes, so those are left to the pods still observed. This hook writes
    completedIndexes whenever an index has completed, so the counts only matter on the first sync
    of an adopted job.
    """
    field, recorded = "replicaStatuses", old.object("replicaStatuses")
    if not recorded:
        field, recorded = "mxReplicaStatuses", old.object("mxReplicaStatuses")
    by_type = {str(key).lower(): (key, entry) for key, entry in recorded.items()}
    completed: dict[str, set[int]] = {}
    for rtype, spec in job.replicas.items():
        key, entry = by_type.get(rtype.lower(), (rtype, {}))
        if not isinstance(entry, Mapping):
            old.warn(f"status.{field}.{key}", "is not an object")
            entry = {}
        if "completedIndexes" in entry:
            completed[rtype] = _read_indexes(old, entry.get("completedIndexes"), rtype, spec.replicas)
            continue
        succeeded = entry.get("succeeded")
        if succeeded is not None and not is_counter(succeeded):
            old.warn(f"status.{field}.{key}.succeeded", "is not a non-negative int32 counter")
            succeeded = None
        everyone = isinstance(succeeded, int) and 0 < spec.replicas <= succeeded
        completed[rtype] = set(range(spec.replicas)) if everyone else set()
    return completed


def _read_history(old: OldStatus) -> dict[str, RestartRecord]:
    """status.restartHistory, each record kept only if every field has the type written here."""
    history: dict[str, RestartRecord] = {}
    for name, record in old.object("restartHistory").items():
        if not (isinstance(record, Mapping)
                and isinstance(record.get("lastFailedUID", ""), str)
                and isinstance(record.get("lastExitCode", 0), int)
                and not isinstance(record.get("lastExitCode"), bool)
                and -(2**31) <= record.get("lastExitCode", 0) < 2**31
                and all(is_counter(record.get(k, 0))
                        for k in ("recreations", "priorContainerRestarts"))):
            old.warn(f"status.restartHistory[{name[:80]}]", "is not a restart record")
            continue
        history[name] = cast(RestartRecord, {k: record[k] for k in RestartRecord.__annotations__
                                             if k in record})
    return history


def _read_indexes(old: OldStatus, text: Any, rtype: str, replicas: int) -> set[int]:
    """'0-2,5' -> {0, 1, 2, 5}; a value we would not have written counts as nothing completed.

    Each range is checked against the replica count before it is expanded, so the work is
    bounded by the job's size, whatever the text says.
    """
    if text is None or text == "":
        return set()
    indexes: set[int] = set()
    parts = text.split(",", replicas) if isinstance(text, str) else [""]
    last = -2
    for part in parts:
        low, _, high = part.partition("-")
        # Ascending, disjoint, adjacent runs merged: the form _format_indexes writes. That also
        # caps the expanded total at the replica count, however long the text.
        if not (_INDEX.fullmatch(low) and (high == "" or _INDEX.fullmatch(high))
                and last + 1 < int(low) <= int(high or low) < replicas):
            old.warn(f"status.replicaStatuses.{rtype}.completedIndexes",
                     f"is not ascending index ranges below {replicas} (like 0-2,5)")
            return set()
        last = int(high or low)
        indexes.update(range(int(low), last + 1))
    return indexes


def _format_indexes(indexes: set[int]) -> str:
    """{0, 1, 2, 5} -> '0-2,5', the batch/v1 Job completedIndexes form."""
    ranges: list[list[int]] = []
    run: list[int] = []
    for i in sorted(indexes):
        if run and i == run[-1] + 1:
            run.append(i)
            continue
        if run:
            ranges.append(run)
        run = [i]
    if run:
        ranges.append(run)
    return ",".join(f"{r[0]}-{r[-1]}" if len(r) > 1 else str(r[0]) for r in ranges)
