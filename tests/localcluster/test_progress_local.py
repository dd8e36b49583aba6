"""Progress reporting on the local cluster, end to end (docs/progress.md): pods reach the real API
server with their ServiceAccount's token, as in-cluster clients do, so the helper
(reporter/mxjob_progress.py) that examples/digits/train.py calls reports for real, and a stall is
detected and acted on from real reports (a worker wedged with SIGSTOP)."""

from __future__ import annotations

import copy
import json
import os
import re
import signal
import time
from pathlib import Path

import pytest
from helpers import yamlio

from localcluster.cluster import LocalCluster, condition, finished
from localcluster.controlplane.processes import ControlPlane
from localcluster.types import KubeObject

pytestmark = [pytest.mark.e2e, pytest.mark.apiserver, pytest.mark.mxnet]

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "local" / "dist-train-digits.yaml"
PROGRESS_KINDS = (("v1", "ConfigMap"), ("v1", "ServiceAccount"),
                  ("rbac.authorization.k8s.io/v1", "Role"), ("rbac.authorization.k8s.io/v1", "RoleBinding"))


def digits_job(name: str, *, epochs: int = 10, **run_policy: object) -> KubeObject:
    job = yamlio.load(EXAMPLE.read_text())
    job["metadata"]["name"] = name
    job["spec"]["runPolicy"].pop("progress", None)
    job["spec"]["runPolicy"].update(run_policy)
    worker = job["spec"]["mxReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    worker["args"] = ["--kv-store", "dist_sync", "--epochs", str(epochs), "--min-accuracy", "0.9"]
    return job


def progress_children(plane: ControlPlane, job: str) -> list[str]:
    found = []
    for api_version, kind in PROGRESS_KINDS:
        group = api_version.split("/")[0] if "/" in api_version else ""
        resource = kind.lower() + "s" + (f".{group}" if group else "")
        out = plane.kubectl("get", resource, "-n", "default", "--ignore-not-found", "-o", "name", f"{job}-progress").stdout
        found += [line for line in out.splitlines() if line]
    return found


def log_text(cluster: LocalCluster, pod: str) -> str:
    """A pod's log so far ("" before the pod or its log exists)."""
    try:
        return cluster.log_path(pod).read_text()
    except (KeyError, OSError):
        return ""


def pod_pids(cluster: LocalCluster, pod: str) -> list[int]:
    """The processes of one pod, found by its own folder first on their PATH (docs/write-a-job.md)."""
    folder = str(cluster.kubelet.pods_dir / "default" / pod) + "/"
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(var.startswith(b"PATH=" + folder.encode()) for var in environ):
            pids.append(int(entry.name))
    return pids


def test_the_digits_example_reports_progress_seen_in_status_and_the_progress_column(tmp_path: Path, cluster_plane: ControlPlane):
    job = yamlio.load(EXAMPLE.read_text())
    assert job["spec"]["runPolicy"].get("progress") == {}, "the example asks for progress"
    with LocalCluster(tmp_path / "state", control_plane=cluster_plane) as cluster:
        cluster.submit(job)
        running = cluster.wait_for(lambda: ((cluster.get_job("dist-train-digits") or {}).get("status") or {}).get("progress"),
                                   120, what="a first progress report")
        column = cluster_plane.kubectl("get", "mxj", "dist-train-digits", "-n", "default", "--no-headers",
                                       "-o", "custom-columns=P:.status.progress.progressPercentage,S:.status.progress.step").stdout
        printed = cluster_plane.kubectl("get", "mxj", "dist-train-digits", "-n", "default").stdout
        done = cluster.wait_finished("dist-train-digits", timeout=180)
        report = json.loads(cluster_plane.kubectl("get", "configmap", "dist-train-digits-progress", "-n", "default", "-o", "json").stdout)

    assert finished(done) == "Succeeded"
    assert running["step"] >= 1 and running["total"] > running["step"] - 1
    assert int(column.split()[1]) >= running["step"]  # read after the first report: that step or a later one
    header, row = printed.splitlines()[:2]
    at = header.index("PROGRESS")
    assert row[at:].split()[0].isdigit(), printed  # the Progress column shows a percentage
    progress = done["status"]["progress"]
    # Workers report every 30 s and at their last step (written at once): the end is 100 %.
    assert progress["progressPercentage"] == 100 and progress["step"] == progress["total"], progress
    assert progress["reporter"].startswith("worker-") and progress["attempt"] == 0
    assert "worker-0" in report["data"], report["data"]
    assert json.loads(report["data"]["worker-0"])["step"] == progress["total"]


def test_a_wedged_worker_is_a_stall_that_restarts_the_job_which_then_succeeds(tmp_path: Path, cluster_plane: ControlPlane):
    timeout = 20
    job = digits_job("stall", epochs=6, progress={}, stallPolicy={"timeoutSeconds": timeout, "action": "RestartJob"},
                     activeDeadlineSeconds=600)
    for spec in job["spec"]["mxReplicaSpecs"].values():
        spec["template"]["spec"]["containers"][0]["env"].append({"name": "MXJOB_PROGRESS_INTERVAL", "value": "1"})
    with LocalCluster(tmp_path / "state", control_plane=cluster_plane) as cluster:
        cluster.submit(job)
        cluster.wait_for(lambda: "epoch 1/" in log_text(cluster, "stall-worker-0"), 120, what="worker-0's first epoch")
        pids = pod_pids(cluster, "stall-worker-1")
        assert pids
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
        stopped = time.monotonic()
        restarting = cluster.wait_for(lambda: condition(cluster.get_job("stall") or {}, "Restarting"),
                                      timeout + 10 + 60, what="the stall restart")
        noticed = time.monotonic() - stopped
        print(f"stall restart {noticed:.1f} s after SIGSTOP")
        done = cluster.wait_finished("stall", timeout=240)

    assert restarting["reason"] == "MXJobStalled", restarting
    # Silent for timeoutSeconds, then 10 s for a late report, plus one resync and the restart's writes.
    assert timeout <= noticed < timeout + 10 + 30, noticed
    assert finished(done) == "Succeeded", done["status"]
    assert done["status"]["progress"]["attempt"] == 1 and done["status"]["progress"]["progressPercentage"] == 100


# A real ps-lite job (scheduler, server, two workers) pushing and pulling one key per step, STEPS
# steps half a second apart, reporting each. With EXIT_AT=N, worker 1 calls sys.exit(1) at step N of
# the first attempt: with mxnet 1.9.1 the interpreter then waits for ps-lite's threads and the
# process never exits (seen outside the cluster too, for minutes), so its pod stays Running and only
# its silence tells.
KV_LOOP = """\
import os, sys, time
sys.path.insert(0, 'reporter')
import mxnet as mx  # the scheduler and the server run their role in this import and exit
import mxjob_progress
kv = mx.kv.create('dist_sync')
rank, attempt = kv.rank, int(os.environ.get('MXJOB_ATTEMPT', '0'))
steps, exit_at = int(os.environ['STEPS']), int(os.environ.get('EXIT_AT', '0'))
kv.init(3, mx.nd.ones((2, 2)))
out = mx.nd.zeros((2, 2))
for step in range(1, steps + 1):
    kv.push(3, mx.nd.ones((2, 2)))
    kv.pull(3, out=out)
    out.wait_to_read()
    mxjob_progress.report(step, total=steps)
    print(f'worker {rank} attempt {attempt} step {step}', flush=True)
    if attempt == 0 and rank == 1 and step == exit_at:
        print('worker 1 calls sys.exit(1)', flush=True)
        sys.exit(1)
    time.sleep(0.5)
print(f'worker {rank} done', flush=True)
"""


def kv_loop_job(name: str, *, steps: int, exit_at: int = 0, **run_policy: object) -> KubeObject:
    """The digits example's job running KV_LOOP, reporting at most once a second."""
    job = digits_job(name, **run_policy)
    for spec in job["spec"]["mxReplicaSpecs"].values():
        container = spec["template"]["spec"]["containers"][0]
        container["command"], container["args"] = ["python", "-u", "-c", KV_LOOP], []
        container["env"] += [{"name": "MXJOB_PROGRESS_INTERVAL", "value": "1"},
                             {"name": "STEPS", "value": str(steps)}, {"name": "EXIT_AT", "value": str(exit_at)}]
    return job


@pytest.mark.parametrize("action,outcome", [("RestartJob", "Succeeded"), ("FailJob", "Failed")])
def test_a_worker_left_alive_by_sys_exit_is_a_stall_the_policy_acts_on(tmp_path: Path, cluster_plane: ControlPlane,
                                                                      action: str, outcome: str):
    timeout = 20
    job = kv_loop_job(f"exit-{action.lower()}", steps=20, exit_at=5, progress={"reporters": "AllReplicas"},
                      stallPolicy={"timeoutSeconds": timeout, "action": action}, activeDeadlineSeconds=600)
    name = job["metadata"]["name"]
    with LocalCluster(tmp_path / "state", control_plane=cluster_plane) as cluster:
        cluster.submit(job)
        cluster.wait_for(lambda: "calls sys.exit(1)" in log_text(cluster, f"{name}-worker-1"), 120,
                         what="worker 1's sys.exit(1)")
        exited = time.monotonic()
        # Halfway to the deadline: sys.exit(1) has not ended the process, and its pod runs on.
        time.sleep(timeout / 2)
        alive = bool(pod_pids(cluster, f"{name}-worker-1"))
        phase = ((cluster.pod(f"{name}-worker-1") or {}).get("status") or {}).get("phase")
        first_log = log_text(cluster, f"{name}-worker-1")
        acted = "Restarting" if action == "RestartJob" else "Failed"
        decided = cluster.wait_for(lambda: condition(cluster.get_job(name) or {}, acted), timeout + 10 + 60,
                                   what=f"the stall's {acted}")
        noticed = time.monotonic() - exited
        print(f"{action}: {acted} {noticed:.1f} s after sys.exit(1)")
        done = cluster.wait_finished(name, timeout=240)

    # Restarting says why in its reason; Failed in its message (its reason is MXJobFailed, as every end by failure).
    assert decided["reason"] == ("MXJobStalled" if action == "RestartJob" else "MXJobFailed"), decided
    assert "stalled: no progress report" in decided["message"] or action == "RestartJob", decided["message"]
    # Its last report: step 5, or one the once-a-second rate limit let through just before.
    assert re.search(r"worker-1 \(last: step [1-5] of 20", decided["message"]), decided["message"]
    assert alive and phase == "Running", (alive, phase)
    assert "calls sys.exit(1)" in first_log and not re.search(r"exited with code", first_log), first_log[-2000:]
    # Silent for timeoutSeconds after its last report (up to 2 s before the exit), then 10 s for a late
    # report, plus a resync and the writes.
    assert timeout + 10 - 2 <= noticed < timeout + 10 + 30, noticed
    assert finished(done) == outcome, done["status"]
    if outcome == "Succeeded":
        assert done["status"]["progress"]["attempt"] == 1 and done["status"]["progress"]["progressPercentage"] == 100


def test_progress_asked_of_a_running_job_adds_its_children_and_keeps_every_pod_running(
        tmp_path: Path, cluster_plane: ControlPlane):
    name = "late"
    with LocalCluster(tmp_path / "state", control_plane=cluster_plane) as cluster:
        cluster.submit(kv_loop_job(name, steps=40, activeDeadlineSeconds=300))
        cluster.wait_for(lambda: "step 3" in log_text(cluster, f"{name}-worker-0"), 120, what="training under way")
        before = {p["metadata"]["name"]: p["metadata"]["uid"] for p in cluster.pods(name)}
        assert len(before) == 4 and progress_children(cluster_plane, name) == []
        cluster.update_job(name, lambda job: job["spec"]["runPolicy"].update(progress={}))
        children = cluster.wait_for(lambda: len(found := progress_children(cluster_plane, name)) == 4 and found,
                                    60, what="the progress children")
        during = {p["metadata"]["name"]: (p["metadata"]["uid"], (p.get("status") or {}).get("phase"))
                  for p in cluster.pods(name)}
        steps_then = log_text(cluster, f"{name}-worker-0").count("step ")
        done = cluster.wait_finished(name, timeout=180)
        steps_after = log_text(cluster, f"{name}-worker-0").count("step ")

    assert sorted(children) == sorted([f"configmap/{name}-progress", f"serviceaccount/{name}-progress",
                                       f"role.rbac.authorization.k8s.io/{name}-progress",
                                       f"rolebinding.rbac.authorization.k8s.io/{name}-progress"]), children
    assert {pod: uid for pod, (uid, _) in during.items()} == before, "no pod was replaced"
    assert {phase for _, phase in during.values()} == {"Running"}, during
    assert steps_after > steps_then, "training went on"
    assert finished(done) == "Succeeded", done["status"]
    # Its pods were created before progress was asked, without the env: they report nothing.
    assert "progress" not in done["status"]


def test_a_job_that_asks_for_nothing_gets_no_progress_children_and_the_helper_does_nothing(
        tmp_path: Path, cluster_plane: ControlPlane):
    script = ("import sys; sys.path.insert(0, 'reporter'); import mxjob_progress, os\n"
              "print('reported', mxjob_progress.report(1, total=1), flush=True)\n"
              "print('token', os.path.exists(os.environ['MXJOB_PROGRESS_TOKEN_FILE']), flush=True)\n"
              "print('api', os.environ['KUBERNETES_SERVICE_HOST'], flush=True)\n")
    job = {"apiVersion": "kubeflow.org/v1", "kind": "MXJob", "metadata": {"name": "plain", "namespace": "default"},
           "spec": {"runPolicy": {}, "mxReplicaSpecs": {"Worker": {"replicas": 1, "restartPolicy": "Never", "template": {
               "spec": {"containers": [{"name": "mxnet", "image": "python:3.12", "command": ["python", "-u", "-c", script]}]}}}}}}
    with LocalCluster(tmp_path / "state", control_plane=cluster_plane) as cluster:
        cluster.submit(copy.deepcopy(job))
        done = cluster.wait_finished("plain", timeout=90)
        text = cluster.log_path("plain-worker-0").read_text()
        children = progress_children(cluster_plane, "plain")

    assert finished(done) == "Succeeded", done["status"]
    assert children == []
    assert "progress" not in done["status"]
    assert "reported False" in text and "token True" in text and "api 127.0.0.1" in text, text




def test_a_pod_that_opts_out_of_the_token_gets_the_api_server_env_but_no_token(tmp_path: Path, cluster_plane: ControlPlane):
    script = ("import glob, os\n"
              "print('token-env', os.environ.get('MXJOB_PROGRESS_TOKEN_FILE'), flush=True)\n"
              "print('tokens', glob.glob(os.environ['LOCAL_PODS'] + '/**/token', recursive=True), flush=True)\n"
              "print('api', os.environ['KUBERNETES_SERVICE_HOST'], flush=True)\n")
    with LocalCluster(tmp_path / "state", control_plane=cluster_plane) as cluster:
        container = {"name": "mxnet", "image": "python:3.12", "command": ["python", "-u", "-c", script],
                     "env": [{"name": "LOCAL_PODS", "value": str(cluster.kubelet.pods_dir / "default" / "optout-worker-0")}]}
        cluster.submit({"apiVersion": "kubeflow.org/v1", "kind": "MXJob", "metadata": {"name": "optout", "namespace": "default"},
                        "spec": {"runPolicy": {}, "mxReplicaSpecs": {"Worker": {"replicas": 1, "restartPolicy": "Never", "template": {
                            "spec": {"automountServiceAccountToken": False, "containers": [container]}}}}}})
        done = cluster.wait_finished("optout", timeout=90)
        text = log_text(cluster, "optout-worker-0")

    assert finished(done) == "Succeeded", done["status"]
    assert "token-env None" in text and "tokens []" in text and "api 127.0.0.1" in text, text
