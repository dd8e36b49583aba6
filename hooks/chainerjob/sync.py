"""The ChainerJob's pure entry point: a Metacontroller sync request, the time and the kubectl image in, the answer out.

Metacontroller deletes every observed child an answer leaves out, so: a request that cannot be
read raises InvalidRequest (the shell answers 400, nothing changes); an invalid edit of a job
that has children keeps them all as last applied and reports the problem; the master Job, once
it exists, is always kept, and once it has finished it is never created again.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from datetime import datetime
from typing import Any, NamedTuple

from hooks.chainerjob import children, names, progress, restarts
from hooks.chainerjob.decision import Decision, decide, ready_workers
from hooks.chainerjob.names import CREATED_ANNOTATION, MASTER_STARTED_ANNOTATION, RESUMED_ANNOTATION
from hooks.chainerjob.related import (
    group_evicted,
    held_by_kueue,
    lost_pods,
    not_scheduled,
    queue_evicted,
    read_related_pods,
)
from hooks.chainerjob.spec import ChainerJob, SpecError, parse_chainerjob
from hooks.chainerjob.status import (
    KeptTimes,
    failed_validation,
    finished,
    finished_while_invalid,
    master_record,
    status_for,
    suspended_status,
)
from hooks.chainerjob.vocabulary import FAILED_VALIDATION, KIND, PARENT_API_VERSION, STATE_ORDER
from hooks.shared.answers import invalid_spec_message, keep_children, kept_status, refuse_new
from hooks.shared.conditions import rfc3339
from hooks.shared.gang import Gang, read_gang
from hooks.shared.k8s import CONFIG_MAP_KEY, JSON, SERVICE_KEY, SyncResponse
from hooks.shared.kueue import kueue_setting, read_related_workloads
from hooks.shared.memory import outcome_child, outcome_name, read_record, stamp, stamped_time
from hooks.shared.progress import progress_name, progress_status
from hooks.shared.request import parent_key, read_children, read_parent
from hooks.shared.status import WARNINGS_FIELD, OldStatus, is_counter, parse_time

PARENT_KIND = KIND

SERVICE_ACCOUNT_KEY = "ServiceAccount.v1"
ROLE_KEY = "Role.rbac.authorization.k8s.io/v1"
ROLE_BINDING_KEY = "RoleBinding.rbac.authorization.k8s.io/v1"
STATEFULSET_KEY = "StatefulSet.apps/v1"
JOB_KEY = "Job.batch/v1"
# What the core reads of observed children (the shell decodes only these, and a child whose
# fields have another type is a malformed request): identity and the last-applied record, a Job's
# outcome, a StatefulSet's readiness and update strategy, whether a PodGroup is being deleted.
# Status values are copied into ours, so types matter.
OBSERVED_FIELDS: Mapping[str, Any] = {
    "apiVersion": str,
    "kind": str,
    "metadata": {"name": str, "namespace": str, "uid": str, "labels": dict[str, str],
                 "annotations": dict[str, str], "deletionTimestamp": str},
    # A StatefulSet's update strategy: one created before OnDelete keeps its type (children.statefulset_for).
    "spec": {"updateStrategy": {"type": str}},
    "status": {"conditions": [{"type": str, "status": str, "reason": str, "message": str,
                               "lastProbeTime": str, "lastTransitionTime": str}],
               "startTime": str, "completionTime": str, "active": int, "succeeded": int, "failed": int,
               "readyReplicas": int},
    "data": dict[str, str],  # of the outcome record (hooks.shared.memory)
}
# One per child rule of the chainerjob-controller CompositeController, in its order.
CHILD_KEYS = (SERVICE_ACCOUNT_KEY, ROLE_KEY, ROLE_BINDING_KEY, CONFIG_MAP_KEY, SERVICE_KEY, STATEFULSET_KEY,
              JOB_KEY)


def sync_chainerjob(request: Mapping[str, Any], *, now: datetime,
                    kubectl_image: str = children.KUBECTL_IMAGE, kueue_pod_groups: str = "false") -> SyncResponse:
    """Answer one sync request: the desired children and the status.

    `kueue_pod_groups` (the hooks server's MXJOB_KUEUE_POD_GROUPS, "true" or "false"): whether the pods
    of a job labelled for a Kueue LocalQueue form one Kueue plain-pod group per attempt (Kueue v0.11
    and later, its pod integration on; docs/ecosystem.md, "Kueue")."""
    pod_groups = kueue_setting(kueue_pod_groups)
    parent = read_parent(request, api_version=PARENT_API_VERSION, kind=PARENT_KIND)
    gang = read_gang(request)
    keys = CHILD_KEYS + ((gang.child_key,) if gang is not None else ())
    observed = dict(zip(keys, read_children(request, keys, fields=OBSERVED_FIELDS), strict=True))
    # The job's pods (the master Job's and the workers'), from the customize hook's related objects
    # (hooks.chainerjob.related): what a failed master pod showed, and why a pod waits to be scheduled.
    job_pods = read_related_pods(request)
    # A queued job's Kueue Workloads (its customize hook relates them) say why Kueue holds its pods back.
    workloads = read_related_workloads(request) if pod_groups else {}
    old = OldStatus(parent.get("status"), condition_types=STATE_ORDER)
    answer = _answer(parent, gang, observed, old, job_pods, now=now, kubectl_image=kubectl_image,
                     kueue=Kueue(pod_groups, workloads))
    warnings = old.warnings()
    if warnings:
        answer["status"][WARNINGS_FIELD] = warnings
    return answer


# The status fields read_back reads: on an invalid edit every other field is kept as it was.
READ_BACK_FIELDS = ("conditions", "startTime", "completionTime", "active", "succeeded", "failed", "workerSets",
                    "attempt")


def read_back(old: OldStatus) -> JSON:
    """The fields of the last status the hook reads, each only in the shape it writes them."""
    status: JSON = {"conditions": old.conditions()}
    for key in ("startTime", "completionTime"):
        if (moment := old.time(key)) is not None:
            status[key] = moment
    for key in ("active", "succeeded", "failed", "attempt"):
        if (count := old.counter(key)) is not None:
            status[key] = count
    # Only kept through an invalid edit (a valid sync recomputes it), so keep it as it was written.
    sets = old.object("workerSets")
    if sets and all(isinstance(v, Mapping) and set(v) <= {"replicas", "readyReplicas"}
                    and all(is_counter(n) for n in v.values()) for v in sets.values()):
        status["workerSets"] = {name: dict(v) for name, v in sets.items()}
    elif sets:
        old.warn("status.workerSets", "is not a map of {replicas, readyReplicas} counters")
    return status


class Kueue(NamedTuple):
    """What Kueue means for this sync: whether queued jobs form pod groups, and the related Workloads."""

    pod_groups: bool = False
    workloads: Mapping[str, Any] = {}


NO_KUEUE = Kueue()


def _answer(parent: JSON, gang: Gang | None, observed: dict[str, Mapping[str, Any]], old: OldStatus,
            job_pods: Mapping[str, Any], *, now: datetime, kubectl_image: str, kueue: Kueue = NO_KUEUE) -> SyncResponse:
    """The answer from the parsed parts of a request and the last status: decide, build, status."""
    old_status = read_back(old)
    try:
        job = parse_chainerjob(parent)
        podgroup = children.podgroup_for_job(job, gang) if gang is not None else None
    except SpecError as err:
        return _invalid_spec(parent, observed, old, old_status, err, job_pods, now)
    if failed_validation(old_status):
        # Failed is terminal: a job refused at creation stays refused; create it again instead.
        return {"status": {k: v for k, v in old_status.items() if k != "observedGeneration"}, "children": []}

    # Whole-job restarts (hooks.chainerjob.restarts): only the current attempt's master Job and
    # StatefulSets count; an earlier attempt's are left out, so deleted.
    attempts = restarts.read_attempts(job.name, observed[CONFIG_MAP_KEY], observed[JOB_KEY],
                                      observed[STATEFULSET_KEY], old)
    current = {**observed, JOB_KEY: restarts.current(observed[JOB_KEY], attempts.known),
               STATEFULSET_KEY: restarts.current(observed[STATEFULSET_KEY], attempts.known)}
    master_job = current[JOB_KEY].get(names.master(job.name))
    # The outcome is remembered in a child too (hooks.shared.memory): a master Job deleted after
    # the end must not be created again because a stale read shows the status of before the end.
    master_status = _master_status(master_job, observed, job.name, old_status, job_pods, job.master.main_container)
    evicted, master_status = _stopped_by_kueue(job, job_pods, kueue, attempts.known, master_job, master_status,
                                               recorded=outcome_name(job.name) in observed[CONFIG_MAP_KEY])
    reports = progress.job_reports(job, observed[CONFIG_MAP_KEY], old.raw.get("progress"),
                                   attempts.pending or attempts.known) \
        if job.progress.enabled else {}
    stall, loss = progress.StallCheck(), restarts.AfterLoss()
    # Suspended (spec.runPolicy.suspend) until the master Job has finished: a finished job stays finished.
    suspended = job.suspend and finished(master_status) is None
    running = finished(master_status) is None and not suspended and not (attempts.pending or attempts.leaving)
    if running and master_status.get("active"):
        stall = progress.check_stall(job, reports, old_status["conditions"], now=now, attempt=attempts.counted,
                                     began=attempts.began())
    if running and stall.restart is None and stall.failed is None and master_job is not None \
            and not master_status.get("succeeded"):
        # A pod taken away (preempted, evicted) once the master Job of its attempt exists: its
        # mpiexec never admits a worker replaced under the same name, and a master pod retried alone
        # would count against the Job's backoffLimit (docs/chainerjob.md, "Disruptions"). Kueue
        # stopping the pod group is the same move, uncounted (docs/ecosystem.md, "ChainerJob through Kueue").
        loss = restarts.after_loss(job.key, lost_pods(job.name, job_pods, attempts.known), attempt=attempts.counted,
                                   max_restarts=job.max_restarts, now=now, evicted=evicted)
    failed = stall.failed or loss.failed  # FailJob, or a RestartJob (for a stall, a loss) past maxRestarts
    if failed is not None:
        master_status = progress.failed_by_hook(master_status, failed)
    # A suspension ends the attempt that has launched: the next one starts on resume (hooks.chainerjob.restarts).
    suspend_now = (suspended and not attempts.pending
                   and restarts.launched(attempts, observed[JOB_KEY], observed[STATEFULSET_KEY]))
    decided = (restarts.Cause(suspended=True) if suspend_now
               else restarts.Cause(stalled=stall.restart) if stall.restart is not None else loss.restart)
    restart = restarts.restart_of(attempts, decided=decided, job_name=job.name, namespace=job.namespace,
                                  labels=names.common_labels(job.name), now=now)
    if decided is not None and not decided.suspended:  # the restart's reports start afresh
        reports = progress.job_reports(job, observed[CONFIG_MAP_KEY], old.raw.get("progress"), restart.attempt) \
            if restart is not None else reports
    ready = ready_workers(job, current[STATEFULSET_KEY])
    account = progress_name(job.name) if progress.waits_for_account(job, observed[SERVICE_ACCOUNT_KEY]) else None
    # A master Job the hook stopped (a stall, a loss past maxRestarts) is deleted, once the outcome record
    # that says so is observed (before, a stale parent with stale ConfigMaps could create it again), and never again.
    stopped = progress.stopped_by_hook(master_status) and outcome_name(job.name) in observed[CONFIG_MAP_KEY]
    restarting = restart is not None and (restart.new_record is not None or attempts.leaving)
    decision = decide(job, outcome=finished(master_status),
                      master_observed=master_job is not None and not stopped,
                      ready=ready, statefulsets=current[STATEFULSET_KEY], podgroup=podgroup,
                      observed_podgroups=observed[gang.child_key] if gang is not None else {}, account=account,
                      restarting=restarting, suspended=suspended, queued=kueue.pod_groups and bool(job.queue))
    times = _kept_times(observed, master_job, old_status, now,
                        resumed_from=current if restart is not None and restart.suspended and not suspended else None)
    wanted = desired_children(job, decision, podgroup=podgroup, observed=current, master_status=master_status,
                              kubectl_image=kubectl_image, gang=gang, attempt=attempts.known, times=times)
    wanted += restarts.kept_records(observed[CONFIG_MAP_KEY], job.name, job.namespace, names.common_labels(job.name))
    if restart is not None and restart.new_record is not None:
        wanted.append(restart.new_record)
    if suspended:
        status = suspended_status(job, old_status, now, times=times, restart=restart)
    elif restarting:
        # The status says where the new attempt is, from the sync that decides the restart on: what
        # attempt 0 still shows while it goes would change it on the sync that sees the record.
        status = status_for(job, old_status, {"conditions": []}, dict.fromkeys(ready, 0),
                            dataclasses.replace(decision, master=False), now, times=times, restart=restart,
                            restarting=True)
    else:
        workers = names.worker_pods(job.name, {n: ws.replicas for n, ws in job.worker_sets.items()})
        unplaced = not_scheduled(job.name, workers, job_pods, attempts.known, kueue.workloads)
        status = status_for(job, old_status, master_status, ready, decision, now, times=times, stall=stall.clause,
                            restart=restart, unplaced=unplaced,
                            admitting=decision.queued and held_by_kueue(job.name, job_pods, attempts.known))
    if (shown := progress_status(reports)) is not None:
        status["progress"] = shown
    answer: SyncResponse = {"status": status, "children": wanted}
    if stall.resync_after is not None:
        # Never 0: Metacontroller reads 0 as "no resync"; a due deadline should fire at once.
        answer["resyncAfterSeconds"] = max(stall.resync_after, 0.001)
    return answer


def _kept_times(observed: Mapping[str, Mapping[str, Any]], master_job: Mapping[str, Any] | None, old_status: JSON,
                now: datetime, *, resumed_from: Mapping[str, Mapping[str, Any]] | None = None) -> KeptTimes:
    """The times the children keep (hooks.shared.memory.stamped_time), so that a sync reading the
    status of one write earlier stamps a change as the sync that made it did.

    When the job was created: as its children keep it, else as the status says (children made
    before the children kept it), else now (its first sync). When its master Job was first
    answered: as that Job keeps it; now if it is not observed (this sync may create it); unknown
    for a master made before the Job kept it (its condition is already in the status)."""
    created = stamped_time((child for group in observed.values() for child in group.values()), CREATED_ANNOTATION)
    if created is None:
        said = next((c for c in old_status["conditions"] if c.get("type") == "Created"), None)
        created = parse_time(said.get("lastTransitionTime")) if said is not None else None
    master_started = now if master_job is None else stamped_time([master_job], MASTER_STARTED_ANNOTATION)
    # A resumed attempt (`resumed_from`: its master Job and StatefulSets): when it was resumed, as they
    # keep it, else now (this sync creates them); no child survives the suspension to keep it otherwise.
    resumed = None
    if resumed_from is not None:
        launched = [*resumed_from[JOB_KEY].values(), *resumed_from[STATEFULSET_KEY].values()]
        resumed = stamped_time(launched, RESUMED_ANNOTATION) or now
    return KeptTimes(created=created or now, master_started=master_started, resumed=resumed)


def _stopped_by_kueue(job: ChainerJob, job_pods: Mapping[str, Any], kueue: Kueue, attempt: int,
                      master_job: Mapping[str, Any] | None, master_status: JSON, *,
                      recorded: bool) -> tuple[dict[str, str] | None, JSON]:
    """Kueue's words when it stopped the attempt's pod group, seen on the pods or, once they are gone, on
    the group's Workload (docs/ecosystem.md, "ChainerJob through Kueue"), None before the master Job
    exists; and the master's status as the job reads it then. A master Job that failed on the pod Kueue
    stopped (spec.master.backoffLimit 0) is no failure of the job: the queue took its pod, and the job
    restarts as for any eviction. An outcome already recorded (`recorded`) stays as it is."""
    if master_job is None:
        return None, master_status
    evicted = (queue_evicted(job.name, job_pods, attempt)
               or group_evicted(job.name, job.uid, kueue.workloads, attempt, master_job))
    if evicted is not None and not recorded and finished(master_status) == "Failed":
        return evicted, {"conditions": []}
    return evicted, master_status


def _master_status(master_job: Mapping[str, Any] | None, observed: dict[str, Mapping[str, Any]], name: str,
                   old_status: JSON, job_pods: Mapping[str, Any], main_container: str | None) -> JSON:
    """The master Job's part of the status: the observed Job's, else the outcome record's, else the
    old status's (hooks.chainerjob.status.master_record)."""
    recorded = read_record(observed[CONFIG_MAP_KEY].get(outcome_name(name)))
    return master_record(master_job, old_status, recorded=recorded.data if recorded is not None else None,
                         job_name=name, master_pods=job_pods, main_container=main_container)


def _invalid_spec(parent: JSON, observed: dict[str, Mapping[str, Any]], old: OldStatus, old_status: JSON,
                  err: SpecError, job_pods: Mapping[str, Any], now: datetime) -> SyncResponse:
    """A spec the hook cannot act on (hooks.shared.answers): a new job is refused, an edit keeps
    every child; `old_status` is what the hook reads back of `old`."""
    message = invalid_spec_message(PARENT_KIND, parent, err.problems)
    kept = [(key, name, obj) for key, objs in observed.items() for name, obj in objs.items()]
    if not (kept or any(isinstance(c, Mapping) and c.get("type") == "Created"
                        for c in old_status.get("conditions") or [])):
        return {"status": refuse_new(old_status.get("conditions") or [], message, now, reason=FAILED_VALIDATION,
                                     state_order=STATE_ORDER), "children": []}
    name = parent["metadata"]["name"]
    # As on a valid sync, a master deleted after the end is read from the outcome record, which a
    # stale status cannot undo.
    # The spec cannot be read, so neither can the master's container name (None: the pods tell).
    master_status = _master_status(observed[JOB_KEY].get(names.master(name)), observed, name, old_status,
                                   job_pods, None)
    outcome = finished(master_status)
    if outcome is None:
        return keep_children(kept_status(old, old_status, read_back_fields=READ_BACK_FIELDS), kept, message)
    # A master that finishes meanwhile still ends the job (outcome recorded, workers scaled to 0,
    # PodGroup gone), so no worker holds its node, and its GPUs, until someone repairs the spec.
    # The kind's own child rules: the gang rule's PodGroup is left out, so it goes.
    ending = [(key, child, obj) for key, child, obj in kept if key in CHILD_KEYS]
    answer = keep_children(finished_while_invalid(parent_key(parent), old_status, master_status, outcome, now),
                           ending, message)
    answer["children"] = [_scaled_to_zero(obj) if key == STATEFULSET_KEY else obj
                          for (key, _, _), obj in zip(ending, answer["children"], strict=True)]
    return answer


def _scaled_to_zero(statefulset: JSON) -> JSON:
    spec = statefulset.get("spec")
    return {**statefulset, "spec": {**spec, "replicas": 0}} if isinstance(spec, Mapping) else statefulset


def desired_children(job: ChainerJob, decision: Decision, *, podgroup: JSON | None,
                     observed: Mapping[str, Mapping[str, Any]], master_status: Mapping[str, Any],
                     kubectl_image: str, gang: Gang | None = None, attempt: int = 0,
                     times: KeptTimes | None = None) -> list[JSON]:
    """Exactly the children the decision names, in a fixed order: the PodGroup, progress reporting's,
    launcher RBAC and assets, then per worker set, then the master, then the outcome record.
    `observed` holds only the current attempt's master Job and StatefulSets (hooks.chainerjob.restarts);
    `times` are stamped on them (the records are written once and never changed)."""
    wanted: list[JSON] = [podgroup] if decision.podgroup and podgroup is not None else []
    if job.progress.enabled:
        wanted += progress.reporting_children(job)
    if job.distributed:
        wanted += [children.service_account_for(job), children.role_for(job), children.role_binding_for(job),
                   children.assets_for(job, gang=gang, queued=decision.queued)]
        wanted += [children.service_for(job, ws) for ws in job.worker_sets.values()]
        statefulsets = observed[STATEFULSET_KEY]
        wanted += [children.statefulset_for(job, ws, done=decision.done, gang=gang,
                                            observed=statefulsets.get(names.worker_set(job.name, ws.name)),
                                            attempt=attempt, queued=decision.queued)
                   for ws in job.worker_sets.values() if ws.name not in decision.held_back]
    if decision.master:
        master = children.master_job_for(job, kubectl_image=kubectl_image, gang=gang, attempt=attempt,
                                         queued=decision.queued)
        if times is not None and times.master_started is not None:
            stamp([master], MASTER_STARTED_ANNOTATION, rfc3339(times.master_started))
        wanted.append(master)
    if times is not None:
        stamp(wanted, CREATED_ANNOTATION, rfc3339(times.created))
        if times.resumed is not None:
            launched = [c for c in wanted if c["kind"] in ("Job", "StatefulSet")]
            stamp(launched, RESUMED_ANNOTATION, rfc3339(times.resumed))
    outcome = outcome_child(observed[CONFIG_MAP_KEY], job.name, job.namespace, names.common_labels(job.name),
                            master_status if decision.done else None)
    if outcome is not None:
        wanted.append(outcome)
    return wanted
