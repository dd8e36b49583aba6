"""The one pure entry point: a Metacontroller sync request for an MXJob and the time in, the answer out.

Metacontroller deletes every observed child that the answer leaves out, so this module never
answers with fewer children by accident: a request it cannot read raises InvalidRequest (the
shell answers 400 and Metacontroller changes nothing), and an invalid spec on a job that already
has children keeps those children exactly as they were last applied.
"""
from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from hooks.mxjob.children import (
    cluster_config_map,
    pod_builder,
    podgroup_for_job,
    run_started,
    services_by_slot,
    services_for,
)
from hooks.mxjob.env import cluster_wiring
from hooks.mxjob.layout import check_layout
from hooks.mxjob.lifecycle import NO_GANG, GangView, Plan, decide
from hooks.mxjob.names import job_labels, pod_group_name
from hooks.mxjob.observation import Memory
from hooks.mxjob.observed import Observed, PodView, replica_slots, view_pods
from hooks.mxjob.outcome import read_outcome, recorded_status
from hooks.mxjob.spec import MXJob, SpecError, parse_mxjob, queue_name
from hooks.mxjob.vocabulary import FAILED_VALIDATION, KIND, STATE_ORDER, subject
from hooks.shared.answers import invalid_spec_message, keep_children, kept_status, refuse_new
from hooks.shared.conditions import rfc3339
from hooks.shared.errors import InvalidRequest
from hooks.shared.gang import Gang, new_pods_wait, podgroup_wait_message, read_gang
from hooks.shared.k8s import CONFIG_MAP_KEY, JSON, POD_KEY, SERVICE_KEY, SyncResponse
from hooks.shared.kueue import (
    KUEUE_ATTEMPTS_RELATED,
    kueue_setting,
    read_related_workloads,
    workload_rule,
)
from hooks.shared.memory import (
    attempt_record_name,
    attempt_records,
    observed_record_as_desired,
    outcome_child,
    outcome_name,
    read_record,
    record_config_map,
    restart_record_name,
    restart_records,
    suspended_since,
    suspension_child,
)
from hooks.shared.progress import (
    ACCESS_KEYS,
    observed_reports,
    progress_children,
    progress_name,
    reporter_name,
    reports_from,
    uses_own_account,
    wire_pod,
)
from hooks.shared.request import parent_key, read_children, read_parent
from hooks.shared.status import WARNINGS_FIELD, OldStatus

PARENT_API_VERSION = "kubeflow.org/v1"
PARENT_KIND = KIND

# Every field of an observed child (Pod, Service or ConfigMap) this core reads, as a tree: a leaf
# is the type Kubernetes gives the value (True: any value), a dict an object of those fields, a
# one-element list an array of such objects. The shell may hand over observed children with only
# these fields (a large request is mostly pod specs nobody reads here), and refuses children whose
# fields have other types; the core checks the same fields (hooks.shared.request.read_children),
# so a request is refused alike in and out of the shell. tests/server/test_wire.py checks every answer is
# the same either way, so a new read of an observed child must be added here.
OBSERVED_FIELDS: Mapping[str, Any] = {
    "apiVersion": str,
    "kind": str,
    "metadata": {"name": str, "namespace": str, "uid": str, "labels": dict[str, str],
                 "annotations": dict[str, str], "deletionTimestamp": str},
    # The layout guard reads the DMLC_NUM_* entries of live pods (hooks.mxjob.layout); the policy
    # says whether a termination message may be a log tail (hooks.shared.termination).
    # Kueue's admission gate says Kueue holds a pod back (hooks.shared.kueue).
    "spec": {"containers": [{"name": str, "env": [{"name": str, "value": str}], "terminationMessagePolicy": str}],
             "schedulingGates": [{"name": str}]},
    # A pod's DisruptionTarget or (Kueue's) TerminationTarget condition says why it ended (preemption,
    # eviction: hooks.shared.termination).
    "status": {"phase": str, "reason": str, "message": str,
               "conditions": [{"type": str, "status": str, "reason": str, "message": str}],
               "containerStatuses": [{"name": str, "restartCount": int,
                                      "state": {"running": {"startedAt": str},
                                                "terminated": {"exitCode": int, "finishedAt": str,
                                                               "reason": str, "message": str}},
                                      "lastState": {"terminated": {"exitCode": int, "reason": str,
                                                                   "message": str}}}]},
    "data": dict[str, str],
}


