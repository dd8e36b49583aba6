"""Progress reporting's rights, on a real API server (docs/progress.md, "RBAC").

The reporting children the hook answers for a job with runPolicy.progress are created as
Metacontroller's ServiceAccount, as after `kubectl apply -k metacontroller/`: the API server lets it
create a Role only if it holds every right that Role grants (RBAC's escalation check), so this also
checks that metacontroller/rbac.yaml grants enough. Then the job's own ServiceAccount may get and
merge-patch its progress ConfigMap, and nothing else: not another ConfigMap of the job, not a
Secret, not a delete. A Metacontroller whose role lacks `patch` on ConfigMaps cannot create the Role.
"""
from __future__ import annotations

import json
import uuid

import kubernetes
import pytest
from helpers.apiserver import create, install, user_client
from helpers.mcsim import T0, mxjob
from helpers.metacontroller_writes import METACONTROLLER
from helpers.requests import mxjob_sync_request

from hooks.mxjob.sync import sync_mxjob
from hooks.shared.progress import ACCESS_KEYS
from localcluster.controlplane.processes import ControlPlane

pytestmark = pytest.mark.apiserver


def progress_children(namespace: str) -> list[dict]:
    """The first sync's reporting children (and the cluster map) of a job that asks for progress."""
    parent = mxjob(replicas={"Worker": 2}, runPolicy={"progress": {}})
    parent["metadata"]["namespace"] = namespace
    request = mxjob_sync_request(parent)
    request["children"].update({key: {} for key in ACCESS_KEYS})
    children = sync_mxjob(request, now=T0)["children"]
    assert not [c for c in children if c["kind"] == "Pod"], "pods wait for the ServiceAccount"
    return children


@pytest.fixture
def reporting(control_plane: ControlPlane, namespace: str) -> str:
    """The reporting children, made by Metacontroller's ServiceAccount; the job's account's user name."""
    install(control_plane)
    for child in progress_children(namespace):
        verdict = create(control_plane, child, namespace, user=METACONTROLLER)
        assert verdict.accepted, f"{child['kind']} {child['metadata']['name']}: {verdict.message}"
    return f"system:serviceaccount:{namespace}:mx-progress"


def test_the_jobs_account_gets_and_merge_patches_its_progress_config_map(control_plane, namespace, reporting):
    config_maps = user_client(control_plane, reporting).resources.get(api_version="v1", kind="ConfigMap")
    assert config_maps.get(name="mx-progress", namespace=namespace).metadata.name == "mx-progress"
    entry = json.dumps({"attempt": 0, "step": 3, "total": 10, "time": "2026-11-21T10:00:00Z"})
    patched = config_maps.patch(name="mx-progress", namespace=namespace, body={"data": {"worker-0": entry}},
                                content_type="application/merge-patch+json")
    assert patched.data["worker-0"] == entry


@pytest.mark.parametrize(("verb", "what"), [
    ("patch", "the job's cluster map"), ("get", "a Secret"), ("list", "ConfigMaps"), ("delete", "its ConfigMap"),
    ("update", "its ConfigMap"),
])
def test_the_jobs_account_may_do_nothing_else(control_plane, namespace, reporting, verb, what):
    client = user_client(control_plane, reporting)
    config_maps = client.resources.get(api_version="v1", kind="ConfigMap")
    calls = {
        "the job's cluster map": lambda: config_maps.patch(name="mx-cluster", namespace=namespace, body={"data": {}},
                                                           content_type="application/merge-patch+json"),
        "a Secret": lambda: client.resources.get(api_version="v1", kind="Secret").get(name="x", namespace=namespace),
        "ConfigMaps": lambda: config_maps.get(namespace=namespace),
        "its ConfigMap": (lambda: config_maps.delete(name="mx-progress", namespace=namespace)) if verb == "delete"
        else (lambda: config_maps.replace(body={"apiVersion": "v1", "kind": "ConfigMap",
                                                "metadata": {"name": "mx-progress"}}, namespace=namespace)),
    }
    with pytest.raises(kubernetes.dynamic.exceptions.ForbiddenError):
        calls[what]()


def test_a_metacontroller_without_patch_on_config_maps_cannot_create_the_role(control_plane, namespace):
    """RBAC's escalation check: the creator of a Role must hold what it grants."""
    install(control_plane)
    narrowed = f"narrowed-{uuid.uuid4().hex[:6]}"
    control_plane.kubectl("create", "role", narrowed, "--verb=create,get", "--resource=roles,configmaps", "-n", namespace)
    control_plane.kubectl("create", "rolebinding", narrowed, f"--role={narrowed}", f"--user={narrowed}", "-n", namespace)
    [role] = [c for c in progress_children(namespace) if c["kind"] == "Role"]
    verdict = create(control_plane, role, namespace, user=narrowed)
    assert (verdict.accepted, verdict.status) == (False, 403)
    assert "permissions not currently held" in verdict.message and "Verbs:[\"patch\"]" in verdict.message
