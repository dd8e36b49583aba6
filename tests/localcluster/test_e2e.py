"""End-to-end tests on the local cluster: real processes, the real hooks server, and real MXNet where marked."""

from __future__ import annotations

import copy
import json
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml
from helpers import yamlio
from helpers.cluster import events_for, why_it_ended
from helpers.costs import audit_mark, delta, metacontroller_reads, record_cost
from helpers.engines import cluster_under

from localcluster.cluster import LocalCluster, condition, finished
from localcluster.controlplane.processes import ControlPlane
from localcluster.metacontroller import LAST_APPLIED

pytestmark = [pytest.mark.e2e, pytest.mark.apiserver]

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "local" / "dist-train-digits.yaml"


# --- helpers ---------------------------------------------------------------------------------------


def py(code: str) -> list[str]:
    """A container command running a small Python program."""
    return ["python", "-c", code]


def sleep_exit(seconds: float, code: int = 0) -> list[str]:
    return py(f"import time,sys; time.sleep({seconds}); sys.exit({code})")


def worker_job(name: str, commands: list[list[str]], *, restart: str = "Never", run_policy: dict | None = None) -> dict:
    """A Worker-only MXJob (the Workers decide success) whose worker i runs commands[i]."""
    # Every worker shares one template, so per-index commands dispatch on the replica index env.
    table = {str(i): cmd for i, cmd in enumerate(commands)}
    dispatch = (
        "import json,os,subprocess,sys; "
        f"t=json.loads({json.dumps(json.dumps(table))}); "
        "i=json.loads(os.environ['MX_CONFIG'])['task']['index']; "
        "os.execv(sys.executable, [sys.executable]+t[str(i)][1:])"
    )
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "MXJob",
        "metadata": {"name": name},
        "spec": {
            "jobMode": "MXTrain",
            "runPolicy": run_policy or {},
            "mxReplicaSpecs": {
                "Worker": {
                    "replicas": len(commands),
                    "restartPolicy": restart,
                    "template": {"spec": {
                        "terminationGracePeriodSeconds": 1,
                        "containers": [{"name": "mxnet", "image": "busybox:1.36", "command": py(dispatch)}],
                    }},
                }
            },
        },
    }


@pytest.fixture
def cluster(tmp_path: Path, cluster_plane: ControlPlane) -> Iterator[LocalCluster]:
    """A local cluster with the real hooks server behind a fault proxy; every process ends with the test."""
    with LocalCluster(tmp_path / "state", control_plane=cluster_plane, fault_proxy=True, restart_backoff=(0.2, 1.0)) as c:
        yield c


def uids(pods: list[dict]) -> dict[str, str]:
    return {p["metadata"]["name"]: p["metadata"]["uid"] for p in pods}


def wait_active(cluster: LocalCluster, name: str, active: int) -> dict:
    """Wait until the job's status counts `active` running Workers (the hook has seen them run)."""
    return cluster.wait_for(
        lambda: (job := cluster.get_job(name))
        and job.get("status", {}).get("replicaStatuses", {}).get("Worker", {}).get("active") == active and job,
        20, what=f"{active} active workers in status",
    )


def phase_of(cluster: LocalCluster, pod: str) -> str | None:
    obj = cluster.pod(pod)
    return obj.get("status", {}).get("phase") if obj else None


# --- the real MXNet example -------------------------------------------------------------------------


