"""Restart accounting: which lost pods fail the job or come back, and how many restarts it has had.

A failure is counted once, however often a sync sees it. The hook remembers counted failures in
two places, because a sync often reads a stale parent (docs/lifecycle.md): the status
`restartHistory`, one entry per pod, and the `<pod>-restart-<n>` records (hooks.shared.memory).
Every reader here takes the larger of the two. The functions are pure: the history they are
given is never changed; a new one is returned.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any, NamedTuple, cast

from hooks.mxjob.observed import PodView, Slot
from hooks.mxjob.runpolicy import FailureRule
from hooks.mxjob.spec import MXJob
from hooks.mxjob.vocabulary import FAIL_JOB, RESTART_JOB, RESTART_POD, SCHEDULER, FailureAction, subject
from hooks.shared.conditions import rfc3339
from hooks.shared.k8s import JSON, RestartRecord
from hooks.shared.kueue import queue_eviction_of
from hooks.shared.memory import Record, restart_record_name
from hooks.shared.status import OldStatus, is_counter, parse_time
from hooks.shared.termination import MAX_MESSAGE, MAX_REASON, Said, first_line, how_it_ended
from hooks.shared.validation import is_int32

RETRYABLE_EXIT_CODES = frozenset({130, 137, 138, 143})
MAX_NAMED = 3  # pods a message names one by one; more are counted ("and 2 more"), so it stays short


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

    @property
    def evicted(self) -> list[PodView]:
        """The pods Kueue stopped, among those lost for a whole-job restart (the first names why)."""
        return [p for p in self.job_losses if p.evicted]


def no_failures(history: dict[str, RestartRecord]) -> Failures:
    """Nothing lost now: the history as merged, nothing to recreate or record."""
    return Failures([], [], frozenset(), {}, history, [])


def is_retryable(exit_code: int | None) -> bool:
    """Signals (130, 137, 143), 138 (user asks for a retry), and no exit code at all (eviction)."""
    return exit_code is None or exit_code in RETRYABLE_EXIT_CODES


def retried_by_policy(job: MXJob, pod: PodView) -> bool:
    """Whether the pod's restartPolicy retries how it was lost: OnFailure and Always always do,
    ExitCode for a retryable exit code; a pod taken away by a disruption (preempted, evicted) is
    retried whatever its policy: it did not fail, and restartPolicy speaks of its container's exit."""
    policy = job.replicas[pod.rtype].restart_policy
    return (pod.disrupted or policy in ("OnFailure", "Always")
            or (policy == "ExitCode" and is_retryable(lost_exit_code(pod))))


def distributed(job: MXJob) -> bool:
    """An MXTrain job with a Scheduler: its processes meet once in ps-lite, which admits no
    process that comes back later (docs/lifecycle.md, "Recovery measured")."""
    return job.job_mode == "MXTrain" and job.has(SCHEDULER)


def failure_action(job: MXJob, rtype: str, exit_code: int | None, *, retried: bool) -> FailureAction:
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


def counted_in_records(pod: PodView, records: Mapping[int, Record]) -> bool:
    """Whether a failed pod's failure is already counted by a restart record of its slot.

    A record counts it when it names the pod's uid, or when it is numbered past the attempt the
    pod was created for (the pod is the old one, its recreation already decided). A live pod is
    never counted here: a live pod whose uid is the history's lastFailedUID is the failed pod
    restarted in place, and its restarts are in the history's priorContainerRestarts already.
    """
    return pod.phase == "Failed" and any(n > pod.attempt or r.data.get("failedUID") == pod.uid
                                         for n, r in records.items())


