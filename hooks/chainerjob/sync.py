"""The ChainerJob's pure entry point: a Metacontroller sync request, the time and the kubectl image in, the answer out.

Metacontroller deletes every observed child an answer leaves out, so: a request that cannot be
read raises InvalidRequest (the shell answers 400, nothing changes); an invalid edit of a job
that has children keeps them all as last applied and reports the problem; the master Job, once
it exists, is always kept, and once it has finished it is never created again.
"""
from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from hooks.chainerjob import children, names
from hooks.chainerjob.related import read_related_pods
from hooks.chainerjob.spec import ChainerJob, SpecError, parse_chainerjob
from hooks.chainerjob.status import (
    STATE_ORDER,
    failed_validation,
    finished,
    finished_while_invalid,
    master_record,
    status_for,
    validation_failed_status,
)
from hooks.chainerjob.vocabulary import KIND, PARENT_API_VERSION
from hooks.shared.answers import invalid_spec_message, keep_children
from hooks.shared.gang import Gang, new_pods_wait, podgroup_wait_message, read_gang
from hooks.shared.k8s import JSON, SERVICE_KEY, SyncResponse
from hooks.shared.memory import observed_record_as_desired, outcome_name, read_record, record_config_map
from hooks.shared.request import parent_key, read_children, read_parent
from hooks.shared.status import WARNINGS_FIELD, OldStatus, is_counter

PARENT_KIND = KIND

SERVICE_ACCOUNT_KEY = "ServiceAccount.v1"
ROLE_KEY = "Role.rbac.authorization.k8s.io/v1"
ROLE_BINDING_KEY = "RoleBinding.rbac.authorization.k8s.io/v1"
CONFIG_MAP_KEY = "ConfigMap.v1"
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
                    kubectl_image: str = children.KUBECTL_IMAGE) -> SyncResponse:
    """Answer one sync request: the desired children and the status."""
    parent = read_parent(request, api_version=PARENT_API_VERSION, kind=PARENT_KIND)
    gang = read_gang(request)
    keys = CHILD_KEYS + ((gang.child_key,) if gang is not None else ())
    observed = dict(zip(keys, read_children(request, keys, fields=OBSERVED_FIELDS), strict=True))
    # The master Job's pods, from the customize hook's related objects (hooks.chainerjob.related).
    master_pods = read_related_pods(request)
    old = OldStatus(parent.get("status"), condition_types=STATE_ORDER)
    answer = _answer(parent, gang, observed, read_back(old), master_pods, now=now, kubectl_image=kubectl_image)
    warnings = old.warnings()
    if warnings:
        answer["status"][WARNINGS_FIELD] = warnings
    return answer


def read_back(old: OldStatus) -> JSON:
    """The fields of the last status the hook reads, each only in the shape it writes them."""
    status: JSON = {"conditions": old.conditions()}
    for key in ("startTime", "completionTime"):
        if (moment := old.time(key)) is not None:
            status[key] = moment
    for key in ("active", "succeeded", "failed"):
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