@pytest.mark.mxnet
def test_digits_example_trains_distributed_and_succeeds(tmp_path: Path, cluster_plane: ControlPlane, metacontroller: str):
    job = yamlio.load(EXAMPLE.read_text())
    with cluster_under(tmp_path / "state", metacontroller, control_plane=cluster_plane) as cluster:
        cluster.submit(job)
        done = cluster.wait_finished("dist-train-digits", timeout=150)
        assert finished(done) == "Succeeded", why_it_ended(cluster, done)
        # The Scheduler decides success at ps-lite's last barrier; the workers exit a moment later (tens
        # of seconds for MXNet's teardown on a machine busy with other work).
        cluster.wait_for(
            lambda: all(p["status"].get("phase") == "Succeeded" for p in cluster.pods("dist-train-digits")), 90, what="every pod Succeeded"
        )
        pods = {p["metadata"]["name"]: p for p in cluster.pods("dist-train-digits")}
        logs = {name: cluster.log_path(name).read_text() for name in pods}

    assert finished(done) == "Succeeded"
    assert [c["type"] for c in done["status"]["conditions"]] == ["Created", "Running", "Succeeded"]
    assert condition(done, "Running")["status"] == "False" and done["status"]["completionTime"]
    assert set(pods) == {f"dist-train-digits-{t}" for t in ("scheduler-0", "server-0", "worker-0", "worker-1")}
    assert all(p["status"]["phase"] == "Succeeded" for p in pods.values())
    # The rendezvous happened through the env the hook generated (rewritten to loopback).
    scheduler = logs["dist-train-digits-scheduler-0"]
    assert "the scheduler is connected to 2 workers and 1 servers" in scheduler
    assert "[scheduler] starting ps-lite scheduler" in scheduler and "scheduler exiting" in scheduler
    assert "[server] starting ps-lite server" in logs["dist-train-digits-server-0"]
    for worker in ("worker-0", "worker-1"):
        text = logs[f"dist-train-digits-{worker}"]
        assert "joined kvstore dist_sync with 2 worker(s)" in text
        assert len(re.findall(r"epoch \d+/10 .*validation-accuracy", text)) == 10
        final = float(re.search(r"final validation-accuracy=([0-9.]+)", text).group(1))
        assert final >= 0.9


@pytest.mark.mxnet
@pytest.mark.apiserver
def test_make_run_ends_with_the_trained_models_accuracy(tmp_path: Path):
    """`make run` is `localcluster run` on the example: its last lines say what the model achieved."""
    result = subprocess.run([sys.executable, "-m", "localcluster", "--state-dir", str(tmp_path / "state"), "run", str(EXAMPLE)],
                            cwd=REPO, capture_output=True, text=True, timeout=400)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    *_, first, second, last = result.stdout.strip().splitlines()
    assert last == "MXJob default/dist-train-digits Succeeded"
    for line, worker in ((first, 0), (second, 1)):
        # ps-lite ranks the workers in the order they join, not by pod name.
        found = re.fullmatch(rf"result: dist-train-digits-worker-{worker}: \[worker [01]\] final validation-accuracy=(0\.\d+)", line)
        assert found is not None and float(found.group(1)) >= 0.9, line


@pytest.mark.mxnet
def test_two_mxnet_jobs_run_at_once_without_interfering(tmp_path: Path, cluster_plane: ControlPlane):
    base = yamlio.load(EXAMPLE.read_text())
    with LocalCluster(tmp_path / "state", control_plane=cluster_plane) as cluster:
        for name in ("digits-a", "digits-b"):
            job = copy.deepcopy(base)
            job["metadata"]["name"] = name
            cluster.submit(job)
        results = [cluster.wait_finished(name, timeout=200) for name in ("digits-a", "digits-b")]
        ports = {key[1]: port for key, port in cluster.dns.port_table().items()}
        logs = {name: cluster.log_path(f"{name}-scheduler-0").read_text() for name in ("digits-a", "digits-b")}
    assert [finished(job) for job in results] == ["Succeeded", "Succeeded"]
    assert ports["digits-a-scheduler-0"] != ports["digits-b-scheduler-0"]
    for name in ("digits-a", "digits-b"):
        assert "the scheduler is connected to 2 workers and 1 servers" in logs[name]
        assert f"port={ports[f'{name}-scheduler-0']}" in logs[name]


# --- fault scenarios with small scripts ---------------------------------------------------------------


