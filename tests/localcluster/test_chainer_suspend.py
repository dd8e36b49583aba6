"""ChainerJob suspend on the real control plane (docs/chainerjob.md, "Suspend"): a running ChainerJob
suspended loses its master Job, its worker StatefulSets and every pod, and stays Suspended; resumed,
it runs again as attempt 1 and completes. Cheap `sh` pods: MPI is not the point here."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers.engines import cluster_under

from localcluster.cluster import LocalCluster, condition, finished
from localcluster.controlplane.processes import ControlPlane

pytestmark = [pytest.mark.e2e, pytest.mark.apiserver]

NAME = "susp"
# Attempt 0's master runs until it is stopped; the resumed attempt's (MXJOB_ATTEMPT=1) ends at once.
MASTER = ["sh", "-c", 'if [ "$MXJOB_ATTEMPT" = 1 ]; then echo resumed; exit 0; fi; '
                      "trap exit TERM; while true; do sleep 1 & wait; done"]
WORKER = ["sh", "-c", "trap exit TERM; while true; do sleep 1 & wait; done"]


def chainerjob() -> dict[str, Any]:
    def template(command: list[str]) -> dict[str, Any]:
        return {"spec": {"terminationGracePeriodSeconds": 1,
                         "containers": [{"name": "chainer", "image": "busybox:1.36", "command": command}]}}
    return {"apiVersion": "kubeflow.org/v1alpha1", "kind": "ChainerJob", "metadata": {"name": NAME},
            "spec": {"master": {"template": template(MASTER)},
                     "workerSets": {"ws": {"replicas": 2, "template": template(WORKER)}}}}


@pytest.fixture
def cluster(tmp_path: Path, cluster_plane: ControlPlane, metacontroller: str) -> Iterator[LocalCluster]:
    with cluster_under(tmp_path / "state", metacontroller, control_plane=cluster_plane) as c:
        yield c


def job_pods(cluster: LocalCluster) -> list[dict[str, Any]]:
    """Every pod of the job by its operator label, owners deleted or not."""
    return [p for p in cluster.store.list_shared("v1", "Pod", "default")
            if (p["metadata"].get("labels") or {}).get("chainerjob.kubeflow.org/name") == NAME]


def running_pods(cluster: LocalCluster) -> dict[str, str]:
    return {p["metadata"]["uid"]: p["metadata"]["name"] for p in job_pods(cluster)
            if (p.get("status") or {}).get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")}


def state(cluster: LocalCluster) -> str | None:
    conditions = ((cluster.get_job(NAME) or {}).get("status") or {}).get("conditions") or []
    return conditions[-1]["type"] if conditions else None


def suspend(cluster: LocalCluster, value: bool) -> None:
    cluster.update_job(NAME, lambda j: j["spec"].setdefault("runPolicy", {}).update(suspend=value))


def test_a_running_chainerjob_suspended_loses_its_pods_and_resumed_completes(cluster):
    cluster.submit(chainerjob())
    first = cluster.wait_for(lambda: len(p := running_pods(cluster)) == 3 and state(cluster) == "Running" and p,
                             120, what="the master and both workers running")
    suspend(cluster, True)
    cluster.wait_for(lambda: not job_pods(cluster), 60, what="every pod of the job gone")
    assert cluster.wait_for(lambda: state(cluster) == "Suspended", 30, what="Suspended")
    assert cluster.children_of(NAME, "batch/v1", "Job") == []
    assert cluster.children_of(NAME, "apps/v1", "StatefulSet") == []
    job = cluster.get_job(NAME)
    assert job is not None and not finished(job)
    said = condition(job, "Suspended")
    assert said is not None and (said["status"], said["reason"]) == ("True", "ChainerJobSuspended")
    assert job["status"]["attempt"] == 1 and job["status"]["workerSets"] == {"ws": {"replicas": 0, "readyReplicas": 0}}
    assert cluster.control_plane is not None
    shown = cluster.control_plane.kubectl("get", "chainerjob", NAME).stdout.split()
    assert shown[shown.index(NAME) + 1] == "Suspended", shown

    suspend(cluster, False)
    done = cluster.wait_finished(NAME, timeout=120)
    assert finished(done) == "Succeeded" and state(cluster) == "Complete", done["status"]
    resumed = condition(done, "Suspended")
    assert resumed is not None and (resumed["status"], resumed["reason"]) == ("False", "ChainerJobResumed")
    assert done["status"]["attempt"] == 1 and done["status"]["succeeded"] == 1
    # The master that completed is the resumed attempt's: a new pod, labelled and told so.
    (master,) = [p for p in job_pods(cluster) if p["metadata"]["labels"].get("chainerjob.kubeflow.org/role") == "master"]
    assert master["metadata"]["uid"] not in first
    assert master["metadata"]["labels"]["chainerjob.kubeflow.org/attempt"] == "1"
    assert (master.get("status") or {}).get("phase") == "Succeeded"