def classify_failures(job: MXJob, pods: Mapping[str, PodView], history: Mapping[str, RestartRecord],
                      restarts: Mapping[str, Mapping[int, Record]], *, now: datetime) -> Failures:
    """Split failed pods into job failures and pods to recreate; count each failure once.

    A failure is counted when it is new to both memories: the status history (by the failed
    pod's uid) and the restart records (counted_in_records). Counting it adds a restart record;
    the pod is deleted only once that record is observed, so a stale parent can never make the
    hook forget the restart.
    """
    counted = dict(history)
    fatal, recreate, recorded, new_records, job_losses = [], [], set(), {}, []
    for pod in in_job_order(job, pods.values()):
        if pod.evicted:
            # Kueue stops the whole group: the job restarts whole, whatever the pod's policy and
            # the failure rules (they speak of pods that failed; this one was taken by the queue).
            job_losses.append(pod)
            continue
        # A pod deleted by someone else is not lost (it is created again once gone), unless a
        # disruption takes it: then it is lost as it goes (hooks.mxjob.observed.view_pods).
        if (pod.terminating and not pod.disrupted) or pod.phase == "Succeeded":
            continue
        policy = job.replicas[pod.rtype].restart_policy
        in_place = pod.phase != "Failed"
        if in_place and not (pod.restarts and policy in ("OnFailure", "Always")):
            continue
        action = failure_action(job, pod.rtype, lost_exit_code(pod), retried=retried_by_policy(job, pod))
        if action == FAIL_JOB:
            fatal.append(pod)
            continue
        if action == RESTART_JOB:
            job_losses.append(pod)
            continue
        if in_place:  # RestartPod: the kubelet restarts it in place, counted as a container restart
            continue
        if pod.grouped:
            # Kueue keeps a failed pod of its group (its finalizer) until the group has ended, so no pod
            # of its name can replace it, and the rest wait: the job restarts whole, in a new group.
            job_losses.append(pod)
            continue
        recreate.append(pod)
        in_records = counted_in_records(pod, restarts.get(pod.name, {}))
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
            new_records[restart_record_name(pod.name, record.get("recreations", 1))] = _restart_record(pod, now)
    return Failures(fatal, recreate, frozenset(recorded), new_records, counted, job_losses)


# The container restarts of the pods a queue eviction replaced, which its attempt record carries
# (hooks.shared.kueue.QUEUE_EVICTION marks the record itself).
CARRIED_RESTARTS = "containerRestarts"


def carried_restarts(data: Mapping[str, Any]) -> int:
    """The container restarts a queue eviction's record carries over (0 for any other record)."""
    value = data.get(CARRIED_RESTARTS)
    return value if queue_eviction_of(data) is not None and is_counter(value) else 0


def _restart_record(pod: PodView, now: datetime) -> JSON:
    data: JSON = {"failedUID": pod.uid, "containerRestarts": pod.restarts}
    if pod.exit_code is not None:
        data["exitCode"] = pod.exit_code
    if pod.reason:
        data["reason"] = pod.reason
    if pod.message:
        data["message"] = pod.message
        if pod.log_line:
            data["logLine"] = True  # the message is only the last line of a log tail
    # When it failed (restarted_at reads it back): as the pod shows it, else this sync's time.
    data["time"] = pod.finished_at if parse_time(pod.finished_at) is not None else rfc3339(now)
    return data


def with_collateral(job: MXJob, failures: Failures, *, job_restart_pending: bool) -> Failures:
    """One loss, one restart: a peer that fails by default (no rule says FailJob) after a whole-job
    restart was decided whose record is not observed yet (`job_restart_pending`) is collateral (a
    ps-lite process giving up when a peer vanished). One seen in the same sync as the loss is not:
    nothing says it came after the loss, so its permanent error fails the job (docs/lifecycle.md,
    "Several losses in one sync")."""
    if not (failures.fatal and job_restart_pending):
        return failures
    collateral = [p for p in failures.fatal if matching_rule(job, p.rtype, lost_exit_code(p)) is None]
    return failures._replace(fatal=[p for p in failures.fatal if p not in collateral],
                             job_losses=failures.job_losses + collateral)