def test_each_process_sees_the_cluster_map_from_the_config_map_expanded_into_mx_config(cluster: LocalCluster):
    show = py("import os; print('MX_CONFIG=' + os.environ['MX_CONFIG']); print('MXJOB_CLUSTER=' + os.environ['MXJOB_CLUSTER'])")
    cluster.submit(worker_job("wired", [show, show]))
    done = cluster.wait_finished("wired", timeout=30)
    assert finished(done) == "Succeeded"
    stored = cluster.store.get("v1", "ConfigMap", "default", "wired-cluster")
    assert stored["immutable"] is True and json.loads(stored["data"]["cluster"]) == {
        "worker": [{"port": 9091, "url": "wired-worker-0"}, {"port": 9091, "url": "wired-worker-1"}]}
    for index in (0, 1):
        lines = dict(line.split("=", 1) for line in cluster.log_path(f"wired-worker-{index}").read_text().splitlines()
                     if line.startswith(("MX_CONFIG=", "MXJOB_CLUSTER=")))
        config = json.loads(lines["MX_CONFIG"])
        # Expanded by the kubelet from the ConfigMap; the names stay and resolve through the pod's hosts
        # file (strict DNS), or are pointed at loopback where strict names cannot run. Ports are mapped in both.
        assert config["cluster"] == json.loads(lines["MXJOB_CLUSTER"])
        hosts = ["wired-worker-0", "wired-worker-1"] if cluster.dns.strict else ["127.0.0.1", "127.0.0.1"]
        assert [entry["url"] for entry in config["cluster"]["worker"]] == hosts
        assert [entry["port"] for entry in config["cluster"]["worker"]] == [
            cluster.dns.local_port("default", f"wired-worker-{i}", 9091) for i in (0, 1)]
        assert config["task"] == {"index": index, "type": "worker"} and config["labels"] == {"worker": ""}


