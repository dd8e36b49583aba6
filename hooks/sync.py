"""The one pure entry point: a Metacontroller sync request for an MXJob and the time in, the answer out.

Metacontroller deletes every observed child that the answer leaves out, so this module never
answers with fewer children by accident: a request it cannot read raises InvalidRequest (the
shell answers 400 and Metacontroller changes nothing), and an invalid spec on a job that already
has children keeps those children exactly as they were last applied.
"""
from __future__ import annotations

import json
from datetime import datetime
from typing import Any, Mapping

from hooks.children import pod_for, service_for
from hooks.conditions import Conditions, rfc3339
from hooks.env import mx_config_prefix
from hooks.errors import InvalidRequest
from hooks.k8s import JSON, LAST_APPLIED, POD_KEY, SERVICE_KEY, SyncResponse
from hooks.lifecycle import decide
from hooks.observed import replica_slots, view_pods
from hooks.spec import SpecError, parse_mxjob

PARENT_API_VERSION = "kubeflow.org/v1"
PARENT_KIND = "MXJob"


def sync_mxjob(request: Mapping[str, Any], *, now: datetime) -> SyncResponse:
    """Answer one sync request: desired children, status and, when a timer is due, a resync."""
    parent, observed_pods, observed_services = _read_request(request)
    old_status = parent.get("status") or {}
    try:
        job = parse_mxjob(parent)
    except SpecError as err:
        return _invalid_spec(parent, old_status, observed_pods, observed_services, err, now)

    slots = replica_slots(job)
    plan = decide(job, old_status, view_pods(slots, observed_pods), slots, observed_services, now)
    prefix = mx_config_prefix(job) if plan.pods else ""
    children = [pod_for(job, job.replicas[slots[n][0]], slots[n][1], prefix=prefix)
                for n in plan.pods]
    children += [service_for(job, job.replicas[slots[n][0]], slots[n][1]) for n in plan.services]
    response: SyncResponse = {"status": plan.status, "children": children}
    if plan.resync_after is not None:
        # Never 0: Metacontroller reads 0 as "no resync"; a due timer should fire at once.
        response["resyncAfterSeconds"] = max(plan.resync_after, 0.001)
    return response


def _read_request(request: Any) -> tuple[JSON, Mapping[str, Any], Mapping[str, Any]]:
    if not isinstance(request, Mapping):
        raise InvalidRequest("the body must be a JSON object (a Metacontroller sync request)")
    parent = request.get("parent")
    if not isinstance(parent, Mapping):
        raise InvalidRequest("parent: required, the MXJob being synced")
    if parent.get("apiVersion") != PARENT_API_VERSION or parent.get("kind") != PARENT_KIND:
        raise InvalidRequest(f"parent: expected apiVersion {PARENT_API_VERSION} kind "
                             f"{PARENT_KIND}, got {parent.get('apiVersion')} {parent.get('kind')}")
    if not isinstance(parent.get("metadata"), Mapping) or not parent["metadata"].get("name"):
        raise InvalidRequest("parent.metadata.name: required")
    children = request.get("children")
    if not isinstance(children, Mapping):
        raise InvalidRequest("children: required, a map keyed by child kind (Pod.v1, Service.v1)")
    observed = []
    for key in (POD_KEY, SERVICE_KEY):
        # Metacontroller always sends one entry per child rule; a missing one would make us
        # believe the children do not exist.
        value = children.get(key)
        if not isinstance(value, Mapping):
            raise InvalidRequest(f"children[{key}]: required, a map of observed objects by name")
        observed.append(value)
    return parent, observed[0], observed[1]


def _invalid_spec(parent: Mapping[str, Any], old_status: Mapping[str, Any],
                  observed_pods: Mapping[str, Any], observed_services: Mapping[str, Any],
                  err: SpecError, now: datetime) -> SyncResponse:
    meta = parent["metadata"]
    message = (f"MXJob {meta.get('namespace') or 'default'}/{meta['name']} has an invalid spec: "
               + "; ".join(err.problems) + ".")
    started = bool(observed_pods or observed_services or old_status.get("startTime"))
    if started:
        # An edit must never destroy a running job: keep every child as last applied and say why.
        status = {k: v for k, v in old_status.items() if k not in ("observedGeneration", "specError")}
        status["specError"] = message
        children = [_as_last_applied(obj) for obj in (*observed_pods.values(),
                                                        *observed_services.values())]
        return {"status": status, "children": children}
    conds = Conditions(old_status.get("conditions"), now)
    conds.set("Failed", True, "MXJobFailedValidation", message)
    status = {"conditions": conds.ordered(),
              "completionTime": old_status.get("completionTime") or rfc3339(now)}
    return {"status": status, "children": []}


def _as_last_applied(obj: Mapping[str, Any]) -> JSON:
    """The object as Metacontroller last applied it, so keeping it changes nothing."""
    meta = obj.get("metadata") or {}
    text = (meta.get("annotations") or {}).get(LAST_APPLIED)
    if text:
        try:
            applied = json.loads(text)
            if isinstance(applied, dict) and applied.get("metadata", {}).get("name"):
                return applied
        except ValueError:
            pass
    # No usable record (created by an older Metacontroller?): keep the identity, which is all
    # Metacontroller needs to leave an existing child alone.
    keep_meta = {k: meta[k] for k in ("name", "namespace", "labels") if k in meta}
    return {"apiVersion": obj.get("apiVersion"), "kind": obj.get("kind"), "metadata": keep_meta,
            "spec": obj.get("spec")}