def fatal_message(job: MXJob, fatal: list[PodView], *, after: str = "", also: list[PodView] | None = None) -> str:
    """The Failed condition for pods lost for good: each pod, how it ended, and why it is not retried;
    then the pods `also` lost in the same sync, which the failure leaves unretried."""
    parts = []
    for pod in fatal[:MAX_NAMED]:
        policy = job.replicas[pod.rtype].restart_policy
        retried = retried_by_policy(job, pod)
        if retried and failure_action(job, pod.rtype, lost_exit_code(pod), retried=retried) == FAIL_JOB:
            why = "runPolicy.failurePolicy says FailJob"
        elif policy == "Never":
            why = "restartPolicy Never does not retry"
        else:
            why = "a permanent error under restartPolicy ExitCode"
        when = f" after {after}" if after else ""
        parts.append(f"{pod.rtype} {pod.index} (pod {pod.name}) failed with {loss_cause(pod)}{when}; {why}")
    if len(fatal) > MAX_NAMED:
        parts.append(f"and {len(fatal) - MAX_NAMED} more pods failed")
    others = also or []
    if others:
        parts.append("also lost now: " + ", ".join(f"pod {p.name} ({loss_cause(p)})" for p in others[:MAX_NAMED])
                     + (f" and {len(others) - MAX_NAMED} more" if len(others) > MAX_NAMED else ""))
    return f"{subject(job.key)} failed: {'; '.join(parts)}."


def lost_exit_code(pod: PodView) -> int | None:
    """The exit code a lost pod shows: its container's, or the previous run's after an in-place restart."""
    return pod.exit_code if pod.phase == "Failed" else pod.last_exit_code


def loss_cause(pod: PodView) -> str:
    """How a lost pod ended, for a condition: exit code, reason and the line of its message that
    says what went wrong (hooks.shared.termination.how_it_ended)."""
    if pod.phase != "Failed":  # restarted in place: its container's previous run
        return how_it_ended(lost_exit_code(pod), pod.last_reason, pod.last_said)
    return how_it_ended(pod.exit_code, pod.reason, pod.said)


def recorded_cause(data: Mapping[str, Any], exit_code: Any = None) -> str:
    """How a lost pod ended, from the restart record that kept it (its exit code, reason, message
    and whether that is only a log line), read defensively: only the hook writes a record."""
    code = data.get("exitCode", exit_code)
    text = first_line(data.get("message"), MAX_MESSAGE)
    return how_it_ended(code if is_int32(code) else None, first_line(data.get("reason"), MAX_REASON),
                        Said(text, data.get("logLine") is True) if text is not None else None)