def test_permanent_failure_fails_the_job_and_cleans_running_pods(cluster: LocalCluster):
    cluster.submit(worker_job("perm", [sleep_exit(0.5, 1), sleep_exit(60)], run_policy={"cleanPodPolicy": "Running"}))
    cluster.wait_for(lambda: phase_of(cluster, "perm-worker-1") == "Running", 20, what="worker-1 running")
    done = cluster.wait_finished("perm", timeout=30)
    assert finished(done) == "Failed"
    assert condition(done, "Failed")["message"] == (
        "MXJob default/perm failed: Worker 0 (pod perm-worker-0) failed with exit code 1, reason Error; restartPolicy Never "
        "does not retry.")
    # cleanPodPolicy Running: the running pod is terminated and removed, the failed one kept for its logs.
    cluster.wait_for(lambda: cluster.pod("perm-worker-1") is None, 10, what="running pod removed")
    assert phase_of(cluster, "perm-worker-0") == "Failed"
    assert cluster.pod("perm-worker-0")["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 1


def test_retryable_exit_under_exitcode_recreates_the_pod_and_succeeds(cluster: LocalCluster):
    cluster.submit(worker_job("retry", [sleep_exit(1.5)], restart="ExitCode", run_policy={"backoffLimit": 3}))
    cluster.wait_for(lambda: phase_of(cluster, "retry-worker-0") == "Running", 20, what="worker running")
    first_uid = cluster.pod("retry-worker-0")["metadata"]["uid"]
    cluster.kubelet.kill("default", "retry-worker-0", sig=signal.SIGKILL)  # exit 137: retryable
    recreated = cluster.wait_for(
        lambda: (p := cluster.pod("retry-worker-0")) and p["metadata"]["uid"] != first_uid and p, 20, what="pod recreated"
    )
    assert recreated["metadata"]["uid"] != first_uid
    done = cluster.wait_finished("retry", timeout=30)
    assert finished(done) == "Succeeded"
    assert condition(done, "Restarting") is not None  # the restart was reported on the way
    assert "exited with code 137" in cluster.log_path("retry-worker-0").read_text()


def test_active_deadline_fires_on_time_with_no_other_event(cluster: LocalCluster):
    cluster.submit(worker_job("deadline", [sleep_exit(60)], run_policy={"activeDeadlineSeconds": 2}))
    cluster.wait_for(lambda: phase_of(cluster, "deadline-worker-0") == "Running", 20, what="worker running")
    started = time.monotonic()
    done = cluster.wait_finished("deadline", timeout=15)
    elapsed = time.monotonic() - started
    assert finished(done) == "Failed"
    assert "deadline" in condition(done, "Failed")["message"].lower()
    assert elapsed < 4.5  # 2 s from startTime (whole seconds), not the 300 s resync period
    cluster.wait_for(lambda: cluster.pod("deadline-worker-0") is None, 10, what="running pod cleaned up")


def test_suspend_removes_pods_and_resume_runs_to_success(tmp_path: Path, metacontroller: str):
    # A control plane of its own, its reads audited: the scenario's cost is recorded (helpers/costs.py).
    with cluster_under(tmp_path / "state", metacontroller, restart_backoff=(0.2, 1.0), audit_reads=True) as cluster:
        assert cluster.control_plane is not None
        before, mark = cluster.control_plane.request_counts(), audit_mark(cluster)
        suspend_and_resume(cluster)
        record_cost("MXJob (2 workers) suspended, resumed, run to success",
                    delta(cluster.control_plane.request_counts(), before), cluster.engine, metacontroller_reads(cluster, mark))


def suspend_and_resume(cluster: LocalCluster) -> None:
    cluster.submit(worker_job("susp", [sleep_exit(1.0), sleep_exit(1.0)]))
    cluster.wait_for(lambda: len(cluster.pods("susp")) == 2, 20, what="pods created")
    cluster.update_job("susp", lambda job: job["spec"]["runPolicy"].__setitem__("suspend", True))
    cluster.wait_for(lambda: not cluster.pods("susp") and not cluster.children_of("susp", "v1", "Service"), 15,
                     what="pods and services gone")
    # Metacontroller writes the status after the children, one write at a time.
    job = cluster.wait_for(lambda: (j := cluster.get_job("susp")) and condition(j, "Suspended") and j, 10, what="Suspended")
    assert condition(job, "Suspended")["status"] == "True" and not finished(job)
    # The suspension's record keeps the condition's time, as no pod or Service is left to.
    record = cluster.wait_for(lambda: config_maps(cluster, "susp").get("susp-suspension"), 10, what="the suspension record")
    assert json.loads(record["data"]["record"]) == {"suspendedAt": condition(job, "Suspended")["lastTransitionTime"]}
    time.sleep(1.5)  # stays suspended: nothing comes back by itself
    assert not cluster.pods("susp")
    cluster.update_job("susp", lambda job: job["spec"]["runPolicy"].__setitem__("suspend", False))
    cluster.wait_for(lambda: "susp-suspension" not in config_maps(cluster, "susp"), 15,
                     what="the suspension record gone on resume")
    done = cluster.wait_finished("susp", timeout=30)
    assert finished(done) == "Succeeded"
    assert condition(done, "Suspended")["status"] == "False"
    assert condition(done, "Suspended")["reason"] == "MXJobResumed"


def config_maps(cluster: LocalCluster, job: str) -> dict[str, Any]:
    return {c["metadata"]["name"]: c for c in cluster.children_of(job, "v1", "ConfigMap")}


def test_a_deleted_pod_is_recreated(cluster: LocalCluster):
    cluster.submit(worker_job("del", [sleep_exit(2.0), sleep_exit(2.0)], restart="ExitCode"))
    cluster.wait_for(lambda: phase_of(cluster, "del-worker-1") == "Running", 20, what="worker-1 running")
    old = cluster.pod("del-worker-1")["metadata"]["uid"]
    cluster.delete_pod("del-worker-1")
    cluster.wait_for(lambda: (p := cluster.pod("del-worker-1")) and p["metadata"]["uid"] != old, 20, what="pod recreated")
    done = cluster.wait_finished("del", timeout=30)
    assert finished(done) == "Succeeded"


def test_an_evicted_pod_under_onfailure_is_recreated(cluster: LocalCluster):
    cluster.submit(worker_job("evict", [sleep_exit(2.0)], restart="OnFailure"))
    cluster.wait_for(lambda: phase_of(cluster, "evict-worker-0") == "Running", 20, what="worker running")
    old = cluster.pod("evict-worker-0")["metadata"]["uid"]
    cluster.kubelet.evict("default", "evict-worker-0")
    cluster.wait_for(lambda: (p := cluster.pod("evict-worker-0")) and p["metadata"]["uid"] != old, 20, what="evicted pod replaced")
    done = cluster.wait_finished("evict", timeout=30)
    assert finished(done) == "Succeeded"


def test_hooks_answering_500_for_a_while_delete_nothing_and_the_job_recovers(cluster: LocalCluster):
    cluster.submit(worker_job("flaky", [sleep_exit(3.0), sleep_exit(3.0)]))
    cluster.wait_for(lambda: all(phase_of(cluster, f"flaky-worker-{i}") == "Running" for i in (0, 1)), 20, what="workers running")
    before = uids(cluster.pods("flaky"))
    status_before = wait_active(cluster, "flaky", 2)["status"]
    cluster.proxy.fail_for(1.5)
    cluster.kubelet.kill("default", "flaky-worker-0", sig=signal.SIGTERM)  # a pod change while the hook is down
    time.sleep(1.0)
    assert uids(cluster.pods("flaky")) == before  # nothing deleted while the hook fails
    assert cluster.get_job("flaky")["status"] == status_before  # nor was the status touched
    assert cluster.proxy.failed_requests >= 1
    events = [e.reason for e in events_for(cluster.controllers["MXJob"], "flaky")]
    assert "SyncError" in events
    done = cluster.wait_finished("flaky", timeout=30)
    # worker-0 exited 143 under restartPolicy Never: once the hook is back the job sees it and fails.
    assert finished(done) == "Failed"
    assert "143" in condition(done, "Failed")["message"]


def test_hooks_500_then_recovery_reaches_success(cluster: LocalCluster):
    cluster.submit(worker_job("blip", [sleep_exit(2.0)]))
    cluster.wait_for(lambda: phase_of(cluster, "blip-worker-0") == "Running", 20, what="worker running")
    before = uids(cluster.pods("blip"))
    cluster.proxy.fail_for(3.0)
    time.sleep(2.5)  # the worker finishes while every sync fails
    assert uids(cluster.pods("blip")) == before
    assert not finished(cluster.get_job("blip"))
    done = cluster.wait_finished("blip", timeout=30)
    assert finished(done) == "Succeeded"


def test_restarting_the_hooks_server_mid_job_changes_nothing(cluster: LocalCluster):
    # Long enough that the job still runs after a hooks server restart on a busy machine.
    cluster.submit(worker_job("restart", [sleep_exit(8.0), sleep_exit(8.0)]))
    cluster.wait_for(lambda: all(phase_of(cluster, f"restart-worker-{i}") == "Running" for i in (0, 1)), 20, what="workers running")
    before = uids(cluster.pods("restart"))
    status_before = wait_active(cluster, "restart", 2)["status"]
    cluster.restart_hooks()
    assert uids(cluster.pods("restart")) == before
    cluster.controllers["MXJob"].enqueue(cluster.get_job("restart")["metadata"]["uid"])  # a sync against the new server
    time.sleep(0.5)
    assert uids(cluster.pods("restart")) == before
    assert cluster.get_job("restart")["status"]["conditions"] == status_before["conditions"]
    done = cluster.wait_finished("restart", timeout=30)
    assert finished(done) == "Succeeded"
    assert uids([p for p in cluster.pods("restart")]) == before  # the same pods ran to the end


# --- fidelity of the stand-in, with a fake hook --------------------------------------------------------


class FakeHook:
    """A loopback sync hook whose answer a test supplies: `answer(request) -> (status, body)`; it answers
    customize requests (no `children`) with no related objects, as the real hooks do for a job without Kueue."""

    def __init__(self, answer: Callable[[dict], tuple[int, Any]]):
        self.answer = answer
        self.requests: list[dict] = []
        self.customize_requests: list[dict] = []
        hook = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if "children" in request:
                    hook.requests.append(request)
                    code, body = hook.answer(request)
                else:  # the MXJob controller's customize hook, asked first: nothing related
                    hook.customize_requests.append(request)
                    code, body = 200, {"relatedResources": []}
                payload = body if isinstance(body, bytes) else json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def fake(tmp_path: Path, cluster_plane: ControlPlane) -> Iterator[Callable[[Callable[[dict], tuple[int, Any]]], LocalCluster]]:
    """Factory: a local cluster whose stand-in calls a FakeHook; all torn down after the test."""
    opened: list[tuple[LocalCluster, FakeHook]] = []

    def make(answer: Callable[[dict], tuple[int, Any]]) -> LocalCluster:
        hook = FakeHook(answer)
        cluster = LocalCluster(tmp_path / "state", control_plane=cluster_plane, hook_url=hook.url, hot_loop_syncs=25)
        opened.append((cluster, hook))
        cluster.hook = hook  # type: ignore[attr-defined]
        return cluster.start()

    yield make
    for cluster, hook in opened:
        cluster.stop()
        hook.close()


def parent_job(name: str = "fake") -> dict:
    """A valid MXJob (the fake hook ignores its spec). The fake hook's status uses fields the CRD
    declares (restartCount, specError): the server prunes any other."""
    worker = {"replicas": 1, "template": {"spec": {"containers": [{"name": "mxnet", "image": "x", "command": ["true"]}]}}}
    return {"apiVersion": "kubeflow.org/v1", "kind": "MXJob", "metadata": {"name": name}, "spec": {"mxReplicaSpecs": {"Worker": worker}}}


def sleeper_pod(name: str, labels: dict | None = None) -> dict:
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": labels or {"app": "fake"}},
        "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 1,
                 "containers": [{"name": "main", "image": "x", "command": sleep_exit(30)}]},
    }


