"""Issue 18 on the local cluster: a ChainerJob edited mid-run, and one whose controller gains a gang
component mid-run, finish with no worker restarted, under the real StatefulSet controller, the
hooks server and the Metacontroller stand-in. The master and the workers run small shell commands, so each test takes seconds: what
is under test is what happens to the worker pods, not ChainerMN.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from helpers.localcluster_gang import gang_controller

from localcluster.cluster import LocalCluster, finished
from localcluster.controlplane.processes import ControlPlane
from localcluster.store import ADDED, DELETED
from localcluster.types import KubeObject

pytestmark = [pytest.mark.e2e, pytest.mark.apiserver]

WORKER = ["sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1 & wait; done"]


def shell_chainerjob(name: str, master_seconds: int) -> dict:
    """A ChainerJob whose master sleeps, then exits 0, beside two idle workers."""
    def template(command: list[str]) -> dict:
        return {"spec": {"terminationGracePeriodSeconds": 1,
                         "containers": [{"name": "chainer", "image": "busybox:1.36", "command": command}]}}

    return {"apiVersion": "kubeflow.org/v1alpha1", "kind": "ChainerJob", "metadata": {"name": name},
            "spec": {"backend": "mpi", "master": {"template": template(["sh", "-c", f"sleep {master_seconds}; exit 0"])},
                     "workerSets": {"ws": {"replicas": 2, "template": template(WORKER)}}}}


class WorkerEvents:
    """Every creation and deletion of the job's worker pods, with whether the job had finished then."""

    def __init__(self, cluster: LocalCluster, name: str):
        self.cluster, self.prefix = cluster, f"{name}-workerset-ws-"
        self.events: list[tuple[str, str, str]] = []  # (event, pod name, uid)
        cluster.store.watch(self._seen)

    def _seen(self, event: str, obj: KubeObject) -> None:
        meta = obj.get("metadata", {})
        if obj.get("kind") == "Pod" and meta.get("name", "").startswith(self.prefix) and event in (ADDED, DELETED):
            self.events.append((event, meta["name"], meta["uid"]))


def running_workers(cluster: LocalCluster, name: str) -> dict[str, tuple[str, int]] | None:
    """Worker pod name -> (uid, restarts) once both run, with the master Job running."""
    pods = [p for p in cluster.pods(name) if "-workerset-" in p["metadata"]["name"]]
    master = [p for p in cluster.pods(name) if "-master-" in p["metadata"]["name"]]
    if len(pods) != 2 or not master or any(p.get("status", {}).get("phase") != "Running" for p in pods + master):
        return None
    return {p["metadata"]["name"]: (p["metadata"]["uid"],
                                    sum(c.get("restartCount", 0) for c in p["status"].get("containerStatuses", [])))
            for p in pods}


def worker_set(cluster: LocalCluster, name: str) -> Any:
    return cluster.store.get("apps/v1", "StatefulSet", "default", f"{name}-workerset-ws")


def assert_workers_kept(cluster: LocalCluster, events: WorkerEvents, name: str, before: dict) -> None:
    """The job completes; until then the same worker pods run, never restarted; then they go."""
    assert running_workers(cluster, name) == before, "a worker pod was replaced or restarted while the master ran"
    done = cluster.wait_finished(name, 30)
    assert finished(done) == "Succeeded", done.get("status")
    created = [(pod, uid) for event, pod, uid in events.events if event == ADDED]
    assert sorted(created) == sorted((pod, uid) for pod, (uid, _) in before.items())  # never created again
    cluster.wait_for(lambda: worker_set(cluster, name)["spec"]["replicas"] == 0, 15, what="workers scaled to 0")


def test_a_chainerjob_edited_mid_run_finishes_with_no_worker_restarted(tmp_path: Path, cluster_plane: ControlPlane):
    with LocalCluster(tmp_path / "state", control_plane=cluster_plane) as cluster:
        events = WorkerEvents(cluster, "edited")
        cluster.submit(shell_chainerjob("edited", master_seconds=6))
        before = cluster.wait_for(lambda: running_workers(cluster, "edited"), 20, what="workers and master running")
        old_revision = worker_set(cluster, "edited")["status"].get("updateRevision")

        def edit(job: KubeObject) -> None:
            container = job["spec"]["workerSets"]["ws"]["template"]["spec"]["containers"][0]
            container["env"] = [{"name": "EDITED", "value": "1"}]
            job["spec"]["workerSets"]["ws"]["template"].setdefault("metadata", {})["labels"] = {"edited": "yes"}

        cluster.update_job("edited", edit)

        def template_edited() -> bool:
            sts = worker_set(cluster, "edited")
            env = sts["spec"]["template"]["spec"]["containers"][0].get("env", [])
            return {"name": "EDITED", "value": "1"} in env and sts["spec"]["template"]["metadata"]["labels"].get("edited") == "yes"

        # The edit reaches the StatefulSet (a new revision), which is OnDelete: no pod is rolled.
        cluster.wait_for(template_edited, 10, what="the worker template edit on the StatefulSet")
        assert worker_set(cluster, "edited")["spec"]["updateStrategy"]["type"] == "OnDelete"
        cluster.wait_for(lambda: worker_set(cluster, "edited")["status"].get("updateRevision") != old_revision, 10,
                         what="the StatefulSet controller to see the new revision")
        assert_workers_kept(cluster, events, "edited", before)


def test_a_chainerjob_whose_controller_gains_a_gang_component_finishes_with_no_worker_restarted(
        tmp_path: Path, cluster_plane: ControlPlane):
    gang = gang_controller(tmp_path, "volcano", "chainerjob-controller")
    with LocalCluster(tmp_path / "state", control_plane=cluster_plane) as cluster:
        events = WorkerEvents(cluster, "ganged")
        cluster.submit(shell_chainerjob("ganged", master_seconds=6))
        before = cluster.wait_for(lambda: running_workers(cluster, "ganged"), 20, what="workers and master running")
        assert cluster.store.get("scheduling.volcano.sh/v1beta1", "PodGroup", "default", "ganged") is None

        cluster.use_controller(gang)  # Metacontroller restarts the controller whose spec changed

        group = cluster.wait_for(lambda: cluster.store.get("scheduling.volcano.sh/v1beta1", "PodGroup", "default", "ganged"),
                                 10, what="the PodGroup of the gang")
        assert group["spec"]["minMember"] == 3
        # The templates are marked for the gang; the StatefulSet is OnDelete, so no running worker moves.
        cluster.wait_for(lambda: worker_set(cluster, "ganged")["spec"]["template"]["spec"].get("schedulerName") == "volcano",
                         10, what="the worker template marked for the gang")
        assert worker_set(cluster, "ganged")["spec"]["updateStrategy"]["type"] == "OnDelete"
        assert_workers_kept(cluster, events, "ganged", before)