def merge_history(history: dict[str, RestartRecord], restarts: Mapping[str, Mapping[int, Record]],
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
            if is_int32(code):
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


def read_history(old: OldStatus) -> dict[str, RestartRecord]:
    """status.restartHistory, each record kept only if every field has the type written here."""
    history: dict[str, RestartRecord] = {}
    for name, record in old.object("restartHistory").items():
        if not (isinstance(record, Mapping)
                and isinstance(record.get("lastFailedUID", ""), str)
                and is_int32(record.get("lastExitCode", 0))
                and all(is_counter(record.get(k, 0))
                        for k in ("recreations", "priorContainerRestarts"))):
            old.warn(f"status.restartHistory[{name[:80]}]", "is not a restart record")
            continue
        history[name] = cast(RestartRecord, {k: record[k] for k in RestartRecord.__annotations__
                                             if k in record})
    return history


def live_restarts(history: Mapping[str, RestartRecord], pods: Mapping[str, PodView],
                  restarts: Mapping[str, Mapping[int, Record]], *, attempt: int) -> int:
    """The container restarts of the attempt's live pods not counted in the history or the records."""
    return sum(p.restarts for p in pods.values()
               if p.uid != history.get(p.name, {}).get("lastFailedUID")
               and not counted_in_records(p, restarts.get(p.name, {})) and p.job_attempt == attempt)


def restart_total(history: Mapping[str, RestartRecord], pods: Mapping[str, PodView],
                  restarts: Mapping[str, Mapping[int, Record]], *, attempt: int, counted_attempts: int,
                  carried: int, written: int) -> int:
    """Every restart so far: earlier pods' (from the merged history), each counted whole-job
    restart once (`counted_attempts`: the attempts but those a queue eviction began), the container
    restarts `carried` over queue evictions (their records keep them), plus the live pods' own.

    Never less than the count already `written`: a pod that goes away (cleaned up, deleted by
    hand) takes its restartCount with it, and the count must not drop. A finished job's count is
    not recounted (hooks.mxjob.observation keeps the written one).
    """
    past = sum(r.get("recreations", 0) + r.get("priorContainerRestarts", 0) for r in history.values())
    # A counted whole-job restart counts once; the restarts of the pods it replaces are in it. A
    # queue eviction counts nothing of its own, so the restarts of the pods it replaces are carried.
    live = live_restarts(history, pods, restarts, attempt=attempt)
    return max(past + counted_attempts + carried + live, written)


def awaiting_recreation(history: Mapping[str, RestartRecord], pods: Mapping[str, PodView],
                        slots: Mapping[str, Slot], completed: Mapping[str, frozenset[int]],
                        gone: set[str]) -> list[str]:
    """The slots whose pod is being recreated: `gone` (recreated now), and every slot with a
    restart history whose pod is not observed, is still the failed one, or is not running yet."""
    waiting = set(gone)
    for name, record in history.items():
        pod = pods.get(name)
        if pod is None:
            slot = slots.get(name)
            if slot is not None and slot.index not in completed[slot.rtype]:
                waiting.add(name)
        elif pod.uid == record.get("lastFailedUID") or pod.phase == "Pending":
            waiting.add(name)
    return sorted(waiting)


def restart_message(job: MXJob, names: list[str], history: Mapping[str, RestartRecord],
                    restarts: Mapping[str, Mapping[int, Record]], new_records: Mapping[str, JSON],
                    total: int) -> str:
    """The Restarting condition while pods are recreated: each pod (the first MAX_NAMED), how it
    ended, and the budget."""
    parts = []
    for name in names[:MAX_NAMED]:
        data = _last_record(name, history, restarts, new_records)
        parts.append(f"pod {name} ended with {recorded_cause(data, history.get(name, {}).get('lastExitCode'))} "
                     f"and is recreated")
    if len(names) > MAX_NAMED:
        parts.append(f"and {len(names) - MAX_NAMED} more pods are recreated")
    return (f"{subject(job.key)} is restarting: {'; '.join(parts)} "
            f"(restarts so far: {total}{backoff_budget(job)}).")


def restarted_at(names: list[str], pods: Mapping[str, PodView], history: Mapping[str, RestartRecord],
                 restarts: Mapping[str, Mapping[int, Record]], new_records: Mapping[str, JSON]) -> datetime | None:
    """When the first of these pods' recreations began: when the pod failed, as its restart record
    keeps it (observed or created now), else as the failed pod shows it (None: neither says).

    A sync that reads the status of one write earlier (Metacontroller's parent cache) does not see
    Restarting True: stamped from its own clock, the condition would alternate between two times."""
    times = []
    for name in names:
        moment = parse_time(_last_record(name, history, restarts, new_records).get("time"))
        pod = pods.get(name)
        if moment is None and pod is not None and pod.uid == history.get(name, {}).get("lastFailedUID"):
            moment = parse_time(pod.finished_at)
        if moment is not None:
            times.append(moment)
    return min(times) if times else None


def _last_record(name: str, history: Mapping[str, RestartRecord], restarts: Mapping[str, Mapping[int, Record]],
                 new_records: Mapping[str, JSON]) -> Mapping[str, Any]:
    """What the pod's last recreation's restart record holds (observed, or created now; {}: none)."""
    n = history.get(name, {}).get("recreations", 0)
    observed = restarts.get(name, {}).get(n)
    return observed.data if observed is not None else new_records.get(restart_record_name(name, n), {})


def backoff_budget(job: MXJob) -> str:
    """' of backoffLimit N' when the job has one, for a restart count in a message."""
    limit = job.run_policy.backoff_limit
    return f" of backoffLimit {limit}" if limit is not None else ""


def in_job_order(job: MXJob, pods: Iterable[PodView]) -> list[PodView]:
    """Pods by replica type in the spec's canonical order, then by index."""
    order = {rtype: n for n, rtype in enumerate(job.replicas)}
    return sorted(pods, key=lambda p: (order[p.rtype], p.index))
