"""Upgrade from 0.2.0, as the README's "Upgrade from 0.2.0" says, on a real API server of its own.

Release 0.2.0's install (tests/install/releases/0.2.0/install.yaml, rendered from its commit) is applied
to a fresh control plane; a running MXJob as 0.2.0 left it (its golden request: the job, the status
0.2.0's hook wrote, every child as Metacontroller created it, owned by the job) and a ChainerJob are
created; then this checkout's `metacontroller/` is applied over it. What a user keeps is checked: the
jobs (uid, spec, status), every child, the CRDs' stored versions; and what the new install brings:
`failurePolicy` (refused as an unknown field before, accepted after), a 0.3.0 status written over the
old job. Each running job of 0.2.0 (an MXJob and a ChainerJob), synced by this checkout's hook, keeps every
child: an upgrade deletes no running pod.
"""
from __future__ import annotations

import copy
import json
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from helpers import yamlio
from helpers.apiserver import fixture_crds

from hooks.chainerjob.sync import sync_chainerjob
from hooks.mxjob.sync import sync_mxjob
from localcluster.controlplane.processes import ControlPlane, ControlPlaneError

ROOT = Path(__file__).resolve().parents[2]
RELEASE = Path(__file__).resolve().parent / "releases" / "0.2.0"
CRDS = ("crd/mxjobs.kubeflow.org", "crd/chainerjobs.kubeflow.org")
CHILD_KINDS = {"Pod.v1": "pod", "Service.v1": "service", "ConfigMap.v1": "configmap"}
FAILURE_POLICY = {"maxRestarts": 2, "rules": [{"action": "FailJob", "onExitCodes": [1]}]}


SYNC = {"MXJob": lambda request, now: sync_mxjob(request, now=now), "ChainerJob": lambda request, now: sync_chainerjob(request, now=now)}


def running_job_request(kind: str = "MXJob") -> dict[str, Any]:
    """0.2.0's sync request of a running job, its parent carrying the status 0.2.0's hook answered:
    what a cluster running 0.2.0 holds for that job."""
    request = yamlio.load((RELEASE / f"running-{kind.lower()}-request.yaml").read_text())
    answer = yamlio.load((RELEASE / f"running-{kind.lower()}-response.yaml").read_text())
    request["parent"]["status"] = {**answer["status"], "observedGeneration": 1}
    return request


def sync_at(request: dict[str, Any], seconds_later: float) -> dict[str, Any]:
    now = datetime.fromisoformat(request["now"]) + timedelta(seconds=seconds_later)
    return dict(SYNC[request["parent"]["kind"]](request, now))


@pytest.mark.parametrize("kind", ["MXJob", "ChainerJob"])
def test_a_running_0_2_0_job_keeps_every_child_under_the_new_hook(kind):
    request = running_job_request(kind)
    answer = sync_at(request, 10)
    desired = {(c["kind"], c["metadata"]["name"]) for c in answer["children"]}
    observed = {(key.split(".")[0], name) for key, children in request["children"].items() for name in children}
    assert observed and observed <= desired  # Metacontroller deletes an observed child the answer leaves out
    assert answer["status"]["conditions"][-1]["type"] == "Running"
    assert answer["status"].get("restartCount", 0) == 0


# --- on a real API server ---------------------------------------------------------------------------------


def kubectl_json(plane: ControlPlane, *args: str, input: str | None = None) -> dict[str, Any]:
    return json.loads(plane.kubectl(*args, "-o", "json", input=input).stdout)


def job_manifest(obj: dict[str, Any], namespace: str) -> dict[str, Any]:
    """A stored object as one writes it again: identity and server fields dropped, the namespace ours."""
    manifest = copy.deepcopy(obj)
    metadata = manifest["metadata"]
    for field in ("uid", "resourceVersion", "generation", "creationTimestamp"):
        metadata.pop(field, None)
    metadata["namespace"] = namespace
    manifest.pop("status", None)
    return manifest