def test_requests_have_metacontrollers_shape_and_children_carry_its_marks(fake):
    cluster = fake(lambda req: (200, {"status": {"restartCount": len(req["children"]["Pod.v1"])}, "children": [sleeper_pod("p")]}))
    job = cluster.submit(parent_job())
    uid = job["metadata"]["uid"]
    cluster.wait_for(lambda: phase_of(cluster, "p") == "Running", 20, what="pod running")
    cluster.wait_for(lambda: cluster.get_job("fake")["status"].get("restartCount") == 1, 10, what="status from a sync that saw the pod")
    # The sync the pod's Running status triggers may still be queued behind the throttle on a busy machine.
    request = cluster.wait_for(lambda: next((r for r in reversed(cluster.hook.requests)
                                             if r["children"]["Pod.v1"].get("p", {}).get("status", {}).get("phase") == "Running"), None),
                               20, what="a request that saw the pod Running")
    assert set(request) == {"controller", "parent", "children", "related", "finalizing"}
    assert request["related"] == {} and request["finalizing"] is False
    assert request["controller"]["kind"] == "CompositeController"
    # One entry per child rule of the shipped controller, even when empty (progress reporting's three included).
    rules = {"Pod.v1", "Service.v1", "ConfigMap.v1", "ServiceAccount.v1", "Role.rbac.authorization.k8s.io/v1",
             "RoleBinding.rbac.authorization.k8s.io/v1"}
    assert set(request["children"]) == rules
    assert all(request["children"][key] == {} for key in rules - {"Pod.v1"})
    assert request["parent"]["metadata"]["uid"] == uid
    pod = request["children"]["Pod.v1"]["p"]
    assert pod["metadata"]["labels"]["controller-uid"] == uid
    assert pod["metadata"]["ownerReferences"] == [
        {"apiVersion": "kubeflow.org/v1", "kind": "MXJob", "name": "fake", "uid": uid, "controller": True, "blockOwnerDeletion": True}
    ]
    applied = json.loads(pod["metadata"]["annotations"][LAST_APPLIED])
    expected = sleeper_pod("p")
    expected["metadata"]["labels"]["controller-uid"] = uid
    expected["metadata"]["namespace"] = "default"
    assert applied == expected
    assert pod["metadata"]["creationTimestamp"] and pod["metadata"]["uid"]  # a stored object, as the server returns it
    assert cluster.get_job("fake")["status"] == {"restartCount": 1, "observedGeneration": 1}


