"""The one pure entry point: a Metacontroller sync request for an MXJob and the time in, the answer out.

Metacontroller deletes every observed child that the answer leaves out, so this module never
answers with fewer children by accident: a request it cannot read raises InvalidRequest (the
shell answers 400 and Metacontroller changes nothing), and an invalid spec on a job that already
has children keeps those children exactly as they were last applied.
"""
from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from hooks.mxjob.children import pod_for, service_for
from hooks.mxjob.env import mx_config, mx_config_prefix
from hooks.mxjob.lifecycle import decide
from hooks.mxjob.observed import replica_slots, view_pods
from hooks.mxjob.spec import MAIN_CONTAINER, MXJob, SpecError, parse_mxjob
from hooks.shared.conditions import Conditions, rfc3339
from hooks.shared.k8s import JSON, POD_KEY, SERVICE_KEY, SyncResponse
from hooks.shared.request import as_last_applied, read_children, read_parent
from hooks.shared.status import WARNINGS_FIELD, OldStatus

PARENT_API_VERSION = "kubeflow.org/v1"
PARENT_KIND = "MXJob"
MAX_ARG_STRLEN = 131072  # Linux: 32 pages, the longest single "NAME=value" string execve accepts
MAX_ANNOTATIONS_BYTES = 262144  # the API server's limit on all annotations of one object


def sync_mxjob(request: Mapping[str, Any], *, now: datetime) -> SyncResponse:
    """Answer one sync request: desired children, status and, when a timer is due, a resync."""
    parent, observed_pods, observed_services = _read_request(request)
    old_status = parent.get("status")
    try:
        job = parse_mxjob(parent)
        prefix = mx_config_prefix(job)
        problems = size_problems(job, prefix) or changed_since_created(prefix, observed_pods)
        if problems:
            raise SpecError(problems)
    except SpecError as err:
        return _invalid_spec(parent, old_status, observed_pods, observed_services, err, now)

    slots = replica_slots(job)
    plan = decide(job, old_status, view_pods(slots, observed_pods), slots, observed_services, now)
    children = [pod_for(job, job.replicas[slots[n][0]], slots[n][1], prefix=prefix)
                for n in plan.pods]
    children += [service_for(job, job.replicas[slots[n][0]], slots[n][1]) for n in plan.services]
    response: SyncResponse = {"status": plan.status, "children": children}
    if plan.resync_after is not None:
        # Never 0: Metacontroller reads 0 as "no resync"; a due timer should fire at once.
        response["resyncAfterSeconds"] = max(plan.resync_after, 0.001)
    return response


def size_problems(job: MXJob, prefix: str) -> list[str]:
    """Limits a job's pods would hit outside our control: they could never start, so refuse them.

    MX_CONFIG lists every replica in every pod, so it grows with the job. Linux refuses to exec a
    process with one environment string over MAX_ARG_STRLEN, and the API server refuses a pod
    whose annotations (Metacontroller's last-applied copy of the pod) pass 256 KiB.
    """
    problems = []
    longest = max(len(mx_config(prefix, t, s.replicas - 1)) for t, s in job.replicas.items())
    env_bytes = len("MX_CONFIG=") + longest + 1
    total = sum(s.replicas for s in job.replicas.values())
    if env_bytes > MAX_ARG_STRLEN:
        fits = total * MAX_ARG_STRLEN // env_bytes
        problems.append(f"spec.mxReplicaSpecs: {total} replicas make each pod's MX_CONFIG "
                        f"{env_bytes} bytes, over Linux's limit of {MAX_ARG_STRLEN} bytes for one "
                        f"environment variable, so no pod could start; use at most about {fits} "
                        f"replicas (fewer with a longer job name)")
        return problems
    for rtype, spec in job.replicas.items():
        pod = pod_for(job, spec, spec.replicas - 1, prefix=prefix)
        size = len(json.dumps(pod, separators=(",", ":")))
        size += sum(len(k) + len(v) for k, v in (pod["metadata"].get("annotations") or {}).items())
        if size > MAX_ANNOTATIONS_BYTES:
            problems.append(f"spec.mxReplicaSpecs.{rtype}.template: each {rtype} pod would be "
                            f"{size} bytes with its MX_CONFIG in every container, over the API "
                            f"server's {MAX_ANNOTATIONS_BYTES}-byte limit for the copy "
                            f"Metacontroller keeps in an annotation; use fewer replicas or fewer "
                            f"containers")
    return problems