def owned_by(child: dict[str, Any], job: dict[str, Any], namespace: str) -> dict[str, Any]:
    """A child of the golden request as Metacontroller created it: owned by the stored job."""
    manifest = job_manifest(child, namespace)
    manifest["metadata"]["ownerReferences"] = [{
        "apiVersion": job["apiVersion"], "kind": job["kind"], "name": job["metadata"]["name"],
        "uid": job["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}]
    return manifest


def new_job(name: str) -> dict[str, Any]:
    job = job_manifest(running_job_request()["parent"], "unused")
    job["metadata"] = {"name": name}
    job["spec"]["runPolicy"] = {"failurePolicy": FAILURE_POLICY}
    return job


@pytest.fixture(scope="module")
def upgrade() -> Iterator[dict[str, Any]]:
    """A control plane with 0.2.0 installed and its jobs, then the new install applied: what each step saw."""
    plane = ControlPlane()
    try:
        plane.start()
    except ControlPlaneError as exc:
        pytest.fail(f"the control plane did not start: {exc}", pytrace=False)
    try:
        yield run_upgrade(plane)
    finally:
        plane.stop()


def run_upgrade(plane: ControlPlane) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    plane.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": fixture_crds()}))
    plane.kubectl("apply", "-f", str(RELEASE / "install.yaml"))
    plane.kubectl("wait", "--for=condition=Established", "--timeout=60s", *CRDS)
    namespace = f"t-{uuid.uuid4().hex[:10]}"
    plane.kubectl("create", "namespace", namespace)
    plane.kubectl("wait", "--for=create", "serviceaccount/default", "-n", namespace, "--timeout=30s")
    seen["namespace"] = namespace

    request = running_job_request()
    job = kubectl_json(plane, "create", "-f", "-", input=json.dumps(job_manifest(request["parent"], namespace)))
    job["status"] = request["parent"]["status"]
    plane.kubectl("replace", "--subresource=status", "-f", "-", input=json.dumps(job))
    for children in request["children"].values():
        for child in children.values():
            plane.kubectl("create", "-f", "-", input=json.dumps(owned_by(child, job, namespace)))
    chainer = yamlio.load((ROOT / "examples" / "chainerjob" / "chainerjob-mn.yaml").read_text())
    plane.kubectl("create", "-n", namespace, "-f", "-", input=json.dumps(chainer))
    seen["refused before"] = plane.kubectl("create", "-n", namespace, "--validate=strict", "-f", "-",
                                           input=json.dumps(new_job("with-failure-policy")), check=False)
    seen["before"] = snapshot(plane, namespace, request)
    seen["applied"] = plane.kubectl("apply", "-k", str(ROOT / "metacontroller"))
    plane.kubectl("wait", "--for=condition=Established", "--timeout=60s", *CRDS)
    seen["after"] = snapshot(plane, namespace, request)
    seen["created after"] = plane.kubectl("create", "-n", namespace, "--validate=strict", "-o", "json", "-f", "-",
                                          input=json.dumps(new_job("with-failure-policy")), check=False)
    # The new hook's first status over the old job, written as Metacontroller writes it.
    stored = kubectl_json(plane, "get", "mxjob", job["metadata"]["name"], "-n", namespace)
    stored["status"] = {**sync_at(request, 10)["status"], "observedGeneration": 1}
    seen["status written"] = plane.kubectl("replace", "--subresource=status", "-o", "json", "-f", "-",
                                           input=json.dumps(stored), check=False)
    seen["label written"] = plane.kubectl("label", "mxjob", job["metadata"]["name"], "-n", namespace, "team=ml", check=False)
    seen["plane"] = plane
    return seen


def snapshot(plane: ControlPlane, namespace: str, request: dict[str, Any]) -> dict[str, Any]:
    """The jobs, every child of the MXJob (uid by kind and name) and the CRDs' stored versions."""
    mxjob = kubectl_json(plane, "get", "mxjob", request["parent"]["metadata"]["name"], "-n", namespace)
    chainerjob = kubectl_json(plane, "get", "chainerjobs", "-n", namespace)["items"]
    children = {(key, name): kubectl_json(plane, "get", CHILD_KINDS[key], name, "-n", namespace)["metadata"]["uid"]
                for key, named in request["children"].items() for name in named}
    crds = {crd: kubectl_json(plane, "get", crd)["status"]["storedVersions"] for crd in CRDS}
    return {"mxjob": mxjob, "chainerjobs": chainerjob, "children": children, "storedVersions": crds}



@pytest.mark.apiserver
def test_the_new_install_applies_over_0_2_0_without_a_warning(upgrade):
    applied = upgrade["applied"]
    assert applied.returncode == 0 and applied.stderr == ""
    lines = set(applied.stdout.splitlines())
    for changed in ("customresourcedefinition.apiextensions.k8s.io/mxjobs.kubeflow.org configured",
                    "compositecontroller.metacontroller.k8s.io/chainerjob-controller configured",
                    "deployment.apps/mxjob-hooks configured"):
        assert changed in lines
    assert any(line.startswith("clusterrole.rbac.authorization.k8s.io/") and line.endswith(" created") for line in lines)


@pytest.mark.apiserver
def test_the_jobs_and_their_children_are_kept_as_they_were(upgrade):
    before, after = upgrade["before"], upgrade["after"]
    assert after["mxjob"]["metadata"]["uid"] == before["mxjob"]["metadata"]["uid"]
    assert after["mxjob"]["spec"] == before["mxjob"]["spec"]
    assert after["mxjob"]["status"] == before["mxjob"]["status"]
    assert after["mxjob"]["status"]["conditions"][-1]["type"] == "Running"
    assert [j["metadata"]["uid"] for j in after["chainerjobs"]] == [j["metadata"]["uid"] for j in before["chainerjobs"]]
    assert [j["spec"] for j in after["chainerjobs"]] == [j["spec"] for j in before["chainerjobs"]]
    assert len(after["children"]) == 7 and after["children"] == before["children"]
    assert after["storedVersions"] == before["storedVersions"] == {
        "crd/mxjobs.kubeflow.org": ["v1"], "crd/chainerjobs.kubeflow.org": ["v1alpha1"]}


@pytest.mark.apiserver
def test_failure_policy_is_unknown_to_0_2_0_and_accepted_after(upgrade):
    refused = upgrade["refused before"]
    assert refused.returncode == 1 and 'unknown field "spec.runPolicy.failurePolicy"' in refused.stderr
    created = upgrade["created after"]
    assert created.returncode == 0, created.stderr
    assert json.loads(created.stdout)["spec"]["runPolicy"]["failurePolicy"] == FAILURE_POLICY


@pytest.mark.apiserver
def test_the_old_job_takes_the_new_hooks_status_and_edits(upgrade):
    written = upgrade["status written"]
    assert written.returncode == 0, written.stderr
    assert json.loads(written.stdout)["status"]["conditions"][-1]["type"] == "Running"
    assert upgrade["label written"].returncode == 0, upgrade["label written"].stderr
