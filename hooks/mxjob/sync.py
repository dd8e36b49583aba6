"""The one pure entry point: a Metacontroller sync request for an MXJob and the time in, the answer out.

Metacontroller deletes every observed child that the answer leaves out, so this module never
answers with fewer children by accident: a request it cannot read raises InvalidRequest (the
shell answers 400 and Metacontroller changes nothing), and an invalid spec on a job that already
has children keeps those children exactly as they were last applied.
"""
from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any, NamedTuple, TypeGuard

from hooks.mxjob.children import cluster_config_map, pod_builder, podgroup_for_job, service_builder
from hooks.mxjob.env import CLUSTER_KEY, ClusterWiring, cluster_wiring, layout_env
from hooks.mxjob.lifecycle import Memory, Plan, decide, read_outcome, recorded_status
from hooks.mxjob.names import LAYOUT_ANNOTATION, job_labels
from hooks.mxjob.observed import Slot, replica_slots, view_pods
from hooks.mxjob.spec import MXJob, SpecError, parse_mxjob
from hooks.mxjob.vocabulary import CREATED, FAILED_VALIDATION, KIND
from hooks.shared.answers import invalid_spec_message
from hooks.shared.conditions import Conditions, rfc3339
from hooks.shared.gang import Gang, new_pods_wait, podgroup_wait_message, read_gang
from hooks.shared.k8s import CONFIG_MAP_KEY, JSON, POD_KEY, SERVICE_KEY, SyncResponse
from hooks.shared.memory import (
    attempt_record_name,
    attempt_records,
    observed_record_as_desired,
    outcome_name,
    read_record,
    record_config_map,
    restart_record_name,
    restart_records,
)
from hooks.shared.request import as_last_applied, parent_key, read_children, read_parent
from hooks.shared.status import WARNINGS_FIELD, OldStatus

PARENT_API_VERSION = "kubeflow.org/v1"
PARENT_KIND = KIND
MAX_ARG_STRLEN = 131072  # Linux: 32 pages, the longest single "NAME=value" string execve accepts

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
    # The layout guard reads the DMLC_NUM_* entries of live pods (changed_since_created).
    "spec": {"containers": [{"name": str, "env": [{"name": str, "value": str}]}]},
    "status": {"phase": str, "reason": str, "message": str,
               "containerStatuses": [{"name": str, "restartCount": int,
                                      "state": {"terminated": {"exitCode": int, "finishedAt": str,
                                                               "reason": str, "message": str}},
                                      "lastState": {"terminated": {"exitCode": int, "reason": str,
                                                                   "message": str}}}]},
    "data": dict[str, str],
}


class Observed(NamedTuple):
    """The observed children of one MXJob, by child rule, each keyed by name."""

    pods: Mapping[str, Any]
    services: Mapping[str, Any]
    config_maps: Mapping[str, Any]
    podgroups: Mapping[str, Any]  # empty unless gang scheduling is on
    podgroup_key: str = ""  # the PodGroup child rule's key when gang scheduling is on

    def any(self) -> bool:
        """Whether the job has any child at all."""
        return bool(self.pods or self.services or self.config_maps or self.podgroups)

    def by_key(self) -> list[tuple[str, Mapping[str, Any]]]:
        """Each child rule's key ("<Kind>.<apiVersion>") with its observed children."""
        groups = [(POD_KEY, self.pods), (SERVICE_KEY, self.services), (CONFIG_MAP_KEY, self.config_maps)]
        if self.podgroup_key:
            groups.append((self.podgroup_key, self.podgroups))
        return groups


