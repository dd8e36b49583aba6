"""ChainerJob end to end on the local cluster: the real hooks server's children run unchanged (apart
from images), real ChainerMN over real OpenMPI through the operator's rsh agent and `kubectl exec`."""

from __future__ import annotations

import copy
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from helpers import yamlio
from helpers.engines import cluster_under, syncs

from localcluster.cluster import LocalCluster, condition, finished
from localcluster.controlplane.processes import ControlPlane
from localcluster.node import proctrack
from localcluster.store import StoreError

pytestmark = [pytest.mark.e2e, pytest.mark.apiserver]

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "local" / "chainer-mn-digits.yaml"
ACCURACY = re.compile(r"final test accuracy (\d\.\d+) over 3 ranks")


def example(name: str) -> dict:
    job = yamlio.load(EXAMPLE.read_text())
    job["metadata"]["name"] = name
    return job


def master_logs(cluster: LocalCluster, name: str) -> str:
    return "".join(p.read_text() for p in sorted(cluster.job_dir(name).glob(f"{name}-master-?????.log")))


def worker_sets(cluster: LocalCluster, name: str) -> list[dict]:
    return cluster.children_of(name, "apps/v1", "StatefulSet")


@pytest.fixture
def cluster(tmp_path: Path, cluster_plane: ControlPlane) -> Iterator[LocalCluster]:
    with LocalCluster(tmp_path / "state", control_plane=cluster_plane) as c:
        yield c


@pytest.mark.chainer
def test_the_example_completes_through_the_cli_with_accuracy_above_0_9(tmp_path: Path, metacontroller: str):
    state = tmp_path / "state"
    result = subprocess.run([sys.executable, "-m", "localcluster", "--state-dir", str(state), "run", str(EXAMPLE), "--timeout", "300",
                             "--metacontroller", metacontroller], cwd=REPO, capture_output=True, text=True, timeout=360)
    assert result.returncode == 0, result.stdout[-3000:]
    assert result.stdout.strip().splitlines()[-1] == "ChainerJob default/chainer-mn-digits Complete"
    # The line before says what the model achieved, from the master's log.
    assert re.fullmatch(r"result: chainer-mn-digits-master-\S+: final test accuracy 0\.\d+ over 3 ranks.*",
                        result.stdout.strip().splitlines()[-2]), result.stdout[-1000:]
    logs = "".join(p.read_text() for p in (state / "default" / "chainer-mn-digits").glob("chainer-mn-digits-master-*.log"))
    accuracy = ACCURACY.search(logs)
    assert accuracy is not None, logs[-2000:]
    assert float(accuracy.group(1)) >= 0.9
    # The three ranks ran in three pods: the two workers through kubectl exec, then the master.
    assert "succeeded: 1" in result.stdout and "replicas: 0" in result.stdout
    # The example asks for progress: rank 0, in the first worker's pod, reported with that pod's token
    # (docs/progress.md, "ChainerJob"); its last report, the final step, is written at once.
    assert re.search(r"progress: step (\d+)/\1 100% \(reporter rank-0, attempt 0", result.stdout), result.stdout[-3000:]


@pytest.mark.chainer
@pytest.mark.parametrize(("backoff_limit", "outcome"), [(2, "Succeeded"), (0, "Failed")],
                         ids=["retried-within-backoffLimit-completes", "backoffLimit-0-fails"])
def test_a_worker_killed_mid_run_fails_the_master_which_the_job_retries(cluster, backoff_limit, outcome):
    job = example(f"kill-{backoff_limit}")
    name = job["metadata"]["name"]
    job["spec"]["master"]["backoffLimit"] = backoff_limit
    cluster.submit(job)
    cluster.wait_for(lambda: "epoch  1 " in master_logs(cluster, name), 180, what="training under way")
    cluster.kubelet.kill("default", f"{name}-workerset-ws0-1", sig=signal.SIGKILL)
    done = cluster.wait_finished(name, timeout=240)
    logs = master_logs(cluster, name)
    assert finished(done) == outcome, logs[-3000:]
    assert done["status"]["failed"] >= 1  # the first master pod failed with its mpiexec
    if outcome == "Succeeded":
        assert float(ACCURACY.search(logs).group(1)) >= 0.9  # type: ignore[union-attr]
    else:
        assert condition(done, "Failed")["reason"] == "BackoffLimitExceeded"  # type: ignore[index]
        assert len(cluster.children_of(name, "batch/v1", "Job")) == 1
    # Either way the master is done, so the workers are scaled to 0 and their pods go.
    cluster.wait_for(lambda: all(s["spec"]["replicas"] == 0 for s in worker_sets(cluster, name)), 30, what="workers at 0")
    cluster.wait_for(lambda: not [p for p in cluster.pods(name) if "workerset" in p["metadata"]["name"]], 30, what="worker pods gone")


