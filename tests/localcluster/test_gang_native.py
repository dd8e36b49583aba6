"""Kubernetes' own gang scheduling (feature gate GenericWorkload) on the real kube-scheduler.

On a control plane of this module's own, started with the gate on kube-apiserver and kube-scheduler
and `scheduling.k8s.io/v1beta1` served (the session's plane keeps the gate off), and a Node of 2 CPUs:
the controller is the one docs/gang-scheduling.md's kustomization with the kubernetes-gang component
renders, so the local Metacontroller writes a `scheduling.k8s.io/v1beta1` PodGroup and pods naming it
in `spec.schedulingGroup`, and kube-scheduler's GangScheduling plugin alone decides. An MXJob whose
gang does not fit gets none of its pods bound, and says it waits and why; one that fits succeeds.
The golden answers under this gang are written as Metacontroller writes them, and the Job and
StatefulSet controllers' pods keep their group.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from helpers import apiserver, yamlio
from helpers import metacontroller_writes as mc
from helpers.localcluster_gang import gang_controller, scheduled
from helpers.native_gang import GENERIC_WORKLOAD, GOLDEN, KUBERNETES_GANG_API, golden_names
from helpers.shared_plane import clear_local_clusters

from localcluster.cluster import LocalCluster, condition, finished
from localcluster.controlplane.processes import ControlPlane, ControlPlaneError
from localcluster.node.registration import NODE_NAME

pytestmark = [pytest.mark.e2e, pytest.mark.apiserver]

WORKERS = 2
HELD_SECONDS = 3.0  # how long a gang that does not fit is watched staying unbound


@pytest.fixture(scope="module")
def gang_plane() -> Iterator[ControlPlane]:
    plane = ControlPlane(**GENERIC_WORKLOAD)
    try:
        plane.start()
    except ControlPlaneError as exc:
        pytest.fail(f"the control plane with GenericWorkload did not start: {exc}", pytrace=False)
    try:
        mc.install(plane)
        yield plane
    finally:
        plane.stop()


@pytest.fixture
def cluster(tmp_path: Path, gang_plane: ControlPlane) -> Iterator[LocalCluster]:
    clear_local_clusters(gang_plane)
    config = gang_controller(tmp_path, "kubernetes-gang")
    with LocalCluster(tmp_path / "state", control_plane=gang_plane, configs=[config], cpus="2", memory="4Gi") as c:
        yield c


def gang_job(name: str, cpu: str) -> dict[str, Any]:
    """A worker-only MXJob of two workers asking for `cpu` each; each works a moment and succeeds."""
    pod_spec = {"terminationGracePeriodSeconds": 1, "containers": [
        {"name": "mxnet", "image": "busybox:1.36", "command": ["sh", "-c", "sleep 1"],
         "resources": {"requests": {"cpu": cpu}}}]}
    return {"apiVersion": "kubeflow.org/v1", "kind": "MXJob", "metadata": {"name": name},
            "spec": {"jobMode": "MXTrain", "mxReplicaSpecs": {"Worker": {
                "replicas": WORKERS, "restartPolicy": "Never", "template": {"spec": pod_spec}}}}}


def test_a_gang_that_does_not_fit_gets_none_of_its_pods_bound_and_the_job_says_why(cluster: LocalCluster):
    # Two workers of 1.5 CPUs: either fits the 2-CPU node alone, both never do.
    cluster.submit(gang_job("big", "1500m"))

    def held() -> list[dict[str, Any]] | None:
        pods = cluster.pods("big")
        ok = len(pods) == WORKERS and all(scheduled(p).get("reason") == "Unschedulable" for p in pods)
        return pods if ok else None

    pods = cluster.wait_for(held, 60, what="both workers judged Unschedulable by kube-scheduler")
    for pod in pods:
        assert pod["spec"]["schedulingGroup"] == {"podGroupName": "big"}
        assert pod["spec"]["schedulerName"] == "default-scheduler"
    group = cluster.store.get(KUBERNETES_GANG_API, "PodGroup", "default", "big")
    assert group is not None and group["spec"]["schedulingPolicy"] == {"gang": {"minCount": WORKERS}}
    # Held, not slow: a while later neither is bound, though one alone would fit.
    time.sleep(HELD_SECONDS)
    pods = cluster.pods("big")
    assert [(p["spec"].get("nodeName"), p["status"]["phase"]) for p in pods] == [(None, "Pending")] * WORKERS
    messages = {scheduled(p)["message"] for p in pods}
    assert any("minCount (2) cannot be satisfied" in m for m in messages), messages

    def says_it_waits() -> str | None:
        message = (condition(cluster.get_job("big"), "Created") or {}).get("message", "")
        return message if "it waits for the scheduler: " in message else None

    message = cluster.wait_for(says_it_waits, 30, what="the job's Created condition to say it waits")
    assert message.startswith("MXJob default/big is created; it waits for the scheduler: pod")
    assert "minCount (2) cannot be satisfied" in message, message
    job = cluster.get_job("big")
    assert job is not None and job["status"]["waiting"] == "Scheduler: Unschedulable"


def test_a_gang_that_fits_runs_to_succeeded(cluster: LocalCluster):
    cluster.submit(gang_job("small", "500m"))
    job = cluster.wait_finished("small", 90)
    assert finished(job) == "Succeeded", job["status"]
    pods = cluster.pods("small")
    assert len(pods) == WORKERS
    for pod in pods:
        assert pod["spec"]["nodeName"] == NODE_NAME
        assert pod["spec"]["schedulingGroup"] == {"podGroupName": "small"}
        assert scheduled(pod)["status"] == "True"


@pytest.fixture
def fresh(gang_plane: ControlPlane) -> Iterator[str]:
    name = mc.new_namespace(gang_plane)
    yield name
    mc.delete_namespace(gang_plane, name)


@pytest.mark.parametrize("name", golden_names(generic_workload=True))
def test_every_child_of_a_golden_answer_is_admitted_and_its_pods_keep_their_group(gang_plane, fresh, name):
    """Written as Metacontroller writes them (tests/shared/test_children_admitted.py does the other
    goldens on the session's plane); the pods the Job and StatefulSet controllers make from a
    ChainerJob's templates are in the gang too."""
    request = yamlio.load((GOLDEN / name / "request.yaml").read_text())
    now = datetime.fromisoformat(request.pop("now"))
    assert mc.admitted(gang_plane, fresh, request, now) == []
    pods = apiserver.dynamic(gang_plane).resources.get(api_version="v1", kind="Pod").get(namespace=fresh).to_dict()["items"]
    assert pods
    assert {p["metadata"]["name"]: p["spec"].get("schedulingGroup") for p in pods} == {
        p["metadata"]["name"]: {"podGroupName": request["parent"]["metadata"]["name"]} for p in pods}
