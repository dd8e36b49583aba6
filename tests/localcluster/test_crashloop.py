"""A container that cannot start stays in CrashLoopBackOff under OnFailure/Always, as on a real kubelet."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from helpers.objectstore import ObjectBag

from localcluster.cluster import LocalCluster
from localcluster.controlplane.processes import ControlPlane
from localcluster.node.dns import ClusterDNS
from localcluster.node.kubelet import ProcessKubelet
from localcluster.node.registration import NODE_NAME

pytestmark = [pytest.mark.e2e, pytest.mark.apiserver]

MISSING = "/nonexistent/mxjob-test-binary"


def watch_pod(tmp_path: Path, policy: str, seconds: float) -> tuple[list[str], dict]:
    """Run a pod whose command does not exist; the phases it reported, and its last status."""
    store = ObjectBag()
    kubelet = ProcessKubelet(store, ClusterDNS(store, strict=False), tmp_path, restart_backoff=(0.1, 0.4))
    phases: list[str] = []
    store.watch(lambda event, obj: phases.append(obj.get("status", {}).get("phase", "")) if obj.get("kind") == "Pod" else None)
    kubelet.start()
    try:
        store.create({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},  # bound: no scheduler here
                      "spec": {"nodeName": NODE_NAME, "restartPolicy": policy, "containers": [{"name": "mxnet", "command": [MISSING]}]}})
        time.sleep(seconds)
        return phases, store.get("v1", "Pod", "default", "p")["status"]
    finally:
        kubelet.stop()


@pytest.mark.parametrize("policy", ["OnFailure", "Always"])
def test_a_container_that_cannot_start_backs_off_and_the_pod_never_fails(tmp_path: Path, policy: str):
    phases, status = watch_pod(tmp_path, policy, 2.5)
    assert "Failed" not in phases
    assert status["phase"] == "Running"
    main = status["containerStatuses"][0]
    assert main["state"]["waiting"]["reason"] == "CrashLoopBackOff"
    assert main["lastState"]["terminated"]["reason"] == "StartError"
    assert main["lastState"]["terminated"]["exitCode"] == 128
    # Back-off 0.1 s doubling to 0.4 s: a handful of restarts in 2.5 s, not one per poll.
    assert 3 <= main["restartCount"] <= 10


def test_under_never_a_container_that_cannot_start_fails_the_pod(tmp_path: Path):
    _, status = watch_pod(tmp_path, "Never", 0.5)
    assert status["phase"] == "Failed"
    assert status["containerStatuses"][0]["state"]["terminated"]["reason"] == "StartError"


def test_the_operator_keeps_the_crash_looping_pod_instead_of_recreating_it(tmp_path: Path, cluster_plane: ControlPlane):
    job = {"apiVersion": "kubeflow.org/v1", "kind": "MXJob", "metadata": {"name": "loopy"},
           "spec": {"mxReplicaSpecs": {"Worker": {"replicas": 1, "restartPolicy": "OnFailure", "template": {"spec": {
               "containers": [{"name": "mxnet", "image": "busybox:1.36", "command": [MISSING]}]}}}}}}
    with LocalCluster(tmp_path / "state", control_plane=cluster_plane, restart_backoff=(0.1, 0.4)) as cluster:
        cluster.submit(job)
        first = cluster.wait_for(lambda: cluster.pod("loopy-worker-0"), 30, what="the pod")
        time.sleep(2.5)
        pod = cluster.pod("loopy-worker-0")
        assert pod is not None and pod["metadata"]["uid"] == first["metadata"]["uid"]
        assert pod["status"]["containerStatuses"][0]["restartCount"] >= 3
        status = cluster.get_job("loopy")["status"]
        assert "restartHistory" not in status  # no recreation was counted