# The setting, its reading and the attempts related: hooks.shared.kueue (a ChainerJob's pods form groups too).


def customize_mxjob(request: Mapping[str, Any], *, kueue_pod_groups: str = "false") -> JSON:
    """The customize hook's answer: for a queued job whose pods form Kueue pod groups, the Workloads of
    its groups (named after them, hooks.mxjob.names.pod_group_name), from the attempt its status
    shows on; nothing else, so a cluster without Kueue's CRDs is never asked for Workloads.
    It depends on the parent alone, as Metacontroller requires."""
    parent = read_parent(request, api_version=PARENT_API_VERSION, kind=PARENT_KIND)
    meta = parent["metadata"]
    if not kueue_setting(kueue_pod_groups) or not queue_name(meta):
        return {"relatedResources": []}
    status = parent.get("status")
    attempt = status.get("attempt") if isinstance(status, Mapping) else None
    first = attempt if isinstance(attempt, int) and not isinstance(attempt, bool) and attempt >= 0 else 0
    names = [pod_group_name(str(meta["name"]), str(meta.get("uid", "")), n)
             for n in range(first, first + KUEUE_ATTEMPTS_RELATED)]
    return {"relatedResources": [workload_rule(names)]}


def sync_mxjob(request: Mapping[str, Any], *, now: datetime, kueue_pod_groups: str = "false") -> SyncResponse:
    """Answer one sync request: desired children, status and, when a timer is due, a resync.

    `kueue_pod_groups` (the hooks server's MXJOB_KUEUE_POD_GROUPS, "true" or "false"): whether a queued job's
    pods form Kueue plain-pod groups (Kueue v0.11 and later) rather than Kueue queueing the job itself (v0.5-v0.10).
    """
    pod_groups = kueue_setting(kueue_pod_groups)
    parent, gang, observed = _read_request(request)
    old_status = parent.get("status")
    try:
        job = parse_mxjob(parent, gang=gang is not None, kueue_pod_groups=pod_groups)
        wiring = cluster_wiring(job)
        slots = replica_slots(job)
        check_layout(job, wiring, slots, observed)
        podgroup = podgroup_for_job(job, gang) if gang is not None else None
    except SpecError as err:
        return _invalid_spec(parent, old_status, observed, err, now)

    progress = job.run_policy.progress
    if progress.enabled:
        _require_access_rules(observed)
    restarts = {pod: records for pod, records in restart_records(observed.config_maps).items() if pod in slots}
    attempts = attempt_records(observed.config_maps, job.name)
    memory = Memory(outcome=read_record(observed.config_maps.get(outcome_name(job.name))), restarts=restarts,
                    attempts=attempts, run_started=run_started(observed.services),
                    suspended_since=suspended_since(observed.config_maps, job.name),
                    progress=observed_reports(observed.config_maps.get(progress_name(job.name))) if progress.enabled
                    else {})
    gang_view = NO_GANG  # new pods wait until their PodGroup is observed (hooks.shared.gang.new_pods_wait)
    if podgroup is not None and new_pods_wait(podgroup, observed.podgroups):
        gang_view = GangView(podgroup_wait_message(PARENT_KIND, job.key, podgroup, "its pods"))
    elif progress.enabled and _waits_for_account(job, observed):
        # The API server refuses a pod whose ServiceAccount does not exist yet, and Metacontroller
        # creates ServiceAccounts after Pods (DESIGN of the write order: docs/progress.md).
        gang_view = GangView(f"{subject(job.key)} is created; its pods wait for their ServiceAccount "
                             f"{progress_name(job.name)}.")
    # A queued job's Kueue Workloads (its customize hook relates them) say why Kueue holds its pods back.
    workloads = read_related_workloads(request) if pod_groups and job.queue else {}
    views = view_pods(slots, observed.pods, workloads)
    plan = decide(job=job, old_status=old_status, pods=views, slots=slots,
                  observed_services=services_by_slot(job, slots, observed.services), memory=memory, now=now,
                  gang=gang_view, workloads=workloads)
    size = attempt_group_size(plan, views) if pod_groups and job.queue else None
    pods = {rtype: pod_builder(job, spec, wiring, gang=gang, kueue_pod_groups=pod_groups, group_size=size)
            for rtype, spec in job.replicas.items()}
    children = [pods[slots[n].rtype](slots[n].index, plan.attempts.get(n, 0), plan.job_attempt) for n in plan.pods]
    if progress.enabled:
        children = [wire_pod(pod, job.name, job.namespace,
                             reporter_name(slots[n].rtype, slots[n].index)
                             if reports_from(progress, slots[n].index) else None)
                    for n, pod in zip(plan.pods, children, strict=True)]
        if not plan.cleaned_up:
            children += progress_children(job.name, job.namespace, job_labels(job.name))
    started = plan.status.get("startTime")
    children += services_for(job, slots, plan.services, started=started if isinstance(started, str) else None)
    if plan.needs_cluster_map:
        children.append(cluster_config_map(job, wiring))
    children += _records(job, plan, observed.config_maps,
                         [restart_record_name(pod, n) for pod, records in restarts.items() for n in records]
                         + [attempt_record_name(job.name, n) for n in attempts])
    if podgroup is not None and plan.podgroup:
        children.insert(0, podgroup)
    response: SyncResponse = {"status": plan.status, "children": children}
    if plan.resync_after is not None:
        # Never 0: Metacontroller reads 0 as "no resync"; a due timer should fire at once.
        response["resyncAfterSeconds"] = max(plan.resync_after, 0.001)
    return response