def changed_since_created(prefix: str, observed_pods: Mapping[str, Any]) -> list[str]:
    """Catch an edit of mxReplicaSpecs or jobMode that got past admission (no CEL on the server).

    Every pod's MX_CONFIG starts with the same job-wide part, so one live pod tells whether the
    replica layout is still the one the pods were built for. Acting on a changed layout would
    delete pods (fewer replicas) or mix two cluster layouts (more).
    """
    for pod in observed_pods.values():
        if not isinstance(pod, Mapping) or (pod.get("metadata") or {}).get("deletionTimestamp"):
            continue
        for container in (pod.get("spec") or {}).get("containers") or []:
            if container.get("name") != MAIN_CONTAINER:
                continue
            value = next((e.get("value") for e in container.get("env") or []
                          if e.get("name") == "MX_CONFIG"), None)
            if isinstance(value, str) and not value.startswith(prefix):
                return ["spec.mxReplicaSpecs: changed after the job's pods were created (each pod "
                        "has the replica layout built in); restore the previous mxReplicaSpecs "
                        "and jobMode, or delete the MXJob and create it again"]
            return []
    return []


def _read_request(request: Any) -> tuple[JSON, Mapping[str, Any], Mapping[str, Any]]:
    parent = read_parent(request, api_version=PARENT_API_VERSION, kind=PARENT_KIND)
    pods, services = read_children(request, (POD_KEY, SERVICE_KEY))
    return parent, pods, services


def _invalid_spec(parent: Mapping[str, Any], old_status: Any,
                  observed_pods: Mapping[str, Any], observed_services: Mapping[str, Any],
                  err: SpecError, now: datetime) -> SyncResponse:
    meta = parent["metadata"]
    message = (f"MXJob {meta.get('namespace') or 'default'}/{meta['name']} has an invalid spec: "
               + "; ".join(err.problems) + ".")
    old = OldStatus(old_status)
    start_time = old.time("startTime")
    if observed_pods or observed_services or start_time:
        # An edit must never destroy a running job: keep every child as last applied and say why.
        # The status stays as it was, but for the fields the hook reads back, which are kept only
        # in the shape it writes them.
        status = {k: v for k, v in old.raw.items()
                  if k not in ("observedGeneration", "specError", *_READ_BACK)}
        status.update({k: v for k, v in (("conditions", old.conditions()),
                                         ("startTime", start_time),
                                         ("completionTime", old.time("completionTime")),
                                         ("cleanedUpTime", old.time("cleanedUpTime")),
                                         ("restartCount", old.counter("restartCount")))
                       if v})
        status["specError"] = message
        children = [as_last_applied(key, name, obj)
                    for key, observed in ((POD_KEY, observed_pods), (SERVICE_KEY, observed_services))
                    for name, obj in observed.items()]
    else:
        conds = Conditions(old.conditions(), now)
        conds.set("Failed", True, "MXJobFailedValidation", message)
        status = {"conditions": conds.ordered(),
                  "completionTime": old.time("completionTime") or rfc3339(now)}
        children = []
    warnings = old.warnings()
    if warnings:
        status[WARNINGS_FIELD] = warnings
    return {"status": status, "children": children}


_READ_BACK = ("conditions", "startTime", "completionTime", "cleanedUpTime", "restartCount",
              WARNINGS_FIELD)