def test_an_empty_200_answer_deletes_every_child_and_wipes_status(fake):
    answers = {"mode": "full"}

    def answer(req: dict) -> tuple[int, Any]:
        if answers["mode"] == "full":
            return 200, {"status": {"specError": "busy"}, "children": [sleeper_pod("a"), sleeper_pod("b")]}
        return 200, {}

    cluster = fake(answer)
    cluster.submit(parent_job())
    cluster.wait_for(lambda: phase_of(cluster, "a") == "Running" and phase_of(cluster, "b") == "Running", 20, what="pods running")
    answers["mode"] = "empty"
    cluster.controllers["MXJob"].enqueue(cluster.get_job("fake")["metadata"]["uid"])
    cluster.wait_for(lambda: cluster.pod("a") is None and cluster.pod("b") is None, 15, what="every child deleted")
    # The status comes after the children, each write at Metacontroller's client pace.
    cluster.wait_for(lambda: cluster.get_job("fake")["status"] == {"observedGeneration": 1}, 5, what="status wiped")


def test_a_500_or_malformed_answer_changes_nothing(fake):
    answers = {"mode": "full"}

    def answer(req: dict) -> tuple[int, Any]:
        if answers["mode"] == "full":
            return 200, {"status": {"specError": "ok"}, "children": [sleeper_pod("a")]}
        return (500, {"error": "boom"}) if answers["mode"] == "500" else (200, b"not json")

    cluster = fake(answer)
    job = cluster.submit(parent_job())
    cluster.wait_for(lambda: phase_of(cluster, "a") == "Running", 20, what="pod running")
    for mode in ("500", "garbage"):
        answers["mode"] = mode
        calls = len(cluster.hook.requests)
        cluster.controllers["MXJob"].enqueue(job["metadata"]["uid"])
        cluster.wait_for(lambda calls=calls: len(cluster.hook.requests) >= calls + 3, 10, what="retries with backoff")
        assert cluster.pod("a")["metadata"].get("deletionTimestamp") is None
        assert cluster.get_job("fake")["status"] == {"specError": "ok", "observedGeneration": 1}
        assert cluster.controllers["MXJob"].last_error(job["metadata"]["uid"])