def attempt_group_size(plan: Plan, views: Mapping[str, PodView]) -> int:
    """How many pods the job attempt's Kueue group has: every pod the plan keeps or creates but the
    succeeded pods of earlier attempts, which stay in their own groups (an index that succeeded is not
    run again). Kueue admits a group only once that many pods of it exist, and refuses one whose pods
    disagree: pods are never updated (OnDelete), so each is created with its attempt's number."""
    return sum(1 for name in plan.pods if (view := views.get(name)) is None or view.job_attempt >= plan.job_attempt)


def _records(job: MXJob, plan: Plan, observed_config_maps: Mapping[str, Any],
             observed_restart_records: list[str]) -> list[JSON]:
    """The job's memory in children (hooks.shared.memory): observed records answered back as they
    are, new ones created. Restart records go at the TTL, with every child but the outcome."""
    labels = job_labels(job.name)
    records: list[JSON] = []
    if not plan.cleaned_up:
        records += [observed_record_as_desired(observed_config_maps[name], job.namespace, labels)
                    for name in sorted(observed_restart_records)]
        records += [record_config_map(name, job.namespace, labels, data)
                    for name, data in sorted(plan.restart_records.items()) if name not in observed_config_maps]
    if plan.suspension is not None:
        records.append(suspension_child(observed_config_maps, job.name, job.namespace, labels, plan.suspension))
    outcome = outcome_child(observed_config_maps, job.name, job.namespace, labels, plan.outcome)
    return records if outcome is None else [*records, outcome]