def _answer(parent: JSON, gang: Gang | None, observed: dict[str, Mapping[str, Any]], old_status: JSON,
            master_pods: Mapping[str, Any], *, now: datetime, kubectl_image: str) -> SyncResponse:
    """The answer from the parsed parts of a request and the status read back."""
    try:
        job = parse_chainerjob(parent)
        podgroup = children.podgroup_for_job(job, gang) if gang is not None else None
    except SpecError as err:
        message = invalid_spec_message(PARENT_KIND, parent, err.problems)
        kept = [(key, name, obj) for key, objs in observed.items() for name, obj in objs.items()]
        if kept or any(isinstance(c, Mapping) and c.get("type") == "Created" for c in old_status.get("conditions") or []):
            return _keep_children(parent, observed, old_status, kept, message, master_pods, now)
        return {"status": validation_failed_status(old_status, message, now), "children": []}
    if failed_validation(old_status):
        # Failed is terminal: a job refused at creation stays refused; create it again instead.
        return {"status": {k: v for k, v in old_status.items() if k != "observedGeneration"}, "children": []}

    master_job = observed[JOB_KEY].get(names.master(job.name))
    # The outcome is remembered in a child too (hooks.shared.memory): a master Job deleted after
    # the end must not be created again because a stale read shows the status of before the end.
    observed_outcome = observed[CONFIG_MAP_KEY].get(outcome_name(job.name))
    recorded = read_record(observed_outcome)
    record = master_record(master_job, old_status, recorded=recorded.data if recorded is not None else None,
                           job_name=job.name, master_pods=master_pods, main_container=job.master.main_container)
    done = finished(record) is not None
    statefulsets = observed[STATEFULSET_KEY]
    ready = {name: _ready_replicas(statefulsets.get(names.worker_set(job.name, name))) for name in job.worker_sets}
    workers_ready = all(ready[name] >= ws.replicas for name, ws in job.worker_sets.items())
    if done:
        podgroup = None  # only while the job runs: a finished job's PodGroup would keep its queue's share
    # Under a gang, what makes pods (the master Job, the StatefulSets) is created only once the
    # PodGroup exists (hooks.shared.gang.new_pods_wait); what exists is kept.
    gated = new_pods_wait(podgroup, observed[gang.child_key] if gang is not None else {})
    # Once it exists the master is kept (OnDelete, so never changed); it is first created only
    # when every worker can be reached, and never again after the job has finished.
    # Under a gang the master is created at once: waiting for ready workers would deadlock (the
    # gang waits for the master's pod); its rsh agent waits for each worker instead.
    master_wanted = master_job is not None or (not done and not gated and (workers_ready or gang is not None))
    wanted = desired_children(job, done=done, with_master=master_wanted, kubectl_image=kubectl_image, gang=gang,
                              observed_statefulsets=statefulsets)
    withheld = gated and not done and (master_job is None or any(
        c["kind"] == "StatefulSet" and c["metadata"]["name"] not in statefulsets for c in wanted))
    if gated:
        wanted = [c for c in wanted if c["kind"] != "StatefulSet" or c["metadata"]["name"] in statefulsets]
    if podgroup is not None:
        wanted.insert(0, podgroup)
    if observed_outcome is not None:
        wanted.append(observed_record_as_desired(observed_outcome, job.namespace, names.common_labels(job.name)))
    elif done:
        wanted.append(record_config_map(outcome_name(job.name), job.namespace, names.common_labels(job.name), record))
    waiting = podgroup_wait_message(PARENT_KIND, job.key, podgroup, "its master Job and worker StatefulSets") \
        if withheld and podgroup is not None else None
    status = status_for(job, old_status, record, ready, master_wanted, now, gang=gang is not None,
                        podgroup_wait=waiting)
    return {"status": status, "children": wanted}


def _keep_children(parent: JSON, observed: dict[str, Mapping[str, Any]], old_status: JSON,
                   kept: list[tuple[str, str, Mapping[str, Any]]], message: str, master_pods: Mapping[str, Any],
                   now: datetime) -> SyncResponse:
    """An invalid edit: every child kept as last applied, but a master that finishes meanwhile still
    ends the job (outcome recorded, workers scaled to 0, PodGroup gone), so no worker holds its
    node, and its GPUs, until someone repairs the spec."""
    answer = keep_children(old_status, kept, message)
    name = parent["metadata"]["name"]
    # As on a valid sync, a master deleted after the end is read from the outcome record, which a
    # stale status cannot undo.
    recorded = read_record(observed[CONFIG_MAP_KEY].get(outcome_name(name)))
    # The spec cannot be read, so neither can the master's container name (None: the pods tell).
    record = master_record(observed[JOB_KEY].get(names.master(name)), old_status,
                           recorded=recorded.data if recorded is not None else None,
                           job_name=name, master_pods=master_pods, main_container=None)
    outcome = finished(record)
    if outcome is None:
        return answer
    answer["status"] = {**finished_while_invalid(parent_key(parent), old_status, record, outcome, now),
                        "specError": message}
    wanted = []
    for obj in answer["children"]:
        if obj["kind"] == "PodGroup":
            continue
        if obj["kind"] == "StatefulSet" and isinstance(obj.get("spec"), Mapping):
            obj = {**obj, "spec": {**obj["spec"], "replicas": 0}}
        wanted.append(obj)
    answer["children"] = wanted
    return answer


def desired_children(job: ChainerJob, *, done: bool, with_master: bool, kubectl_image: str,
                     gang: Gang | None = None, observed_statefulsets: Mapping[str, Any] | None = None) -> list[JSON]:
    """Every child, in a fixed order: launcher RBAC and assets, then per worker set, then the master."""
    wanted: list[JSON] = []
    if job.distributed:
        wanted += [children.service_account_for(job), children.role_for(job), children.role_binding_for(job),
                   children.assets_for(job, gang=gang)]
        wanted += [children.service_for(job, ws) for ws in job.worker_sets.values()]
        observed = observed_statefulsets or {}
        wanted += [children.statefulset_for(job, ws, done=done, gang=gang,
                                            observed=observed.get(names.worker_set(job.name, ws.name)))
                   for ws in job.worker_sets.values()]
    if with_master:
        wanted.append(children.master_job_for(job, kubectl_image=kubectl_image, gang=gang))
    return wanted


def _ready_replicas(statefulset: Mapping[str, Any] | None) -> int:
    if statefulset is None:
        return 0
    ready = (statefulset.get("status") or {}).get("readyReplicas") or 0
    return ready if isinstance(ready, int) else 0