def test_a_status_that_changes_on_every_sync_is_caught_as_a_hot_loop(fake):
    counter = {"n": 0}

    def answer(req: dict) -> tuple[int, Any]:
        counter["n"] += 1
        return 200, {"status": {"restartCount": counter["n"]}, "children": []}

    cluster = fake(answer)
    job = cluster.submit(parent_job())
    uid = job["metadata"]["uid"]
    report = cluster.wait_for(lambda: cluster.controllers["MXJob"].hot_loop(uid), 10, what="hot loop report")
    assert "hot loop" in report
    calls = len(cluster.hook.requests)
    time.sleep(0.5)
    assert len(cluster.hook.requests) == calls  # reported, and no longer spinning
    with pytest.raises(RuntimeError, match="hot loop"):
        cluster.wait_finished("fake", timeout=1)


def test_a_fixed_point_hook_settles_and_is_not_a_hot_loop(fake):
    cluster = fake(lambda req: (200, {"status": {"restartCount": len(req["children"]["Pod.v1"])}, "children": [sleeper_pod("a")]}))
    job = cluster.submit(parent_job())
    cluster.wait_for(lambda: phase_of(cluster, "a") == "Running", 20, what="pod running")
    time.sleep(0.5)
    calls = len(cluster.hook.requests)
    time.sleep(1.0)
    assert len(cluster.hook.requests) == calls  # settled: no event, no sync
    assert cluster.controllers["MXJob"].hot_loop(job["metadata"]["uid"]) is None


def test_a_child_whose_labels_do_not_match_the_selector_fails_the_sync(fake):
    stray = sleeper_pod("stray", {"controller-uid": "someone-else"})
    cluster = fake(lambda req: (200, {"status": {"restartCount": 1}, "children": [stray]}))
    job = cluster.submit(parent_job())
    uid = job["metadata"]["uid"]
    error = cluster.wait_for(lambda: cluster.controllers["MXJob"].last_error(uid), 10, what="sync error")
    assert "do not match" in error and "selector" in error
    time.sleep(0.3)
    assert cluster.pod("stray") is None
    assert "status" not in cluster.get_job("fake") or cluster.get_job("fake")["status"] == {}  # no status write either
    assert "SyncError" in [e.reason for e in events_for(cluster.controllers["MXJob"], "fake")]


