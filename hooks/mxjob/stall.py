"""runPolicy.stallPolicy for an MXJob: a running job whose reporters fall silent (docs/progress.md).

The reports are read, and their silence judged, in hooks.shared.progress (one rule for every
kind); this module decides, for one sync of a job that runs, whether it has stalled and what
follows: a Running condition that says so (Report), a whole-job restart counted as one more
attempt (RestartJob, reason MXJobStalled), or Failed (FailJob). The stall clock starts at the
later of the Running condition's transition and the current attempt's record (a child, so a stale
parent cannot move it back to before a restart), and each reporter's clock at its last report of
the current attempt.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from datetime import datetime
from typing import Any, NamedTuple

from hooks.mxjob.attempts import attempt_runs, deciding_pods_run
from hooks.mxjob.observation import Observation, Stall
from hooks.mxjob.observed import Slot
from hooks.mxjob.restarts import restart_total
from hooks.mxjob.vocabulary import STALLED, subject
from hooks.shared.progress import (
    CONFIRM_SECONDS,
    Report,
    current_reports,
    judge_stall,
    reporter_name,
    status_reports,
    warned_at,
)
from hooks.shared.status import parse_time

__all__ = ["CONFIRM_SECONDS", "StallCheck", "check_stall", "job_reports", "running_since"]


class StallCheck(NamedTuple):
    """The outcome of one check: the observation to go on with, a Failed message, a resync."""

    obs: Observation
    fail_message: str | None = None
    resync_after: float | None = None


def job_reports(obs: Observation, observed: Mapping[str, Report], attempt: int) -> dict[str, Report]:
    """The reports of one attempt, from the ConfigMap and the old status."""
    return current_reports(observed, status_reports(obs.old.raw.get("progress")), attempt)


def check_stall(obs: Observation, slots: Mapping[str, Slot], observed: Mapping[str, Report]) -> StallCheck:
    """Whether the running job has stalled now, and what its stallPolicy does about it."""
    policy = obs.job.run_policy.progress.stall
    if policy is None:
        return StallCheck(obs)
    pending = _pending_restart(obs)
    if pending is not None:
        return _restart(obs, pending)
    if obs.attempt != obs.known_attempt or not attempt_runs(obs, slots) or not deciding_pods_run(obs):
        return StallCheck(obs)
    since = running_since(obs)
    if since is None:  # Running starts now: the first deadline is a timeout away
        return StallCheck(obs, resync_after=float(policy.timeout_seconds))
    reports = job_reports(obs, observed, obs.known_attempt)
    finished = frozenset(reporter_name(s.rtype, s.index) for s in slots.values()
                         if s.index in obs.completed[s.rtype])
    verdict = judge_stall(policy, reports, since=since, now=obs.now, finished=finished,
                          warned=warned_at(obs.old_conditions, STALLED))
    if verdict.clause is None:
        return StallCheck(obs, resync_after=verdict.resync_after)
    stall = Stall(policy.action, verdict.clause)
    if not verdict.act:
        return StallCheck(dataclasses.replace(obs, stall=stall), resync_after=verdict.resync_after)
    if policy.action == "FailJob":
        return StallCheck(obs, fail_message=f"{subject(obs.job.key)} stalled: {stall.clause}; "
                                            f"runPolicy.stallPolicy.action is FailJob.")
    return _restart(obs, stall)


def running_since(obs: Observation) -> datetime | None:
    """When the stall clock starts: the old Running condition's transition to True, or the
    current attempt's start as its record keeps it, whichever is later; None while the old
    status does not show the job Running."""
    running = next((c for c in obs.old_conditions if c.get("type") == "Running"), None)
    if running is None or running.get("status") != "True":
        return None
    since = parse_time(running.get("lastTransitionTime"))
    if since is None:
        return None
    record = obs.attempt_records.get(obs.known_attempt)
    began = parse_time(record.data.get("time")) if record is not None else None
    return max(since, began) if began is not None else since


def _restart(obs: Observation, stall: Stall) -> StallCheck:
    """RestartJob: one more attempt, within failurePolicy.maxRestarts and backoffLimit."""
    job = obs.job
    attempt = obs.known_attempt + 1
    # A stall restart counts; the queue evictions before it do not (hooks.mxjob.observation).
    counted = attempt - obs.uncounted_attempts
    total = restart_total(obs.history, obs.pods, obs.restarts, attempt=attempt, counted_attempts=counted,
                          carried=obs.carried_restarts, written=obs.restart_total)
    max_restarts, backoff = job.run_policy.failure.max_restarts, job.run_policy.backoff_limit
    if max_restarts is not None and counted > max_restarts:
        return StallCheck(obs, fail_message=f"{subject(job.key)} stalled: {stall.clause}; it has reached "
                                            f"failurePolicy.maxRestarts ({max_restarts}).")
    if backoff is not None and total > backoff:
        return StallCheck(obs, fail_message=f"{subject(job.key)} stalled: {stall.clause}; it has reached the "
                                            f"specified backoff limit: {total} restarts, backoffLimit {backoff}.")
    return StallCheck(dataclasses.replace(obs, attempt=attempt, restart_total=total, stall=stall))


def _pending_restart(obs: Observation) -> Stall | None:
    """A stall restart decided on an earlier sync whose attempt record is not observed yet: the
    status shows the new attempt, Restarting for a stall. Going on with it answers the record
    again, so a record whose creation failed is not forgotten."""
    if obs.old_attempt <= obs.known_attempt:
        return None
    restarting = next((c for c in obs.old_conditions if c.get("type") == "Restarting"), None)
    if restarting is None or restarting.get("status") != "True" or restarting.get("reason") != STALLED:
        return None
    message: Any = restarting.get("message")
    return Stall("RestartJob", message if isinstance(message, str) else "")
