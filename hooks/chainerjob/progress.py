"""Progress reporting and stalls of a ChainerJob (spec.runPolicy; docs/progress.md, docs/chainerjob.md).

The rules are hooks.shared.progress's, the same as an MXJob's; what is the ChainerJob's own is here:
- Who reports. ChainerMN trains in MPI ranks, which the master's mpiexec starts in the worker pods
  (through `kubectl exec`, so a rank has its worker pod's env and token) and in its own pod; a pod
  can hold several ranks, and the master's pod gets a new name on every retry. So a reporter is an
  MPI rank, named `rank-<N>` by the helper from the rank MPI gives it: rank 0 under FirstReplica
  (the default; ChainerMN's reporting extensions run there too), every rank under AllReplicas.
  Every pod gets the env (MXJOB_PROGRESS_MPI_RANKS says which ranks) and the right to report.
- The stall clock starts when the job is Running (its master Job is active), or when the current
  attempt's restart was decided (its record: a stale parent cannot move the clock back before it).
  Reports count only for the current attempt (MXJOB_ATTEMPT in the pods, hooks.chainerjob.restarts).
- FailJob ends the job Failed (reason ChainerJobStalled): the master Job is deleted (and with it
  mpiexec, whose ranks end with it) and the workers are scaled to 0, as after a failed master. The
  master Job is left out only once the outcome record is observed: a sync that reads a stale parent
  and stale ConfigMaps after the Job is gone would otherwise create the master again.
- RestartJob restarts the whole job (hooks.chainerjob.restarts), at most runPolicy.maxRestarts
  times; the stall after the last one fails the job, as FailJob does.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any, NamedTuple

from hooks.chainerjob import names
from hooks.chainerjob.spec import ChainerJob
from hooks.chainerjob.vocabulary import FAILED, STALLED, subject
from hooks.shared.conditions import rfc3339
from hooks.shared.k8s import JSON
from hooks.shared.progress import (
    MPI_RANKS_ENV,
    Report,
    current_reports,
    judge_stall,
    observed_reports,
    progress_children,
    progress_name,
    status_reports,
    uses_own_account,
    warned_at,
    wire_pod_spec,
)
from hooks.shared.status import parse_time


def wire(job: ChainerJob, pod_spec: JSON, *, master: bool) -> None:
    """Point a freshly built pod spec at the progress ConfigMap, when the job asks for progress.

    The distributed master keeps its launcher ServiceAccount (kubectl exec needs it), which the
    progress RoleBinding names too; every other pod gets the job's progress ServiceAccount unless
    its template names its own.
    """
    if not job.progress.enabled:
        return
    ranks = "all" if job.progress.reporters == "AllReplicas" else "0"
    wire_pod_spec(pod_spec, job.name, job.namespace, [(MPI_RANKS_ENV, ranks)],
                  account=not (master and job.distributed))


def reporting_children(job: ChainerJob) -> list[JSON]:
    """The progress ConfigMap, ServiceAccount, Role and RoleBinding (also binding the launcher's)."""
    launcher = [names.service_account(job.name)] if job.distributed else []
    return progress_children(job.name, job.namespace, names.common_labels(job.name), also_bound=launcher)


def waits_for_account(job: ChainerJob, accounts: Mapping[str, Any]) -> bool:
    """Whether new pods would use the progress ServiceAccount before it is observed: the API
    server refuses a pod whose ServiceAccount does not exist yet."""
    if not job.progress.enabled or progress_name(job.name) in accounts:
        return False
    specs = [ws.template.get("spec") or {} for ws in job.worker_sets.values()]
    if not job.distributed:
        specs.append(job.master.template.get("spec") or {})
    return any(not uses_own_account(spec) for spec in specs)


def job_reports(job: ChainerJob, config_maps: Mapping[str, Any], old_progress: Any, attempt: int) -> dict[str, Report]:
    """The reports of one attempt, newest of the observed ConfigMap's and the old status's (hooks.shared.progress)."""
    return current_reports(observed_reports(config_maps.get(progress_name(job.name))),
                           status_reports(old_progress), attempt=attempt)


class StallCheck(NamedTuple):
    """What one sync of a running job found: the stall to say, the Failed condition under FailJob
    (or RestartJob past runPolicy.maxRestarts), the stall a RestartJob restarts the job for."""

    clause: str | None = None  # the Running condition says the job may have stalled
    failed: JSON | None = None  # FailJob acts: the job's Failed condition
    resync_after: float | None = None
    restart: str | None = None  # RestartJob acts: the stall, for the attempt's record and condition


def check_stall(job: ChainerJob, reports: Mapping[str, Report], old_conditions: Iterable[Any], *,
                now: datetime, attempt: int = 0, began: datetime | None = None) -> StallCheck:
    """For a job whose master Job is active: has it stalled, and does its stallPolicy act now.
    `attempt` is the current one, `began` when its restart was decided (its record's time)."""
    policy = job.progress.stall
    if policy is None:
        return StallCheck()
    conditions = list(old_conditions)
    running = next((c for c in conditions if isinstance(c, Mapping) and c.get("type") == "Running"), None)
    since = parse_time(running.get("lastTransitionTime")) if running and running.get("status") == "True" else None
    if since is None:  # Running starts now: the first deadline is a timeout away
        return StallCheck(resync_after=float(policy.timeout_seconds))
    if began is not None:
        since = max(since, began)
    verdict = judge_stall(policy, reports, since=since, now=now, warned=warned_at(conditions, STALLED))
    if not verdict.act or verdict.clause is None:
        return StallCheck(verdict.clause, resync_after=verdict.resync_after)
    if policy.action == "RestartJob" and attempt < job.max_restarts:
        return StallCheck(restart=verdict.clause)
    why = ("runPolicy.stallPolicy.action is FailJob" if policy.action == "FailJob"
           else f"it has reached runPolicy.maxRestarts ({job.max_restarts})")
    at = rfc3339(now)
    return StallCheck(failed={"type": "Failed", "status": "True", "reason": STALLED,
                              "message": f"{subject(job.key)} stalled: {verdict.clause}; {why}, so its master "
                                         f"Job is deleted and its workers scaled to 0.",
                              "lastProbeTime": at, "lastTransitionTime": at})


# The reasons of a Failed condition the hook writes itself when it ends a job whose master Job still
# runs: a stall (FailJob, or RestartJob past maxRestarts), a pod lost past maxRestarts (hooks.chainerjob.sync).
STOPPED_BY_HOOK = (STALLED, FAILED)


def stopped_by_hook(status: Mapping[str, Any] | None) -> bool:
    """Whether a status (or an outcome record) says the hook failed the job itself (STOPPED_BY_HOOK)."""
    listed = (status or {}).get("conditions")
    return isinstance(listed, list) and any(
        isinstance(c, Mapping) and c.get("type") == "Failed" and c.get("status") == "True"
        and c.get("reason") in STOPPED_BY_HOOK for c in listed)


def failed_by_hook(master_status: Mapping[str, Any], failed: JSON) -> JSON:
    """The master's part of the status once the hook fails the job (FailJob acts, or a pod is lost
    past maxRestarts): its conditions and the Failed one; no longer active (its pod is deleted with it)."""
    return {**{k: v for k, v in master_status.items() if k != "active"},
            "conditions": [*master_status["conditions"], failed]}
