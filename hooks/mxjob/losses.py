"""Which lost pods a Failed message names when a limit, not a pod, decided it.

A job failed by `backoffLimit`, `failurePolicy.maxRestarts` or `activeDeadlineSeconds` says which
pods were lost and how each ended, so the condition (and the outcome record that keeps it after
the pods are gone) says why. The pods this sync sees lost come first: they are the ones that
raised the count past the limit. When none is observed (a stale read: the loss was counted from
a record, its pod already gone), the records say it: the newest whole-job restart's, then each
pod's last restart record.
"""
from __future__ import annotations

from hooks.mxjob.observation import Observation
from hooks.mxjob.observed import PodView
from hooks.mxjob.restarts import MAX_NAMED, in_job_order, loss_cause, recorded_cause


def lost_now(obs: Observation) -> list[PodView]:
    """The pods this sync sees lost, in job order: failed ones (whatever their action) and those
    whose `mxnet` container was restarted in place (each such restart counts against backoffLimit)."""
    failures = obs.failures
    failed = {p.name for p in (*failures.fatal, *failures.job_losses, *failures.recreate)}
    return [p for p in in_job_order(obs.job, obs.pods.values())
            if p.name in failed or (p.phase != "Failed" and not p.terminating and p.restarts)]


def remembered(obs: Observation) -> list[str]:
    """The losses the records keep, as `pod P was lost (cause)`: the newest attempt record's pod,
    then the last restart record of each pod with one, by pod name (a fixed order)."""
    words = []
    if obs.attempt_records:
        data = obs.attempt_records[max(obs.attempt_records)].data
        lost, cause = data.get("lostPod"), data.get("cause")
        if isinstance(lost, str) and isinstance(cause, str):
            words.append(f"pod {lost} was lost ({cause})")
    for name in sorted(obs.history):
        record = obs.history[name]
        kept = obs.restarts.get(name, {}).get(record.get("recreations", 0))
        if kept is not None:
            words.append(f"pod {name} was lost ({recorded_cause(kept.data, record.get('lastExitCode'))})")
    return words


def losses(obs: Observation) -> str:
    """The lost pods a Failed message names (the first MAX_NAMED, then how many more); "" when
    neither the pods nor the records show a loss."""
    pods = lost_now(obs)
    words = [f"pod {p.name} was lost ({loss_cause(p)})" for p in pods] if pods else remembered(obs)
    more = f"; and {len(words) - MAX_NAMED} more" if len(words) > MAX_NAMED else ""
    return "; ".join(words[:MAX_NAMED]) + more