def sync_mxjob(request: Mapping[str, Any], *, now: datetime) -> SyncResponse:
    """Answer one sync request: desired children, status and, when a timer is due, a resync."""
    parent, gang, observed = _read_request(request)
    old_status = parent.get("status")
    try:
        job = parse_mxjob(parent, gang=gang is not None)
        wiring = cluster_wiring(job)
        slots = replica_slots(job)
        problems = size_problems(job, wiring) or changed_since_created(job, wiring, slots, observed)
        if problems:
            raise SpecError(problems)
        podgroup = podgroup_for_job(job, gang) if gang is not None else None
    except SpecError as err:
        return _invalid_spec(parent, old_status, observed, err, now)

    restarts = {pod: records for pod, records in restart_records(observed.config_maps).items() if pod in slots}
    attempts = attempt_records(observed.config_maps, job.name)
    memory = Memory(outcome=read_record(observed.config_maps.get(outcome_name(job.name))), restarts=restarts,
                    attempts=attempts)
    plan = decide(job=job, old_status=old_status, pods=view_pods(slots, observed.pods), slots=slots,
                  observed_services=observed.services, memory=memory, now=now)
    # The gang exists while the job may still get pods: a finished job's PodGroup would keep
    # holding its queue's share, and a suspended job has no pods to group.
    if job.run_policy.suspend or _finished(plan.status, now):
        podgroup = None
    pod_names = plan.pods
    if podgroup is not None and new_pods_wait(podgroup, observed.podgroups):
        pod_names = [n for n in plan.pods if n in observed.pods]
        if len(pod_names) < len(plan.pods):
            _say_pods_wait(plan.status, old_status, job, podgroup, now)
    pods = {rtype: pod_builder(job, spec, wiring, gang=gang) for rtype, spec in job.replicas.items()}
    children = [pods[slots[n].rtype](slots[n].index, plan.attempts.get(n, 0), plan.job_attempt) for n in pod_names]
    services = {rtype: service_builder(job, spec) for rtype, spec in job.replicas.items()}
    children += [services[slots[n].rtype](slots[n].index) for n in plan.services]
    if plan.needs_cluster_map:
        children.append(cluster_config_map(job, wiring))
    children += _records(job, plan, observed.config_maps,
                         [restart_record_name(pod, n) for pod, records in restarts.items() for n in records]
                         + [attempt_record_name(job.name, n) for n in attempts])
    if podgroup is not None:
        children.insert(0, podgroup)
    response: SyncResponse = {"status": plan.status, "children": children}
    if plan.resync_after is not None:
        # Never 0: Metacontroller reads 0 as "no resync"; a due timer should fire at once.
        response["resyncAfterSeconds"] = max(plan.resync_after, 0.001)
    return response


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
    outcome = observed_config_maps.get(outcome_name(job.name))
    if outcome is not None:
        records.append(observed_record_as_desired(outcome, job.namespace, labels))
    elif plan.outcome is not None:
        records.append(record_config_map(outcome_name(job.name), job.namespace, labels, plan.outcome))
    return records


def size_problems(job: MXJob, wiring: ClusterWiring) -> list[str]:
    """Limits a job's pods would hit outside our control: they could never start, so refuse them.

    The process sees MX_CONFIG with the whole cluster map expanded into it, so it grows with the
    job. Linux refuses to exec a process with one environment string over MAX_ARG_STRLEN. (The
    ConfigMap holding the map, limited to 1 MiB, and the pods, which now only refer to it, stay
    far below the API server's limits at any size this admits.)
    """
    longest = max(wiring.expanded_length(t, s.replicas - 1) for t, s in job.replicas.items())
    env_bytes = len("MX_CONFIG=") + longest + 1
    if env_bytes <= MAX_ARG_STRLEN:
        return []
    total = sum(s.replicas for s in job.replicas.values())
    fits = total * MAX_ARG_STRLEN // env_bytes
    return [f"spec.mxReplicaSpecs: {total} replicas make each pod's MX_CONFIG "
            f"{env_bytes} bytes, over Linux's limit of {MAX_ARG_STRLEN} bytes for one "
            f"environment variable, so no pod could start; use at most about {fits} "
            f"replicas (fewer with a longer job name)"]


def changed_since_created(job: MXJob, wiring: ClusterWiring, slots: Mapping[str, Slot],
                          observed: Observed) -> list[str]:
    """Catch an edit of mxReplicaSpecs or jobMode that got past admission (no CEL on the server).

    Acting on a changed layout would delete pods and Services (fewer replicas) or mix two cluster
    layouts (more), so any sign in the request that the job was started with another layout
    refuses it:
    - the observed `<job>-cluster` ConfigMap holds another cluster map than the spec gives now;
    - a live pod (not terminating) has a name outside the new layout, or carries another layout:
      its replica-layout annotation, or, on a pod from before that annotation, its
      DMLC_NUM_SERVER or DMLC_NUM_WORKER;
    - a live Service has a name outside the new layout (a Service outlives its terminating pod,
      and an MXTune pod has no DMLC_NUM_* of its own).
    The children are checked too because the ConfigMap is not always observed while pods run:
    deleted by hand, terminating, or a job created before the ConfigMap existed.
    """
    if (_config_map_differs(wiring, observed.config_maps) or _pods_differ(job, wiring, slots, observed.pods)
            or any(name not in slots for name, service in observed.services.items() if _live(service))):
        return ["spec.mxReplicaSpecs: changed after the job's pods were created (each pod "
                "has the replica layout built in); restore the previous mxReplicaSpecs "
                "and jobMode, or delete the MXJob and create it again"]
    return []


def _live(obj: Any) -> TypeGuard[Mapping[str, Any]]:
    """An observed child that is not on its way out (deleting it again would change nothing)."""
    return isinstance(obj, Mapping) and not (obj.get("metadata") or {}).get("deletionTimestamp")


def _config_map_differs(wiring: ClusterWiring, config_maps: Mapping[str, Any]) -> bool:
    observed = config_maps.get(wiring.config_map)
    if not _live(observed):
        return False
    data = observed.get("data")
    return not (isinstance(data, Mapping) and data.get(CLUSTER_KEY) == wiring.cluster)