def test_workers_that_never_become_ready_keep_the_master_from_being_created(cluster):
    job = example("never-ready")
    spec = copy.deepcopy(job["spec"])
    # A command that cannot start (StartError, as an image whose entrypoint is missing): never
    # Running, so never Ready, even for a moment (a command that exits at once would be Ready briefly).
    spec["workerSets"]["ws0"]["template"]["spec"]["containers"][0]["command"] = ["/nonexistent/worker"]
    job["spec"] = spec
    cluster.submit(job)
    cluster.wait_for(lambda: sum(cs.get("restartCount", 0) >= 2 for p in cluster.pods("never-ready")
                                 for cs in p.get("status", {}).get("containerStatuses", [])) == 2, 60, what="workers crash-looping")
    current = cluster.get_job("never-ready")
    assert current is not None and not finished(current)
    assert cluster.children_of("never-ready", "batch/v1", "Job") == []
    assert not [p for p in cluster.pods("never-ready") if "master" in p["metadata"]["name"]]
    waiting = condition(current, "Waiting")
    assert waiting is not None and waiting["status"] == "True", current["status"]
    assert waiting["message"] == (f"ChainerJob {current['metadata']['namespace']}/never-ready is waiting for its "
                                  "workers: 0 of 2 ready (ws0 0/2); the master starts when all are ready.")
    assert current["status"]["workerSets"]["ws0"]["readyReplicas"] == 0


def test_kubectl_exec_runs_in_the_target_pods_environment_with_stdin_and_its_exit_code(cluster):
    target = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "target"}, "spec": {
        "hostname": "target-host", "terminationGracePeriodSeconds": 1,
        "volumes": [{"name": "data", "emptyDir": {}}],
        "containers": [{"name": "main", "image": "i", "command": ["sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1 & wait; done"],
                        "env": [{"name": "FOO", "value": "from-target"}],
                        "volumeMounts": [{"name": "data", "mountPath": "/data"}]}]}}
    script = ("echo piped | kubectl exec -i target -c main -- sh -c 'cat > /data/in; echo $FOO $HOSTNAME $(hostname); exit 3'; "
              "echo exit=$?; kubectl exec -i absent -- true; echo absent=$?")
    caller = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "caller"}, "spec": {
        "restartPolicy": "Never", "containers": [{"name": "main", "image": "i", "command": ["sh", "-c", script]}]}}
    cluster.store.create(target)
    cluster.wait_for(lambda: (cluster.pod("target") or {}).get("status", {}).get("phase") == "Running", 20, what="target running")
    cluster.store.create(caller)
    cluster.wait_for(lambda: (cluster.pod("caller") or {}).get("status", {}).get("phase") == "Succeeded", 30, what="caller done")
    log = cluster.log_path("caller").read_text()
    assert "from-target target-host target-host" in log
    assert "command terminated with exit code 3" in log and "exit=3" in log
    assert "pod absent in namespace default is not running" in log and "absent=1" in log
    written = list((cluster.kubelet.pods_dir / "default" / "target").glob("*/volumes/data/in"))
    assert [p.read_text() for p in written] == ["piped\n"]