def _read_request(request: Any) -> tuple[JSON, Gang | None, Observed]:
    """The parent, the gang configuration, and the observed children by rule."""
    parent = read_parent(request, api_version=PARENT_API_VERSION, kind=PARENT_KIND)
    gang = read_gang(request)
    # Every rule must be there (hooks.shared.request.read_children): without the ConfigMap rule
    # the memory records (hooks.shared.memory) would never be seen, so a failed pod would never be
    # recreated and a finished job never cleaned up.
    keys: tuple[str, ...] = (POD_KEY, SERVICE_KEY, CONFIG_MAP_KEY)
    access = _read_access(request)
    if gang is None:
        pods, services, config_maps = read_children(request, keys, fields=OBSERVED_FIELDS)
        return parent, None, Observed(pods, services, config_maps, {}, access=access)
    pods, services, config_maps, groups = read_children(request, (*keys, gang.child_key), fields=OBSERVED_FIELDS)
    return parent, gang, Observed(pods, services, config_maps, groups, gang.child_key, access=access)


def _read_access(request: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    """The ServiceAccount, Role and RoleBinding rules' children, for the rules the request has.

    Unlike the other rules these may be missing (a CompositeController installed before progress
    reporting): such a controller has no children of these kinds to lose, and only a job that
    asks for reporting needs them (_require_access_rules).
    """
    children = request.get("children")
    keys = tuple(key for key in ACCESS_KEYS if isinstance(children, Mapping) and key in children)
    return dict(zip(keys, read_children(request, keys, fields=OBSERVED_FIELDS), strict=True))


def _require_access_rules(observed: Observed) -> None:
    missing = [key for key in ACCESS_KEYS if key not in observed.access]
    if missing:
        raise InvalidRequest(f"children[{missing[0]}]: required for runPolicy.progress and stallPolicy: the "
                             f"CompositeController has no child rule for {', '.join(missing)}; re-apply "
                             f"metacontroller/ (kubectl apply -k) to install the shipped child rules")


def _waits_for_account(job: MXJob, observed: Observed) -> bool:
    """Whether new pods must wait for the job's ServiceAccount: some type uses it, and it is not observed."""
    uses = any(not uses_own_account(spec.template.get("spec") or {}) for spec in job.replicas.values())
    return uses and progress_name(job.name) not in observed.access.get(ACCESS_KEYS[0], {})


def _invalid_spec(parent: Mapping[str, Any], old_status: Any, observed: Observed,
                  err: SpecError, now: datetime) -> SyncResponse:
    message = invalid_spec_message(PARENT_KIND, parent, err.problems)
    old = OldStatus(old_status, condition_types=STATE_ORDER)
    start_time = old.time("startTime")
    if not (observed.any() or start_time):
        status = refuse_new(old.conditions(), message, now, reason=FAILED_VALIDATION, state_order=STATE_ORDER)
        status["completionTime"] = old.time("completionTime") or rfc3339(now)
        return {"status": _with_warnings(status, old), "children": []}
    kept = [(key, name, obj) for key, group in observed.by_key() for name, obj in group.items()]
    outcome = read_record(observed.config_maps.get(outcome_name(parent["metadata"]["name"])))
    if outcome is not None:
        # The job has finished: its status is the record's, whatever the parent shows (a stale
        # read, an edited status), as on every sync that sees the record.
        status = recorded_status(read_outcome(outcome, old, key=parent_key(parent), now=now), old,
                                 cleaned_up_time=old.time("cleanedUpTime"))
        return keep_children(status, kept, message)
    read_back = {k: v for k, v in (("conditions", old.conditions()),
                                   ("startTime", start_time),
                                   ("completionTime", old.time("completionTime")),
                                   ("cleanedUpTime", old.time("cleanedUpTime")),
                                   ("restartCount", old.counter("restartCount")),
                                   ("attempt", old.counter("attempt")))
                 if v}
    answer = keep_children(kept_status(old, read_back, read_back_fields=_READ_BACK), kept, message)
    _with_warnings(answer["status"], old)
    return answer


def _with_warnings(status: JSON, old: OldStatus) -> JSON:
    warnings = old.warnings()
    if warnings:
        status[WARNINGS_FIELD] = warnings
    return status


_READ_BACK = ("conditions", "startTime", "completionTime", "cleanedUpTime", "restartCount", "attempt")
