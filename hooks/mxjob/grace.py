"""The success grace: once the deciding pods succeed, the others get a moment to end on their own.

ps-lite servers and workers leave a moment after the scheduler, and one of them may still fail
(mxnet-operator#38), so the job is Succeeded only when they have ended, or the grace is over and
cleanPodPolicy stops the rest.
"""
from __future__ import annotations

from datetime import timedelta

from hooks.mxjob.observation import Observation
from hooks.mxjob.observed import PodView
from hooks.mxjob.restarts import in_job_order, is_retryable
from hooks.mxjob.spec import MXJob
from hooks.mxjob.vocabulary import WORKER
from hooks.shared.status import parse_time

# Exits by a signal (SIGINT, SIGKILL, SIGTERM): what a pod stopped at teardown shows. Within the
# success grace they are not failures.
TEARDOWN_EXIT_CODES = frozenset({130, 137, 143})
# When the deciding pods succeed, the other pods still running get this long to end on their own
# before the job is Succeeded and cleanPodPolicy stops the rest: ps-lite servers and workers leave
# a moment after the scheduler, and one of them may still fail (mxnet-operator#38).
SUCCESS_GRACE_SECONDS = 30


def success_part(job: MXJob) -> str:
    """What decided the success, as a clause."""
    rtype = job.deciding_type
    n = job.replicas[rtype].replicas
    return f"all {n} {WORKER} replicas succeeded" if rtype == WORKER else f"{rtype} 0 succeeded"


def failed_in_grace(obs: Observation) -> list[PodView]:
    """Pods other than the deciding ones that ended with a code their policy treats as a
    failure (a signal exit at teardown is none; neither is an eviction)."""
    late = []
    for pod in others(obs):
        policy = obs.job.replicas[pod.rtype].restart_policy
        code = pod.exit_code
        if pod.phase != "Failed" or code is None or code in TEARDOWN_EXIT_CODES:
            continue
        if policy == "Never" or (policy == "ExitCode" and not is_retryable(code)):
            late.append(pod)
    return late


def still_running_in_grace(obs: Observation) -> tuple[list[PodView], float | None]:
    """The other pods still running, and the seconds left of the grace (None when it is over).

    The grace counts from when the last deciding pod ended (its container's finishedAt, read
    from the pod, so a stale status cannot restart it); without that time there is none.
    """
    deciding = set(obs.job.deciding_slots())
    ends = [parse_time(p.finished_at) for p in obs.pods.values()
            if (p.rtype, p.index) in deciding and p.phase == "Succeeded"]
    known = [e for e in ends if e is not None]
    waiting = [p for p in others(obs) if p.active]
    if not known:
        return waiting, None
    left = (max(known) + timedelta(seconds=SUCCESS_GRACE_SECONDS) - obs.now).total_seconds()
    return waiting, (left if left > 0 else None)


def others(obs: Observation) -> list[PodView]:
    """The pods that do not decide the job's success, and are not on their way out, in job order."""
    deciding = set(obs.job.deciding_slots())
    return [p for p in in_job_order(obs.job, obs.pods.values())
            if (p.rtype, p.index) not in deciding and not p.terminating]