def test_a_process_execd_into_a_container_dies_with_the_container(cluster):
    target = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "host"}, "spec": {
        "restartPolicy": "Never", "volumes": [{"name": "data", "emptyDir": {}}],
        "containers": [{"name": "main", "image": "i", "command": ["sh", "-c", "sleep 300"],
                        "volumeMounts": [{"name": "data", "mountPath": "/data"}]}]}}
    caller = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "execer"}, "spec": {
        "restartPolicy": "Never",
        "containers": [{"name": "main", "image": "i",
                        # `$$$$`: Kubernetes turns `$$` into `$` in a command, so the shell sees `$$`.
                        "command": ["sh", "-c", "kubectl exec host -- sh -c 'echo $$$$ > /data/pid; exec sleep 300'"]}]}}
    cluster.store.create(target)
    cluster.wait_for(lambda: (cluster.pod("host") or {}).get("status", {}).get("phase") == "Running", 20, what="host running")
    cluster.store.create(caller)
    volumes = cluster.kubelet.pods_dir / "default" / "host"
    pid_file = cluster.wait_for(lambda: next(iter(volumes.glob("*/volumes/data/pid")), None), 20, what="exec'd process started")
    pid = int(cluster.wait_for(lambda: pid_file.read_text().strip(), 5, what="pid written"))
    os.kill(pid, 0)  # alive
    cluster.kubelet.kill("default", "host", sig=signal.SIGKILL)
    cluster.wait_for(lambda: not _alive(pid), 10, what="exec'd process gone")
    # kubectl exec reports the killed command's exit code, so the caller fails.
    cluster.wait_for(lambda: (cluster.pod("execer") or {}).get("status", {}).get("phase") == "Failed", 10, what="caller failed")
    assert "command terminated with exit code 137" in cluster.log_path("execer").read_text()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A killed child of the kubectl stand-in is a zombie until reaped: count that as gone.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def test_kubectl_get_pod_reads_the_stores_copy_with_jsonpath_json_and_name(cluster):
    target = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "seen"}, "spec": {
        "terminationGracePeriodSeconds": 1,
        "containers": [{"name": "main", "image": "i", "command": ["sh", "-c", "sleep 300"]}]}}
    running = '{.status.containerStatuses[?(@.name=="main")].state.running.startedAt}'
    script = (f"kubectl get pod seen -o 'jsonpath={running}'; echo; "
              "kubectl get pods/seen -o jsonpath='{.metadata.name} {.status.phase}'; echo; "
              "kubectl get pod seen -o json | python -c 'import json,sys; print(json.load(sys.stdin)[\"kind\"])'; "
              "kubectl get pod seen -o name; "
              "kubectl get pod absent -o name; echo absent=$?")
    caller = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "reader"}, "spec": {
        "restartPolicy": "Never", "containers": [{"name": "main", "image": "i", "command": ["sh", "-c", script]}]}}
    cluster.store.create(target)
    cluster.wait_for(lambda: (cluster.pod("seen") or {}).get("status", {}).get("phase") == "Running", 20, what="target running")
    started = cluster.pod("seen")["status"]["containerStatuses"][0]["state"]["running"]["startedAt"]
    cluster.store.create(caller)
    cluster.wait_for(lambda: (cluster.pod("reader") or {}).get("status", {}).get("phase") == "Succeeded", 30, what="reader done")
    lines = cluster.log_path("reader").read_text().splitlines()
    assert started in lines
    assert "seen Running" in lines and "Pod" in lines and "pod/seen" in lines
    assert 'Error from server (NotFound): pods "absent" not found' in lines and "absent=1" in lines


@pytest.fixture
def real_cluster(tmp_path: Path, cluster_plane: ControlPlane, metacontroller: str) -> Iterator[LocalCluster]:
    """The local cluster over the real control plane (etcd, kube-apiserver, kube-controller-manager):
    the master Job and its pods are the real Job controller's; under either Metacontroller."""
    with cluster_under(tmp_path / "state", metacontroller, control_plane=cluster_plane, restart_backoff=(0.2, 1.0)) as c:
        yield c