def test_services_update_in_place_without_looping_on_server_defaults(fake):
    port = {"n": 80}

    def answer(req: dict) -> tuple[int, Any]:
        svc = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"},
               "spec": {"clusterIP": "None", "ports": [{"name": "p", "port": port["n"]}]}}
        return 200, {"status": {}, "children": [svc]}

    cluster = fake(answer)
    job = cluster.submit(parent_job())
    svc = cluster.wait_for(lambda: cluster.store.get("v1", "Service", "default", "s"), 10, what="service")
    assert svc["spec"]["ports"][0]["protocol"] == "TCP"  # server default kept by the merge
    version = svc["metadata"]["resourceVersion"]
    time.sleep(0.5)
    assert cluster.store.get("v1", "Service", "default", "s")["metadata"]["resourceVersion"] == version
    port["n"] = 81
    cluster.controllers["MXJob"].enqueue(job["metadata"]["uid"])
    updated = cluster.wait_for(
        lambda: (s := cluster.store.get("v1", "Service", "default", "s")) and s["spec"]["ports"][0]["port"] == 81 and s,
        10, what="in-place update"
    )
    assert updated["metadata"]["uid"] == svc["metadata"]["uid"] and updated["spec"]["ports"][0]["protocol"] == "TCP"


# --- the CLI ---------------------------------------------------------------------------------------


def run_cli(tmp_path: Path, job: dict, *extra: str, timeout: float = 150) -> subprocess.CompletedProcess:
    # `timeout` only guards against a hang: the run's own --timeout bounds the job, and on a busy machine
    # the control plane's start alone took tens of seconds.
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    return subprocess.run(
        [sys.executable, "-m", "localcluster", "--state-dir", str(tmp_path / "state"), "run", str(path), *extra],
        cwd=REPO, capture_output=True, text=True, timeout=timeout,
    )


def test_cli_exits_non_zero_with_the_failure_reason(tmp_path: Path):
    result = run_cli(tmp_path, worker_job("clifail", [sleep_exit(0.2, 2)]), "--timeout", "40")
    assert result.returncode == 1, result.stdout + result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last == ("MXJob default/clifail Failed: MXJobFailed: MXJob default/clifail failed: Worker 0 (pod "
                    "clifail-worker-0) failed with exit code 2, reason Error; restartPolicy Never does not retry.")
    assert "--- " in result.stdout  # non-tty: progress lines, not redraws
    # The end of the failing pod's log is shown under the final status.
    assert "last lines of " in result.stdout and "clifail-worker-0.log" in result.stdout
    logs = subprocess.run([sys.executable, "-m", "localcluster", "--state-dir", str(tmp_path / "state"),
                           "logs", "clifail", "clifail-worker-0"],
                          cwd=REPO, capture_output=True, text=True, timeout=20)
    assert logs.returncode == 0 and "exited with code 2" in logs.stdout


def test_cli_reports_an_invalid_spec(tmp_path: Path):
    job = worker_job("clibad", [sleep_exit(0)])
    job["spec"]["mxReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["name"] = "not-mxnet"
    result = run_cli(tmp_path, job, "--timeout", "40")
    assert result.returncode == 2, result.stdout + result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("MXJob default/clibad has an invalid spec:") and last.count("invalid spec") == 1


def test_cli_times_out(tmp_path: Path):
    result = run_cli(tmp_path, worker_job("cliwait", [sleep_exit(30)]), "--timeout", "3")
    assert result.returncode == 3, result.stdout + result.stderr
    assert "timed out after 3s" in result.stderr.strip().splitlines()[-1]


def test_a_pod_waits_for_its_config_map_as_the_kubelet_does(fake):
    pod = sleeper_pod("p")
    pod["spec"]["containers"][0]["env"] = [
        {"name": "FROM_MAP", "valueFrom": {"configMapKeyRef": {"name": "late", "key": "k"}}}]
    cluster = fake(lambda req: (200, {"status": {}, "children": [pod]}))
    cluster.submit(parent_job())

    def waiting_reason() -> str | None:
        found = cluster.pod("p")
        statuses = (found or {}).get("status", {}).get("containerStatuses") or [{}]
        return statuses[0].get("state", {}).get("waiting", {}).get("reason")

    cluster.wait_for(lambda: waiting_reason() == "CreateContainerConfigError", 20, what="container waiting for its ConfigMap")
    assert phase_of(cluster, "p") == "Pending"
    cluster.store.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "late", "namespace": "default"},
                          "data": {"k": "v"}})
    cluster.wait_for(lambda: phase_of(cluster, "p") == "Running", 20, what="pod running once its ConfigMap exists")
