"""Whole-job restarts (runPolicy.failurePolicy RestartJob) and how a running job's pods are doing.

Each whole-job restart is an attempt: recorded in `<job>-attempt-<n>` (hooks.shared.memory) and in
the job-attempt label of the new attempt's pods, whose processes see it as MXJOB_ATTEMPT.
"""
from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from hooks.mxjob.observation import Observation
from hooks.mxjob.observed import Slot
from hooks.mxjob.restarts import (
    CARRIED_RESTARTS,
    MAX_NAMED,
    backoff_budget,
    distributed,
    in_job_order,
    loss_cause,
    lost_exit_code,
)
from hooks.mxjob.vocabulary import subject
from hooks.shared.conditions import rfc3339
from hooks.shared.k8s import JSON
from hooks.shared.kueue import QUEUE_EVICTION, eviction_cause, eviction_record, queue_eviction_of
from hooks.shared.status import parse_time


def attempt_record(obs: Observation) -> JSON:
    """What the record of the attempt decided now keeps: the first pod lost and how it ended, and
    the others lost with it (how each of the next MAX_NAMED - 1 ended, so the message can say it
    after the pods are gone), or the stall (runPolicy.stallPolicy RestartJob); and the time: the
    Restarting condition's transition (`decided_at`) and, for a job with a stallPolicy, when the
    new attempt's stall clock counts from (hooks.mxjob.stall.running_since). A queue eviction's
    record names the first pod Kueue stopped and keeps Kueue's reason and message, which leave the
    attempt uncounted, and the container restarts of the pods it replaces (still counted)."""
    losses = obs.failures.job_losses
    timed: JSON = {"time": rfc3339(obs.now)}
    if not losses and obs.stall is not None:
        return {"stalled": obs.stall.clause, **timed}
    if obs.evicting:
        evicted = obs.failures.evicted[0]
        queue = eviction_record(evicted.reason, evicted.message)
        return {"lostPod": evicted.name, "failedUID": evicted.uid, **timed, QUEUE_EVICTION: queue,
                CARRIED_RESTARTS: obs.evicted_restarts}
    pod = losses[0]
    data: JSON = {"lostPod": pod.name, "failedUID": pod.uid, **timed}
    code = lost_exit_code(pod)
    if code is not None:
        data["exitCode"] = code
    data["cause"] = loss_cause(pod)
    if len(losses) > 1:
        data["alsoLost"] = [p.name for p in losses[1:]]
        data["alsoLostCauses"] = [loss_cause(p) for p in losses[1:MAX_NAMED]]
    return data


def attempt_runs(obs: Observation, slots: Mapping[str, Slot]) -> bool:
    """Every slot not completed has a running pod of the current attempt."""
    if obs.attempt > obs.known_attempt or obs.leaving:
        return False
    for name, slot in slots.items():
        pod = obs.pods.get(name)
        if slot.index in obs.completed[slot.rtype]:
            continue
        if pod is None or not pod.active:
            return False
    return True


def attempt_cause(obs: Observation) -> str:
    """Why the current attempt began, from its record: the lost pod and how it ended."""
    if obs.attempt > obs.known_attempt:
        data: Mapping[str, Any] = attempt_record(obs)
    else:
        record = obs.attempt_records.get(obs.attempt)
        data = record.data if record is not None else {}
    if isinstance(data.get("stalled"), str):
        return f"it stalled: {data['stalled']}"
    queue = queue_eviction_of(data)
    if queue is not None:
        return eviction_cause(queue)
    lost = data.get("lostPod")
    cause = data.get("cause")
    what = (f"pod {lost} was lost ({cause})" if isinstance(lost, str) and isinstance(cause, str)
            else "a pod was lost")
    also = data.get("alsoLost")
    if not isinstance(also, list) or not also:
        return what
    causes = data.get("alsoLostCauses")
    named = [f"pod {name} ({text})" for name, text in zip(also, causes if isinstance(causes, list) else [],
                                                          strict=False)
             if isinstance(name, str) and isinstance(text, str)][:MAX_NAMED - 1]
    rest = len(also) - len(named)
    return what + "".join(f", and {words}" for words in named) + (f", and {rest} more" if rest else "")


def attempt_evicted(obs: Observation) -> bool:
    """Whether the current attempt began because Kueue evicted the job (a queue eviction)."""
    if obs.attempt > obs.known_attempt:
        return obs.evicting
    record = obs.attempt_records.get(obs.attempt)
    return record is not None and queue_eviction_of(record.data) is not None


def decided_at(obs: Observation) -> datetime | None:
    """When the current attempt's restart was decided, as its record keeps it; None on the sync that
    decides it (now) or for a record without a time. The status of one write earlier, which a sync
    may read (Metacontroller's parent cache), does not show the restart: stamped from `now`, the
    Restarting condition would alternate between two times, a write on every sync."""
    if obs.attempt > obs.known_attempt:
        return None
    record = obs.attempt_records.get(obs.attempt)
    return parse_time(record.data.get("time")) if record is not None else None


def attempt_stalled(obs: Observation) -> bool:
    """Whether the current attempt began because the job stalled (runPolicy.stallPolicy RestartJob)."""
    if obs.attempt > obs.known_attempt:
        return obs.stall is not None and not obs.failures.job_losses
    record = obs.attempt_records.get(obs.attempt)
    return record is not None and isinstance(record.data.get("stalled"), str)


def job_restart_message(obs: Observation) -> str:
    """The Restarting condition of a whole-job restart: the attempt, the lost pod and why; for a queue
    eviction, Kueue's reason and message, and that it is not counted."""
    if attempt_evicted(obs):
        return (f"{subject(obs.job.key)} is restarting as attempt {obs.attempt}: {attempt_cause(obs)}; every pod "
                f"that has not succeeded is deleted and created again with MXJOB_ATTEMPT={obs.attempt}, in a new "
                f"pod group that Kueue queues and admits again; an eviction by the queue is not counted against "
                f"backoffLimit or failurePolicy.maxRestarts (restarts so far: {obs.restart_total}"
                f"{backoff_budget(obs.job)}).")
    return (f"{subject(obs.job.key)} is restarting as attempt {obs.attempt}: {attempt_cause(obs)}; every pod "
            f"that has not succeeded is deleted and created again with MXJOB_ATTEMPT="
            f"{obs.attempt} (restarts so far: {obs.restart_total}{backoff_budget(obs.job)}).")


def stalled(obs: Observation) -> str:
    """In a distributed job, the running pods restarted on their own (failurePolicy RestartPod:
    recreated, or restarted in place) while their peers ran on, as a clause; "" when none."""
    if not distributed(obs.job):
        return ""
    names = [p.name for p in in_job_order(obs.job, obs.pods.values())
             if p.active and p.index not in obs.completed[p.rtype]
             and (p.restarts or p.attempt) and p.job_attempt == obs.attempt]
    if not names:
        return ""
    return f"pod{'s' if len(names) > 1 else ''} {', '.join(names)} restarted"


def deciding_pods_run(obs: Observation) -> bool:
    """At least one deciding pod runs, and every other one runs or has completed."""
    deciding = obs.job.deciding_slots()
    by_slot = {(p.rtype, p.index): p for p in obs.pods.values()}
    states = [by_slot.get(slot) for slot in deciding]
    return (any(p is not None and p.active for p in states)
            and all((p is not None and p.active) or slot[1] in obs.completed[slot[0]]
                    for p, slot in zip(states, deciding, strict=True)))