@pytest.mark.apiserver
@pytest.mark.chainer
def test_a_master_script_error_fails_the_job_saying_its_exit_code_and_message_after_the_pods_are_gone(real_cluster):
    job = example("script-error")
    name = job["metadata"]["name"]
    master = job["spec"]["master"]
    master["backoffLimit"] = 0
    command = master["template"]["spec"]["containers"][0]["command"]
    command[command.index("--min-accuracy") + 1] = "not-a-number"  # argparse refuses it in every rank
    real_cluster.submit(job)
    done = real_cluster.wait_finished(name, timeout=240)
    assert finished(done) == "Failed", done.get("status")
    (pod,) = [p for p in real_cluster.pods(name) if p["metadata"]["name"].startswith(f"{name}-master-")]
    # The operator's default: the tail of mpiexec's log is the termination message.
    (spec,) = [c for c in pod["spec"]["containers"] if c["name"] == "chainer"]
    assert spec["terminationMessagePolicy"] == "FallbackToLogsOnError"
    (state,) = [cs["state"]["terminated"] for cs in pod["status"]["containerStatuses"] if cs["name"] == "chainer"]
    assert state["exitCode"] != 0 and "not-a-number" in state["message"], state
    # The line that says what went wrong: argparse's, above mpiexec's own notices (hooks.shared.termination).
    error = next(line.strip() for line in reversed(state["message"].splitlines()) if "invalid float value" in line)
    said = (f"the master pod {pod['metadata']['name']} ended with exit code {state['exitCode']}, "
            f"reason {state['reason']}: {error[:199] + '…' if len(error) > 200 else error!r}")
    failed = condition(done, "Failed")
    assert failed is not None and failed["message"].endswith(said), failed
    assert failed["reason"] == "BackoffLimitExceeded"
    (record,) = [c for c in real_cluster.children_of(name, "v1", "ConfigMap") if c["metadata"]["name"] == f"{name}-outcome"]
    assert json.loads(record["data"]["record"])["masterFailure"]["exitCode"] == state["exitCode"]
    # The master Job and its pod go (a user's cleanup, a TTL), and the job is synced again (an
    # annotation edit: a parent event), and the status still says the same.
    real_cluster.store.delete("batch/v1", "Job", "default", f"{name}-master")
    try:  # the garbage collector may have taken the pod with its Job already
        real_cluster.delete_pod(pod["metadata"]["name"])
    except StoreError as err:
        assert err.code == 404, err
    real_cluster.wait_for(lambda: not [p for p in real_cluster.pods(name) if "master" in p["metadata"]["name"]]
                          and not real_cluster.children_of(name, "batch/v1", "Job"), 60, what="master Job and pod gone")
    synced = syncs(real_cluster, done)
    real_cluster.update_job(name, lambda j: j["metadata"].setdefault("annotations", {}).update(touched="1"))
    real_cluster.wait_for(lambda: syncs(real_cluster, done) > synced, 30, what="a sync after the deletions")
    after = real_cluster.get_job(name)
    assert condition(after, "Failed") == failed
    assert finished(after) == "Failed"


@pytest.mark.chainer
def test_a_stalled_job_under_fail_job_is_failed_and_its_master_and_workers_stopped(tmp_path: Path, cluster_plane: ControlPlane):
    """A ChainerMN job whose master is stopped (SIGSTOP: its rank and mpiexec hang, so rank 0 waits in
    an allreduce and falls silent) fails for the stall: docs/progress.md, "ChainerJob". Nothing of its
    pods outlives them: PRRTE's daemons (`prted --daemonize`, exec'd into every pod) included."""
    with LocalCluster(tmp_path / "state", control_plane=cluster_plane) as cluster:
        uids = _stall_and_fail(cluster)
    # The cluster stopped: the master pod, still in its grace period then, was stopped with it.
    assert _wait(lambda: not _processes_of(uids), 10), _processes_of(uids)


def _processes_of(uids: set[str]) -> list[int]:
    return [pid for uid in sorted(uids) for pid in proctrack.processes(uid)]


def pgrep_prted(uids: set[str]) -> list[int]:
    """`pgrep prted`, of these pods' processes only (other runs on the machine may have their own)."""
    def name(pid: int) -> str:
        try:
            return Path(f"/proc/{pid}/comm").read_text().strip()
        except OSError:
            return ""
    return [pid for pid in _processes_of(uids) if name(pid) == "prted"]


