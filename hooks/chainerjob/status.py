"""A ChainerJob's status: the master Job's, as the original reported it, plus what the original lacked.

The original's tools read the master Job's fields (conditions Complete/Failed, startTime,
completionTime, active, succeeded, failed); those are copied from the observed Job, field by field,
so the status only changes when the Job does. Added: worker readiness per worker set, and our own
conditions (Created, Waiting while the workers start, Running) so that the State column, the last
condition's type, always says where the job is.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from hooks.chainerjob.decision import Decision
from hooks.chainerjob.progress import STOPPED_BY_HOOK, stopped_by_hook
from hooks.chainerjob.related import FAILURE_KEY, failure_words, master_failure, recorded_failure
from hooks.chainerjob.restarts import Restart, attempt_of, restarted_message, restarting_message
from hooks.chainerjob.spec import ChainerJob
from hooks.chainerjob.vocabulary import (
    CREATED,
    FAILED,
    FAILED_VALIDATION,
    JOB_CONDITIONS,
    KUEUE_ADMITTED,
    OWN_CONDITIONS,
    PODGROUP_CREATED,
    RESTARTED,
    RESUMED,
    RUNNING,
    STALLED,
    STATE_ORDER,
    SUCCEEDED,
    SUSPENDED,
    WAITING_FOR_KUEUE,
    WAITING_FOR_WORKERS,
    WORKERS_READY,
    JobCondition,
    OwnCondition,
    subject,
)
from hooks.shared.conditions import Conditions
from hooks.shared.k8s import JSON
from hooks.shared.status import condition_problem, is_counter, parse_time

JOB_CONDITION_FIELDS = ("type", "status", "reason", "message", "lastProbeTime", "lastTransitionTime")
JOB_STATUS_FIELDS = ("startTime", "completionTime", "active", "succeeded", "failed")


def master_record(master_job: Mapping[str, Any] | None, old_status: Mapping[str, Any], *,
                  recorded: Mapping[str, Any] | None = None, job_name: str = "",
                  master_pods: Mapping[str, Any] | None = None, main_container: str | None = None) -> JSON:
    """The master Job's part of the status: from the observed Job, else as last recorded if it had finished.

    A master deleted after it finished is gone for good (it is not re-created), so its record is
    the job's outcome: the outcome record child (`recorded`) when observed, which a stale status
    cannot undo, else the old status (a job that finished before such records existed).

    A Failed master also says what its newest failed pod showed (hooks.chainerjob.related): the
    Failed condition's message ends with it, and the record keeps it under `masterFailure` (which
    the status leaves out). Once an outcome record is observed, only what it kept is said, so the
    message stays the same after the pods are gone.
    """
    if master_job is not None and (stopped_by_hook(recorded) or stopped_by_hook(old_status)):
        # The hook failed the job (a stall under spec.runPolicy.stallPolicy FailJob, a pod lost past
        # maxRestarts) and deleted its master Job: the Job read now is one about to go, and its status
        # says nothing of the end.
        master_job = None
    if master_job is not None:
        source = master_job.get("status") or {}
    else:
        source = recorded if recorded is not None else old_status
    listed = source.get("conditions")
    conditions: list[JSON] = []
    # Only what reads back unchanged (one condition per type, fields in the shape written): a Job
    # controller never reports anything else, and anything else would change the status on every sync.
    for cond in listed if isinstance(listed, list) else []:
        if condition_problem(cond, JOB_CONDITIONS) is None and all(c["type"] != cond["type"] for c in conditions):
            conditions.append({k: cond[k] for k in JOB_CONDITION_FIELDS if k in cond})
    if master_job is None and not any(c.get("status") == "True" for c in conditions):
        return {"conditions": []}
    record: JSON = {"conditions": conditions}
    record.update({k: source[k] for k in JOB_STATUS_FIELDS if k in source and _reads_back(k, source[k])})
    failed = next((c for c in conditions if c["type"] == "Failed" and c.get("status") == "True"), None)
    if failed is None:
        return record
    if recorded is not None:
        failure = recorded_failure(recorded)
    else:
        failure = master_failure(master_pods or {}, job_name, main_container, attempt_of(master_job)) \
            if master_job is not None else None
    if failure is not None:
        record[FAILURE_KEY] = failure
        if master_job is not None:  # a recorded or old Failed condition says it already
            said = failed.get("message")
            failed["message"] = f"{said}; {failure_words(failure)}" if said else failure_words(failure)
    return record


def _reads_back(key: str, value: Any) -> bool:
    return parse_time(value) is not None if key in ("startTime", "completionTime") else is_counter(value)


def finished(master_status: Mapping[str, Any]) -> JobCondition | None:
    """Complete or Failed once the master Job has finished, else None."""
    # The first True one in the list's order; master_record keeps only JOB_CONDITIONS.
    return next((t for c in master_status["conditions"] if c.get("status") == "True"
                 for t in JOB_CONDITIONS if c["type"] == t), None)


def failed_validation(old_status: Mapping[str, Any]) -> bool:
    """Whether the job was refused at creation (Failed is terminal: it is never started later)."""
    return any(c.get("type") == "Failed" and c.get("status") == "True" and c.get("reason") == FAILED_VALIDATION
               for c in old_status.get("conditions") or [] if isinstance(c, Mapping))


@dataclass(frozen=True)
class KeptTimes:
    """When things happened, as the children keep them (hooks.chainerjob.sync._kept_times)."""

    created: datetime  # the job's first sync
    master_started: datetime | None  # the sync that first answered the master Job (None: unknown)
    resumed: datetime | None = None  # the sync that resumed the job, for the attempt its resume began


def status_for(job: ChainerJob, old_status: Mapping[str, Any], master_status: Mapping[str, Any],
               ready: Mapping[str, int], decision: Decision, now: datetime, *, times: KeptTimes,
               stall: str | None = None, restart: Restart | None = None, restarting: bool = False,
               unplaced: str = "", admitting: bool = False) -> JSON:
    """The whole status for this sync; the same observations give the same status, byte for byte.

    `master_status` is the master Job's part (master_record), `ready` the ready workers of each set,
    `stall` the clause saying how a running job may have stalled (hooks.chainerjob.progress),
    `restart` the whole-job restart the job is in or came through, `restarting` whether the earlier
    attempt is still being replaced (hooks.chainerjob.restarts), `unplaced` which pods the scheduler
    has not placed and why (hooks.chainerjob.related.not_scheduled), said by Waiting while the master
    waits for its workers, and by Running once the master runs. `admitting`: a pod of its Kueue pod
    group is still behind Kueue's gate: Waiting says so, with Kueue's words, and nothing is Running.

    Each transition is stamped with a time every sync reads alike (`times`, the master Job's own
    times, the restart's record), not with `now`: a sync that reads the status of one write earlier
    then writes the same status as the sync before it (a fixed point under a lagging parent cache).
    """
    waits = f"; {unplaced}." if unplaced else "."
    own = _OwnConditions(old_status, now)
    outcome = decision.outcome
    # The attempt's start: Waiting goes True with it (a restart's, from its record).
    # A resumed job's new attempt starts with its resume, which no child keeps: the sync's time.
    began = (times.resumed if restart.suspended else restart.recorded_at) if restart is not None else times.created
    own.set("Created", CREATED, f"{subject(job.key)} was accepted and its children created.", at=times.created)
    if outcome is None:
        _resumed(own, job.key, restart, times.resumed)
    if decision.waiting_message is not None and outcome is None:
        own.set("Waiting", decision.waiting_reason, decision.waiting_message, at=began)
    elif admitting and outcome is None:
        own.set("Waiting", WAITING_FOR_KUEUE, f"{subject(job.key)} is waiting for Kueue to admit its pod group "
                                              f"(the master and every worker, admitted together){waits}", at=began)
    elif decision.master and decision.queued:
        own.clear("Waiting", KUEUE_ADMITTED, f"{subject(job.key)}: Kueue admitted its pod group, so the master and "
                                             f"the workers start together.", at=times.master_started)
    elif decision.master and decision.gang:
        own.clear("Waiting", PODGROUP_CREATED, f"{subject(job.key)}: its PodGroup exists, so the master "
                                               f"and the workers were created; the gang starts them together.",
                  at=times.master_started)
    elif decision.master:
        own.clear("Waiting", WORKERS_READY, f"{subject(job.key)}: all {job.workers} workers were "
                                            f"ready, so the master was started.", at=times.master_started)
    elif job.distributed and outcome is None and not decision.queued and not decision.gang:
        # A queued or gang-scheduled job's master never waits for ready workers (Kueue admits the group
        # whole; the gang starts master and workers together): while a restart replaces its children,
        # Waiting stays as it was, until Kueue holds the new group or the gang's new master is made.
        own.set("Waiting", WAITING_FOR_WORKERS, _waiting_message(job, ready).removesuffix(".") + waits, at=began)
    if outcome is not None:
        _finish(own, job.key, master_status, outcome)
    elif not admitting:  # a master Job's pod behind Kueue's gate is active to the Job, not running
        # While the new attempt's master Job exists but has not started, Restarting says what the
        # scheduler holds back (before, Waiting says it, for the workers).
        _while_running(own, job, master_status, stall=stall, restart=restart, restarting=restarting, waits=waits,
                       restart_waits=waits if decision.master else ".")

    status = _with_master_status(own, master_status, now)
    if restart is not None:
        status["attempt"] = restart.attempt
    if job.distributed:
        status["workerSets"] = {name: {"replicas": 0 if outcome else ws.replicas, "readyReplicas": ready[name]}
                                for name, ws in job.worker_sets.items()}
    return status


def _while_running(own: _OwnConditions, job: ChainerJob, master_status: Mapping[str, Any], *, stall: str | None,
                   restart: Restart | None, restarting: bool, waits: str, restart_waits: str = ".") -> None:
    """Running, and Restarting through a whole-job restart until the new attempt's master runs.

    `waits` ends the Running message, `restart_waits` the Restarting one: what the scheduler has not
    placed yet, or a full stop."""
    active = bool(master_status.get("active"))
    # Started, not active: between its pod's success and the Job's Complete nothing is active.
    started = active or "startTime" in master_status
    if restart is not None and restart.suspended:
        restart = None  # a resumed job's new attempt is no restart: the Suspended condition says it
    if restart is not None and (restarting or not started):
        # The times are the record's: a sync that reads the status of before the restart stamps
        # it as the sync that decided it did.
        message = restarting_message(job.key, restart, job.max_restarts).removesuffix(".") + restart_waits
        own.set("Restarting", restart.reason, message, at=restart.recorded_at)
        own.clear("Running", restart.reason, message, at=restart.recorded_at)
        return
    # When the Job controller started the master Job: what every sync that sees it active reads.
    job_started = parse_time(master_status.get("startTime"))
    if restart is not None:
        own.clear("Restarting", RESTARTED, restarted_message(job.key, restart), at=job_started)
    if active and stall is not None:  # spec.runPolicy.stallPolicy action Report
        own.set("Running", STALLED, f"{subject(job.key)} may have stalled: {stall}.", at=job_started)
    elif active:
        workers = f" with {job.workers} workers" if job.distributed else ""
        own.set("Running", RUNNING, f"{subject(job.key)}: the master is running{workers}{waits}", at=job_started)


def suspended_status(job: ChainerJob, old_status: Mapping[str, Any], now: datetime, *, times: KeptTimes,
                     restart: Restart | None) -> JSON:
    """The status of a suspended job (spec.runPolicy.suspend) that has not finished: Suspended, and
    nothing running: no master Job fields, no ready worker. Said so from the sync that decides the
    suspension on, so the status does not change as the attempt's master Job and workers go.
    Suspended is stamped with when the suspension was decided, as its attempt's record keeps it (the
    job's creation for a job suspended before it launched); `now` only while that record is not
    observed yet."""
    own = _OwnConditions(old_status, now)
    own.set("Created", CREATED, f"{subject(job.key)} was accepted and its children created.", at=times.created)
    at = restart.recorded_at if restart is not None and restart.suspended else times.created
    said = (f"{subject(job.key)} is suspended: it has no master Job and no worker pods; it starts again, as a new "
            f"attempt, when spec.runPolicy.suspend is false.")
    own.set("Suspended", SUSPENDED, said, at=at)
    for ctype in ("Waiting", "Running", "Restarting"):
        own.clear(ctype, SUSPENDED, said, at=at)
    status = _with_master_status(own, {"conditions": []}, now)
    if restart is not None:
        status["attempt"] = restart.attempt
    if job.distributed:
        status["workerSets"] = {name: {"replicas": 0, "readyReplicas": 0} for name in job.worker_sets}
    return status


def _resumed(own: _OwnConditions, key: str, restart: Restart | None, at: datetime | None) -> None:
    """Suspended goes False once the job runs again (spec.runPolicy.suspend false), as the attempt a
    suspension began (restart), or the same attempt if it had not launched before."""
    if not own.conditions.is_true("Suspended"):
        return
    attempt = f" as attempt {restart.attempt}" if restart is not None and restart.suspended else ""
    own.clear("Suspended", RESUMED, f"{subject(key)} is resumed: it starts again{attempt}.", at=at)


def finished_while_invalid(key: str, old_status: Mapping[str, Any], master_status: Mapping[str, Any],
                           outcome: JobCondition, now: datetime) -> JSON:
    """A master that finished (`outcome`) while the spec is invalid: recorded as a valid sync would.

    The spec cannot be read, so everything else (worker readiness) stays as it was; the worker
    sets are scaled to 0 by the caller, so their desired replicas are 0 here too.
    """
    own = _OwnConditions(old_status, now)
    _finish(own, key, master_status, outcome)
    status: JSON = {k: v for k, v in old_status.items()
                    if k not in ("conditions", "observedGeneration", *JOB_STATUS_FIELDS)}
    status.update(_with_master_status(own, master_status, now))
    sets = old_status.get("workerSets")
    if isinstance(sets, Mapping):
        status["workerSets"] = {name: {**counts, "replicas": 0} for name, counts in sets.items()}
    return status


class _OwnConditions:
    """The hook's own conditions of the last status (the master Job's are copied afresh), set only
    by their type (OwnCondition), so a misspelt type fails the type check."""

    def __init__(self, old_status: Mapping[str, Any], now: datetime):
        self.conditions = Conditions([c for c in old_status.get("conditions") or []
                                      if isinstance(c, Mapping) and c.get("type") in OWN_CONDITIONS], now,
                                     state_order=STATE_ORDER)

    def set(self, ctype: OwnCondition, reason: str, message: str, *, at: datetime | None = None) -> None:
        """Set the condition True; `at`: when it came true, if it was not (a change of its message
        alone, as it happens, is stamped now)."""
        self.conditions.set(ctype, True, reason, message, at=None if self.conditions.is_true(ctype) else at)

    def clear(self, ctype: OwnCondition, reason: str, message: str, *, at: datetime | None = None) -> None:
        """Set the condition False if it is True."""
        self.conditions.clear(ctype, reason, message, at=at)


def _finish(own: _OwnConditions, key: str, master_status: Mapping[str, Any], outcome: JobCondition) -> None:
    reason = SUCCEEDED if outcome == "Complete" else FAILED
    final = next(c for c in master_status["conditions"] if c["type"] == outcome and c.get("status") == "True")
    # When the master Job finished, as its condition (or the outcome record) keeps it.
    ended = parse_time(final.get("lastTransitionTime"))
    if final.get("reason") in STOPPED_BY_HOOK:  # the hook ended it (hooks.chainerjob.progress): its message says how
        own.clear("Running", final["reason"], final.get("message", ""), at=ended)
        return
    why = f" ({final['reason']}: {final.get('message', '')})" if final.get("reason") else ""
    own.clear("Running", reason, f"{subject(key)} has finished: the master Job is {outcome}{why}.", at=ended)


def _with_master_status(own: _OwnConditions, master_status: Mapping[str, Any], now: datetime) -> JSON:
    """Our conditions and the master Job's, in state order, then the Job's other fields."""
    both = Conditions([*own.conditions.ordered(), *master_status["conditions"]], now, state_order=STATE_ORDER)
    status: JSON = {"conditions": both.ordered()}
    status.update({k: master_status[k] for k in JOB_STATUS_FIELDS if k in master_status})
    return status


def _waiting_message(job: ChainerJob, ready: Mapping[str, int]) -> str:
    counts = ", ".join(f"{name} {min(ready[name], ws.replicas)}/{ws.replicas}" for name, ws in job.worker_sets.items())
    total = sum(min(ready[name], ws.replicas) for name, ws in job.worker_sets.items())
    return (f"{subject(job.key)} is waiting for its workers: {total} of {job.workers} ready ({counts}); "
            f"the master starts when all are ready.")
