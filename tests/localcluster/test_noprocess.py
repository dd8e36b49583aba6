"""The no-process node (localcluster/node/noprocess.py): pods Running without processes, ending when their
annotations say, for the scale benchmark. On the in-memory store (fast) and on the real API server."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from localcluster.cluster import LocalCluster, finished
from localcluster.controlplane.processes import ControlPlane
from localcluster.node.noprocess import EXIT_AFTER_ANNOTATION, EXIT_CODE_ANNOTATION, KUBELET_ANNOTATION, WRITERS
from localcluster.types import KubeObject

pytestmark = pytest.mark.apiserver


def mxjob(name: str, workers: int, *, annotations: dict[str, str] | None = None, policy: str = "Never") -> KubeObject:
    template: dict = {"spec": {"containers": [{"name": "mxnet", "image": "mxnet:1.9.1", "command": ["no-such-binary"]}]}}
    if annotations:
        template["metadata"] = {"annotations": annotations}
    return {"apiVersion": "kubeflow.org/v1", "kind": "MXJob", "metadata": {"name": name},
            "spec": {"jobMode": "MXTrain", "mxReplicaSpecs": {
                "Scheduler": {"replicas": 1, "restartPolicy": policy, "template": template},
                "Server": {"replicas": 1, "restartPolicy": policy, "template": template},
                "Worker": {"replicas": workers, "restartPolicy": policy, "template": template}}}}


def running(cluster: LocalCluster, name: str, count: int) -> bool:
    pods = cluster.pods(name)
    def ready(pod: KubeObject) -> bool:
        return {"type": "Ready", "status": "True"}.items() <= pod["status"]["conditions"][-1].items()

    return len(pods) == count and all(p.get("status", {}).get("phase") == "Running" and ready(p) for p in pods)


def test_a_noprocess_cluster_runs_pods_without_processes_and_without_a_thread_each(tmp_path: Path, cluster_plane: ControlPlane):
    with LocalCluster(tmp_path, control_plane=cluster_plane, kubelet_mode="noprocess", client_qps=1000, client_burst=1000) as cluster:
        threads = threading.active_count()
        cluster.submit(mxjob("many", 60))
        cluster.wait_for(lambda: running(cluster, "many", 62), 60, what="62 pods Running")
        assert threading.active_count() <= threads + 1 + WRITERS  # a timer and the writers, not one per pod
        pod = cluster.pods("many")[0]
        assert pod["spec"]["nodeName"] == "localcluster" and pod["status"]["containerStatuses"][0]["state"]["running"]
        assert not (tmp_path / "default" / "many").exists() or not list((tmp_path / "default" / "many").glob("*.log"))
        cluster.delete_pod(pod["metadata"]["name"])
        cluster.wait_for(lambda: len(cluster.pods("many")) == 62 and all(
            p["metadata"]["uid"] != pod["metadata"]["uid"] for p in cluster.pods("many")), 30, what="the pod recreated")


@pytest.mark.parametrize(("code", "outcome"), [(0, "Succeeded"), (3, "Failed")])
def test_annotations_end_a_pod_with_an_exit_code_after_a_time(tmp_path: Path, code: int, outcome: str, cluster_plane: ControlPlane):
    annotations = {KUBELET_ANNOTATION: "noprocess", EXIT_AFTER_ANNOTATION: "0.5", EXIT_CODE_ANNOTATION: str(code)}
    with LocalCluster(tmp_path, control_plane=cluster_plane, client_qps=1000, client_burst=1000) as cluster:  # a process kubelet: per pod
        cluster.submit(mxjob("ends", 2, annotations=annotations))
        job = cluster.wait_finished("ends", 60)
        assert finished(job) == outcome
        exits = {p["status"]["containerStatuses"][0]["state"].get("terminated", {}).get("exitCode") for p in cluster.pods("ends")
                 if p.get("status", {}).get("phase") in ("Succeeded", "Failed")}
        assert code in exits


def test_under_always_an_exit_restarts_the_container_and_the_pod_stays_running(tmp_path: Path, cluster_plane: ControlPlane):
    # A Worker-only job: the operator leaves its restarts to the kubelet (a distributed job with a
    # Scheduler is restarted whole instead: docs/lifecycle.md, "Restarts").
    annotations = {EXIT_AFTER_ANNOTATION: "0.3", EXIT_CODE_ANNOTATION: "1"}
    job = mxjob("loops", 2, annotations=annotations, policy="Always")
    job["spec"]["mxReplicaSpecs"] = {"Worker": job["spec"]["mxReplicaSpecs"]["Worker"]}
    with LocalCluster(tmp_path, control_plane=cluster_plane, kubelet_mode="noprocess", client_qps=1000, client_burst=1000) as cluster:
        cluster.submit(job)
        cluster.wait_for(lambda: all(p.get("status", {}).get("containerStatuses", [{}])[0].get("restartCount", 0) >= 2
                                     for p in cluster.pods("loops")) and len(cluster.pods("loops")) == 2, 30,
                         what="two restarts")
        pod = cluster.pods("loops")[0]
        assert pod["status"]["phase"] == "Running"
        assert pod["status"]["containerStatuses"][0]["lastState"]["terminated"]["exitCode"] == 1


@pytest.mark.e2e
def test_on_the_real_api_server_a_noprocess_job_runs_and_settles(tmp_path: Path, cluster_plane: ControlPlane):
    with LocalCluster(tmp_path / "state", control_plane=cluster_plane, kubelet_mode="noprocess",
                      client_qps=200, client_burst=200) as cluster:
        cluster.submit(mxjob("real", 20))
        cluster.wait_for(lambda: running(cluster, "real", 22), 120, what="22 pods Running")


def test_the_gang_stand_in_holds_noprocess_pods_until_their_podgroup_exists(tmp_path: Path, cluster_plane: ControlPlane):
    """The gang stand-in holds no-process pods Pending (Unschedulable) as it holds process pods."""
    with LocalCluster(tmp_path, control_plane=cluster_plane, kubelet_mode="noprocess", client_qps=1000, client_burst=1000) as cluster:
        pod = {"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": "held", "namespace": "default", "annotations": {"scheduling.k8s.io/group-name": "g"}},
               "spec": {"schedulerName": "volcano", "containers": [{"name": "c", "image": "x", "command": ["true"]}]}}
        cluster.store.create(pod)

        def scheduled() -> dict | None:
            current = cluster.store.get("v1", "Pod", "default", "held") or {}
            return next((c for c in current.get("status", {}).get("conditions", []) if c["type"] == "PodScheduled"), None)

        held = cluster.wait_for(scheduled, 10, what="PodScheduled reported")
        assert held["status"] == "False" and held["reason"] == "Unschedulable"
        cluster.store.create({"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
                              "metadata": {"name": "g", "namespace": "default"}, "spec": {"minMember": 1}})
        cluster.wait_for(lambda: (cluster.store.get("v1", "Pod", "default", "held") or {}).get("status", {}).get("phase") == "Running",
                         10, what="the pod Running once its gang is complete")
        assert scheduled()["status"] == "True"  # type: ignore[index]