def _wait(check: Callable[[], bool], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while not check() and time.monotonic() < deadline:
        time.sleep(0.1)
    return check()


def _stall_and_fail(cluster: LocalCluster) -> set[str]:
    """Run the stalled job to its stall failure; the uids of its pods."""
    timeout = 15
    job = example("stall-fail")
    name = job["metadata"]["name"]
    job["spec"]["runPolicy"] = {"progress": {}, "stallPolicy": {"timeoutSeconds": timeout, "action": "FailJob"}}
    job["spec"]["master"]["activeDeadlineSeconds"] = 600
    # Rank 0 runs in the first worker's pod, with its env: one report a second.
    job["spec"]["workerSets"]["ws0"]["template"]["spec"]["containers"][0]["env"] = [
        {"name": "MXJOB_PROGRESS_INTERVAL", "value": "1"}]
    cluster.submit(job)
    cluster.wait_for(lambda: "epoch  2 " in master_logs(cluster, name), 180, what="training under way")
    pods = cluster.pods(name)
    [master] = [p["metadata"]["name"] for p in pods if "-master-" in p["metadata"]["name"]]
    workers = {p["metadata"]["uid"] for p in pods if "-master-" not in p["metadata"]["name"]}
    assert len(workers) == 2 and pgrep_prted(workers), "PRRTE's daemons run in the workers' pods"
    cluster.kubelet.kill("default", master, sig=signal.SIGSTOP)
    stopped = time.monotonic()
    done = cluster.wait_finished(name, timeout=timeout + 10 + 90)
    noticed = time.monotonic() - stopped
    print(f"FailJob: Failed {noticed:.1f} s after SIGSTOP")
    gone = cluster.wait_for(lambda: not cluster.children_of(name, "batch/v1", "Job")
                            and not [p for p in cluster.pods(name) if (p.get("status") or {}).get("phase") == "Running"],
                            90, what="the master Job deleted and no pod running")

    failed = condition(done, "Failed")
    assert finished(done) == "Failed" and failed["reason"] == "ChainerJobStalled", done["status"]
    assert re.search(r"from rank-0 \(last: step \d+ of \d+", failed["message"]), failed["message"]
    assert gone
    assert [ws["spec"]["replicas"] for ws in worker_sets(cluster, name)] == [0]
    assert timeout <= noticed < timeout + 10 + 60, noticed
    # The worker pods are gone, and so are the daemons that left their process groups.
    cluster.wait_for(lambda: not [p for p in cluster.store.list_shared("v1", "Pod", "default") if p["metadata"]["uid"] in workers],
                     60, what="worker pods removed")
    assert _wait(lambda: not _processes_of(workers), 5), _processes_of(workers)
    return workers | {p["metadata"]["uid"] for p in pods}


@pytest.mark.chainer
def test_a_stalled_job_under_restart_job_is_restarted_whole_and_completes(cluster):
    """RestartJob: the stalled attempt's master Job and worker StatefulSets are deleted and made
    again as attempt 1, whose ranks report afresh and train to the end (docs/progress.md, "ChainerJob").
    The timeout also covers attempt 1's start-up until its first report (mpiexec, the daemons, the
    imports): with 15 s, attempt 1 was once failed for a stall too on a heavily loaded machine."""
    timeout = 45
    job = example("stall-restart")
    name = job["metadata"]["name"]
    job["spec"]["runPolicy"] = {"stallPolicy": {"timeoutSeconds": timeout, "action": "RestartJob"}, "maxRestarts": 1}
    job["spec"]["workerSets"]["ws0"]["template"]["spec"]["containers"][0]["env"] = [
        {"name": "MXJOB_PROGRESS_INTERVAL", "value": "1"}]
    cluster.submit(job)
    cluster.wait_for(lambda: "epoch  2 " in master_logs(cluster, name), 180, what="training under way")
    first = {p["metadata"]["uid"]: p["metadata"]["name"] for p in cluster.pods(name)}
    [master] = [n for n in first.values() if "-master-" in n]
    cluster.kubelet.kill("default", master, sig=signal.SIGSTOP)
    stopped = time.monotonic()
    cluster.wait_for(lambda: (cluster.get_job(name) or {}).get("status", {}).get("attempt") == 1,
                     timeout + 10 + 60, what="the restart")
    print(f"RestartJob: attempt 1 decided {time.monotonic() - stopped:.1f} s after SIGSTOP")
    done = cluster.wait_finished(name, timeout=300)
    assert finished(done) == "Succeeded", done["status"]
    assert done["status"]["attempt"] == 1
    restarted = condition(done, "Restarting")
    assert restarted["status"] == "False" and restarted["reason"] == "ChainerJobRestarted", restarted
    assert "it stalled: no progress report" in restarted["message"]
    assert done["status"]["progress"]["attempt"] == 1, done["status"]["progress"]
    assert float(ACCURACY.findall(master_logs(cluster, name))[-1]) >= 0.9
    # Attempt 0's pods go, the stopped master's after its 30 s grace (attempt 1 may end sooner),
    # with everything they ran.
    cluster.wait_for(lambda: not set(first) & {p["metadata"]["uid"] for p in cluster.store.list_shared("v1", "Pod", "default")},
                     60, what="attempt 0's pods removed")
    assert _wait(lambda: not _processes_of(set(first)), 10), _processes_of(set(first))
