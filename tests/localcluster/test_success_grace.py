"""End to end on the local cluster: the success grace decides the outcome (docs/lifecycle.md, rows 4, 16-18).

mxnet-operator#38: a worker exited 1 after the scheduler had exited 0, and the MXJob was
Succeeded. Here the job waits up to 30 s for the other pods once the deciding ones succeed, and
fails if one of them ends with a code its restartPolicy treats as a failure.
"""
from __future__ import annotations

import copy
from pathlib import Path

import pytest
from helpers import yamlio

from localcluster.cluster import LocalCluster, condition, finished
from localcluster.controlplane.processes import ControlPlane

pytestmark = [pytest.mark.e2e, pytest.mark.apiserver]

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "local" / "dist-train-digits.yaml"


def py(code: str) -> list[str]:
    return ["python", "-c", code]


@pytest.mark.mxnet
def test_a_worker_exiting_1_after_the_schedulers_success_fails_the_job(tmp_path: Path, cluster_plane: ControlPlane):
    job = yamlio.load(EXAMPLE.read_text())
    job["metadata"]["name"] = "late-fail"
    worker = job["spec"]["mxReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    # The real digits training on every pod; worker 1 then exits 1 a moment after it is done,
    # when the scheduler has already exited 0 at ps-lite's final barrier.
    train = " ".join([*worker["command"], *worker["args"]])
    worker["command"] = ["sh", "-c", f'{train} && if [ "$DMLC_WORKER_ID" = 1 ]; then sleep 3; exit 1; fi']
    del worker["args"]
    with LocalCluster(tmp_path / "state", control_plane=cluster_plane) as cluster:
        cluster.submit(job)
        done = cluster.wait_finished("late-fail", timeout=180)
        pods = {p["metadata"]["name"]: p for p in cluster.pods("late-fail")}
        scheduler_log = cluster.log_path("late-fail-scheduler-0").read_text()
        worker_log = cluster.log_path("late-fail-worker-1").read_text()
        outcome = cluster.store.get("v1", "ConfigMap", "default", "late-fail-outcome")

    assert "the scheduler is connected to 2 workers and 1 servers" in scheduler_log
    assert "final validation-accuracy=" in worker_log  # it trained, then failed
    assert pods["late-fail-scheduler-0"]["status"]["phase"] == "Succeeded"
    assert finished(done) == "Failed" and condition(done, "Succeeded") is None
    message = condition(done, "Failed")["message"]
    # The reason, and the last line of the log's tail (FallbackToLogsOnError: ps-lite's goodbye), which
    # says nothing of an error (the script exits 1 after it), so it is quoted as only that.
    assert message.startswith("MXJob default/late-fail failed: Worker 1 (pod late-fail-worker-1) failed with exit code 1, "
                              "reason Error, last log line: '")
    assert message.endswith("' after Scheduler 0 succeeded; restartPolicy Never does not retry.")
    terminated = pods["late-fail-worker-1"]["status"]["containerStatuses"][0]["state"]["terminated"]
    assert terminated["exitCode"] == 1
    assert done["status"]["replicaStatuses"]["Worker"]["failed"] == 1
    assert outcome is not None and outcome["immutable"] is True


def test_a_pod_still_running_after_the_grace_is_stopped_and_the_job_succeeds(tmp_path: Path, cluster_plane: ControlPlane):
    job = {
        "apiVersion": "kubeflow.org/v1", "kind": "MXJob", "metadata": {"name": "slow-server"},
        "spec": {"jobMode": "MXTrain", "mxReplicaSpecs": {
            "Scheduler": {"replicas": 1, "template": {"spec": {"containers": [
                {"name": "mxnet", "image": "busybox:1.36", "command": py("import time; time.sleep(2)")}]}}},
            "Server": {"replicas": 1, "template": {"spec": {"terminationGracePeriodSeconds": 1, "containers": [
                {"name": "mxnet", "image": "busybox:1.36", "command": py("import time; time.sleep(600)")}]}}},
            "Worker": {"replicas": 1, "template": {"spec": {"containers": [
                {"name": "mxnet", "image": "busybox:1.36", "command": py("import time; time.sleep(4)")}]}}},
        }},
    }
    with LocalCluster(tmp_path / "state", control_plane=cluster_plane) as cluster:
        cluster.submit(copy.deepcopy(job))
        waiting = cluster.wait_for(
            lambda: (j := cluster.get_job("slow-server")) and "waiting up to 30 s"
            in ((condition(j, "Running") or {}).get("message") or "") and j, 30, what="the grace")
        assert not finished(waiting) and condition(waiting, "Running")["status"] == "True"
        done = cluster.wait_finished("slow-server", timeout=60)
        cluster.wait_for(lambda: cluster.pod("slow-server-server-0") is None, 15, what="the server stopped")
        final = cluster.get_job("slow-server")

    assert finished(done) == "Succeeded"
    # Stopped by cleanPodPolicy after the grace, it counts as succeeded; the worker ended with 0.
    assert final["status"]["replicaStatuses"]["Server"] == {
        "active": 0, "succeeded": 1, "failed": 0, "completedIndexes": "0"}
    assert final["status"]["replicaStatuses"]["Worker"]["succeeded"] == 1