def _pods_differ(job: MXJob, wiring: ClusterWiring, slots: Mapping[str, Slot], pods: Mapping[str, Any]) -> bool:
    counts = layout_env(job)
    for name, pod in pods.items():
        if not _live(pod):
            continue
        if name not in slots:
            return True
        layout = ((pod.get("metadata") or {}).get("annotations") or {}).get(LAYOUT_ANNOTATION)
        if layout is not None:
            if layout != wiring.layout:
                return True
            continue
        for container in (pod.get("spec") or {}).get("containers") or []:
            for entry in (container.get("env") or []) if isinstance(container, Mapping) else []:
                if (isinstance(entry, Mapping) and entry.get("name") in counts
                        and "value" in entry and entry["value"] != counts[entry["name"]]):
                    return True
    return False


def _read_request(request: Any) -> tuple[JSON, Gang | None, Observed]:
    """The parent, the gang configuration, and the observed children by rule."""
    parent = read_parent(request, api_version=PARENT_API_VERSION, kind=PARENT_KIND)
    gang = read_gang(request)
    # Every rule must be there (hooks.shared.request.read_children): without the ConfigMap rule
    # the memory records (hooks.shared.memory) would never be seen, so a failed pod would never be
    # recreated and a finished job never cleaned up.
    keys: tuple[str, ...] = (POD_KEY, SERVICE_KEY, CONFIG_MAP_KEY)
    if gang is None:
        pods, services, config_maps = read_children(request, keys, fields=OBSERVED_FIELDS)
        return parent, None, Observed(pods, services, config_maps, {})
    pods, services, config_maps, groups = read_children(request, (*keys, gang.child_key), fields=OBSERVED_FIELDS)
    return parent, gang, Observed(pods, services, config_maps, groups, gang.child_key)


def _finished(status: Mapping[str, Any], now: datetime) -> bool:
    return Conditions(status.get("conditions"), now).terminal() is not None


def _say_pods_wait(status: JSON, old_status: Any, job: MXJob, podgroup: JSON, now: datetime) -> None:
    """The Created condition says that pods wait for the PodGroup (hooks.shared.gang.new_pods_wait).

    Set against the last status, so its times move only when the message really changes and the
    status stays a fixed point while the job waits; the lifecycle sets it back once pods come.
    """
    conds = Conditions(OldStatus(old_status).conditions(), now)
    conds.set("Created", True, CREATED, podgroup_wait_message(PARENT_KIND, job.key, podgroup, "its pods"))
    created = conds.get("Created")
    status["conditions"] = [created if c.get("type") == "Created" else c for c in status["conditions"]]


def _invalid_spec(parent: Mapping[str, Any], old_status: Any, observed: Observed,
                  err: SpecError, now: datetime) -> SyncResponse:
    message = invalid_spec_message(PARENT_KIND, parent, err.problems)
    old = OldStatus(old_status)
    start_time = old.time("startTime")
    if not (observed.any() or start_time):
        conds = Conditions(old.conditions(), now)
        conds.set("Failed", True, FAILED_VALIDATION, message)
        status: JSON = {"conditions": conds.ordered(),
                        "completionTime": old.time("completionTime") or rfc3339(now)}
        return {"status": _with_warnings(status, old), "children": []}
    # An edit must never destroy a running job: keep every child as last applied and say why.
    children = [as_last_applied(key, name, obj) for key, group in observed.by_key() for name, obj in group.items()]
    outcome = read_record(observed.config_maps.get(outcome_name(parent["metadata"]["name"])))
    if outcome is not None:
        # The job has finished: its status is the record's, whatever the parent shows (a stale
        # read, an edited status), as on every sync that sees the record.
        status = recorded_status(read_outcome(outcome, old, key=parent_key(parent), now=now), old,
                                 cleaned_up_time=old.time("cleanedUpTime"))
        return {"status": {**status, "specError": message}, "children": children}
    # The status stays as it was, but for the fields the hook reads back, which are kept only in
    # the shape it writes them.
    status = {k: v for k, v in old.raw.items() if k not in ("observedGeneration", "specError", *_READ_BACK)}
    status.update({k: v for k, v in (("conditions", old.conditions()),
                                     ("startTime", start_time),
                                     ("completionTime", old.time("completionTime")),
                                     ("cleanedUpTime", old.time("cleanedUpTime")),
                                     ("restartCount", old.counter("restartCount")),
                                     ("attempt", old.counter("attempt")))
                   if v})
    status["specError"] = message
    return {"status": _with_warnings(status, old), "children": children}


def _with_warnings(status: JSON, old: OldStatus) -> JSON:
    warnings = old.warnings()
    if warnings:
        status[WARNINGS_FIELD] = warnings
    return status


_READ_BACK = ("conditions", "startTime", "completionTime", "cleanedUpTime", "restartCount", "attempt",
              WARNINGS_FIELD)
