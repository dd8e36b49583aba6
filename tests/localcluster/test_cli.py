"""The `localcluster` command line as a user meets it: bad names, namespaces, signals, logs, pipes."""

from __future__ import annotations

import argparse
import io
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import yaml
from helpers import yamlio

from localcluster.cli import commands as cli
from localcluster.cluster import LocalCluster

REPO = Path(__file__).resolve().parents[2]


def job(name: str, command: list[str], *, namespace: str | None = None, restart: str = "Never",
        grace: int = 1, run_policy: dict | None = None) -> dict:
    """A one-Worker MXJob running `command`."""
    meta = {"name": name, **({"namespace": namespace} if namespace else {})}
    return {
        "apiVersion": "kubeflow.org/v1", "kind": "MXJob", "metadata": meta,
        "spec": {"runPolicy": run_policy or {}, "mxReplicaSpecs": {"Worker": {
            "replicas": 1, "restartPolicy": restart,
            "template": {"spec": {"terminationGracePeriodSeconds": grace,
                                  "containers": [{"name": "mxnet", "image": "busybox:1.36", "command": command}]}},
        }}},
    }


def write(tmp_path: Path, manifest: dict | str) -> Path:
    path = tmp_path / "job.yaml"
    path.write_text(manifest if isinstance(manifest, str) else yaml.safe_dump(manifest))
    return path


def run_args(tmp_path: Path, path: Path, timeout: float = 60) -> argparse.Namespace:
    return argparse.Namespace(file=str(path), state_dir=str(tmp_path / "state"), timeout=timeout)


def start_cli(tmp_path: Path, *args: str, env: dict | None = None, **popen) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "localcluster", "--state-dir", str(tmp_path / "state"), *args],
                            cwd=REPO, text=True, env=env, **popen)


def processes_with(marker: str) -> list[int]:
    """Pids of live (not zombie) processes whose command line contains `marker`."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if marker in cmdline and state != "Z":
            found.append(int(entry.name))
    return found


def wait_until(check, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


# --- item: a job's name never reaches the file system unchecked ----------------------------------


@pytest.mark.parametrize("name", ["..", ".", "/abs-target", "a/../..", "UPPER", "-dash", "x" * 64],
                         ids=["dot-dot", "dot", "absolute", "traversal", "upper-case", "leading-dash", "too-long"])
def test_a_bad_job_name_is_refused_before_any_file_is_touched(tmp_path: Path, name: str):
    sentinel = tmp_path / "keep.txt"
    sentinel.write_text("still here")
    target = tmp_path / "abs-target"
    target.mkdir()
    (target / "keep.txt").write_text("still here")
    manifest = job(str(target) if name == "/abs-target" else name, ["true"])
    err = io.StringIO()
    code = cli.run(run_args(tmp_path, write(tmp_path, manifest)), out=io.StringIO(), err=err)
    assert code == cli.EXIT_INVALID
    assert "metadata.name" in err.getvalue() and "lower-case letters" in err.getvalue()
    assert sentinel.read_text() == "still here" and (target / "keep.txt").exists()
    assert not (tmp_path / "state").exists()


@pytest.mark.parametrize("namespace", ["..", "a/b", "Team"], ids=["dot-dot", "slash", "upper-case"])
def test_a_bad_namespace_is_refused(tmp_path: Path, namespace: str):
    err = io.StringIO()
    code = cli.run(run_args(tmp_path, write(tmp_path, job("ok", ["true"], namespace=namespace))), out=io.StringIO(), err=err)
    assert code == cli.EXIT_INVALID and "metadata.namespace" in err.getvalue()


@pytest.mark.parametrize("name", ["..", "/etc", "a/b"], ids=["dot-dot", "absolute", "slash"])
def test_the_cluster_itself_never_maps_a_bad_name_to_a_folder(tmp_path: Path, name: str):
    cluster = LocalCluster(tmp_path / "state")  # not started: no process
    with pytest.raises(ValueError, match=r"metadata\.name"):
        cluster.job_dir(name)
    with pytest.raises(ValueError, match=r"metadata\.name"):
        cluster.submit(job(name, ["true"]))
    assert tmp_path.exists() and not (tmp_path / "state").exists()


# --- item: input errors are named for what they are, on stderr ----------------------------------


def test_a_missing_file_is_a_read_error_not_an_invalid_spec(tmp_path: Path):
    err, out = io.StringIO(), io.StringIO()
    code = cli.run(run_args(tmp_path, tmp_path / "nope.yaml"), out=out, err=err)
    assert code == cli.EXIT_INVALID and out.getvalue() == ""
    assert err.getvalue().startswith("error: cannot read") and "nope.yaml" in err.getvalue()
    assert "invalid spec" not in err.getvalue()


def test_a_binary_file_is_a_read_error_not_a_traceback(tmp_path: Path):
    err = io.StringIO()
    path = tmp_path / "job.yaml"
    path.write_bytes(b"\x7fELF\x02\x01\x01\x00\xff\xfe")
    assert cli.run(run_args(tmp_path, path), out=io.StringIO(), err=err) == cli.EXIT_INVALID
    assert err.getvalue().startswith(f"error: {path} is not a text file")


def test_a_job_folder_that_is_a_symlink_out_of_the_state_dir_is_refused_and_left_alone(tmp_path: Path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("mine")
    (tmp_path / "state" / "default").mkdir(parents=True)
    (tmp_path / "state" / "default" / "linked").symlink_to(outside)
    err = io.StringIO()
    path = write(tmp_path, job("linked", ["true"]))
    assert cli.run(run_args(tmp_path, path), out=io.StringIO(), err=err) == cli.EXIT_CANNOT_START
    assert "outside the state dir" in err.getvalue() and "Traceback" not in err.getvalue()
    assert [p.name for p in outside.iterdir()] == ["keep.txt"] and (outside / "keep.txt").read_text() == "mine"


def test_a_yaml_error_names_the_file(tmp_path: Path):
    err = io.StringIO()
    path = write(tmp_path, "kind: MXJob\nmetadata: {name: [unclosed\n")
    assert cli.run(run_args(tmp_path, path), out=io.StringIO(), err=err) == cli.EXIT_INVALID
    assert f'"{path}"' in err.getvalue() and "<unicode string>" not in err.getvalue()


# --- item: one run per job and state dir ----------------------------------------------------------


def test_a_second_run_of_the_same_job_is_refused_while_the_first_holds_it(tmp_path: Path):
    with cli.job_lock(tmp_path, "default", "twice"):
        assert cli.job_running(tmp_path, "default", "twice")
        with pytest.raises(RuntimeError, match=f"pid {os.getpid()}"), cli.job_lock(tmp_path, "default", "twice"):
            pass
    assert not cli.job_running(tmp_path, "default", "twice")
    with cli.job_lock(tmp_path, "default", "twice"):  # free again once the first has ended
        pass


# --- e2e: namespaces, suspend, signals, pipes, logs -----------------------------------------------


@pytest.mark.e2e
@pytest.mark.apiserver
def test_a_job_in_another_namespace_runs_and_its_logs_are_found(tmp_path: Path):
    path = write(tmp_path, job("nsjob", ["python", "-c", "print('hello from team-a')"], namespace="team-a"))
    result = subprocess.run([sys.executable, "-m", "localcluster", "--state-dir", str(tmp_path / "state"),
                             "run", str(path), "--timeout", "40"], cwd=REPO, capture_output=True, text=True, timeout=90)
    assert result.returncode == cli.EXIT_SUCCEEDED, result.stdout + result.stderr
    assert "MXJob team-a/nsjob Succeeded" in result.stdout
    assert (tmp_path / "state" / "team-a" / "nsjob" / "nsjob-worker-0.log").exists()
    for extra in ([], ["-c", "mxnet"]):
        logs = subprocess.run([sys.executable, "-m", "localcluster", "--state-dir", str(tmp_path / "state"),
                               "logs", "-n", "team-a", "nsjob", "nsjob-worker-0", *extra],
                              cwd=REPO, capture_output=True, text=True, timeout=20)
        assert logs.returncode == 0 and "hello from team-a" in logs.stdout, logs.stderr


@pytest.mark.e2e
@pytest.mark.apiserver
def test_logs_of_an_unknown_container_lists_pods_and_containers(tmp_path: Path):
    path = write(tmp_path, job("lsjob", ["true"]))
    assert cli.run(run_args(tmp_path, path, timeout=40), out=io.StringIO(), err=io.StringIO()) == cli.EXIT_SUCCEEDED
    err = io.StringIO()
    args = argparse.Namespace(state_dir=str(tmp_path / "state"), namespace="default", job="lsjob",
                              pod="lsjob-worker-0", container="sidecar", follow=False)
    assert cli.logs(args, out=io.StringIO(), err=err) == cli.EXIT_FAILED
    assert "available: lsjob-worker-0 -c mxnet" in err.getvalue()


@pytest.mark.apiserver
def test_logs_follow_prints_what_is_written_while_the_run_goes_on_and_stops_with_it(tmp_path: Path):
    import threading

    state = tmp_path / "state"
    log = state / "default" / "fjob" / "fjob-worker-0.log"
    log.parent.mkdir(parents=True)
    log.write_text("=== localcluster: pod fjob-worker-0 container mxnet start #0 at t: [python]\nepoch 1\n")
    out = io.StringIO()
    args = argparse.Namespace(state_dir=str(state), namespace="default", job="fjob", pod="fjob-worker-0",
                              container="mxnet", follow=True)
    codes: list[int] = []
    release = threading.Event()

    def hold_the_run_lock() -> None:
        with cli.job_lock(state, "default", "fjob"):
            release.wait(120)  # the test sets it; the bound only keeps a failed test from hanging for ever

    holder = threading.Thread(target=hold_the_run_lock, daemon=True)
    holder.start()
    deadline = time.monotonic() + 30  # on a loaded machine the thread may take a while to get the lock
    while not cli.job_running(state, "default", "fjob"):
        assert time.monotonic() < deadline, "the run lock was never taken"
        time.sleep(0.01)
    follower = threading.Thread(target=lambda: codes.append(cli.logs(args, out=out, err=io.StringIO())))
    follower.start()
    time.sleep(3 * cli.REFRESH_SECONDS)
    with log.open("a") as handle:
        handle.write("epoch 2\n")
    time.sleep(3 * cli.REFRESH_SECONDS)
    assert follower.is_alive()  # still following while the run holds its lock
    release.set()
    holder.join()
    follower.join(timeout=10)
    assert codes == [cli.EXIT_SUCCEEDED]
    assert out.getvalue().endswith("epoch 1\nepoch 2\n")


@pytest.mark.e2e
@pytest.mark.apiserver
def test_a_suspended_job_is_reported_at_once_with_its_own_exit_code(tmp_path: Path):
    err = io.StringIO()
    path = write(tmp_path, job("napping", ["true"], run_policy={"suspend": True}))
    started = time.monotonic()
    assert cli.run(run_args(tmp_path, path, timeout=120), out=io.StringIO(), err=err) == cli.EXIT_SUSPENDED
    assert "suspended" in err.getvalue() and time.monotonic() - started < 60


@pytest.mark.e2e
@pytest.mark.apiserver
def test_no_metrics_directory_or_pod_folder_is_left_behind(tmp_path: Path):
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    path = write(tmp_path, job("tidy", ["true"]))
    result = subprocess.run([sys.executable, "-m", "localcluster", "--state-dir", str(tmp_path / "state"),
                             "run", str(path), "--timeout", "40"], cwd=REPO, capture_output=True, text=True,
                            timeout=90, env={**os.environ, "TMPDIR": str(scratch)})
    assert result.returncode == 0, result.stderr
    assert list(scratch.iterdir()) == []
    # Pod volumes and stand-in files go with the run; the job's logs stay.
    assert not (tmp_path / "state" / "pods").exists()
    assert (tmp_path / "state" / "default" / "tidy" / "tidy-worker-0.log").exists()


@pytest.mark.e2e
@pytest.mark.apiserver
@pytest.mark.parametrize("signals", [(signal.SIGTERM,), (signal.SIGHUP,), (signal.SIGINT,), (signal.SIGINT, signal.SIGINT)],
                         ids=["sigterm", "sighup", "ctrl-c", "ctrl-c-twice"])
def test_a_stop_signal_stops_every_process(tmp_path: Path, signals: tuple[int, ...]):
    marker = f"marker-{uuid.uuid4().hex}"
    # The pod ignores SIGTERM and has a long grace period, so a second Ctrl-C has a slow stop to hurry.
    pod = ["python", "-c", "import signal,time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(120)", marker]
    path = write(tmp_path, job("stopme", pod, grace=30))
    proc = start_cli(tmp_path, "run", str(path), "--timeout", "100", stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        # Start-up (a control plane, the hooks server, a sync) took over 60 s at a load average of 13.
        wait_until(lambda: processes_with(marker), 90, "the pod's process")
        port = next(line.split(":")[-1].split()[0] for line in iter(proc.stdout.readline, "")  # type: ignore[union-attr]
                    if line.startswith("hooks server:"))
        assert processes_with(f"127.0.0.1:{port}"), "the hooks server runs"
        for sig in signals:
            proc.send_signal(sig)
            time.sleep(0.3)
        # One signal waits out the pod's 30 s grace, then stops the control plane: past 60 s on a loaded
        # machine (two whole suites side by side), so the guard against a hang is 120 s.
        code = proc.wait(timeout=120)
        stderr = proc.stderr.read()  # type: ignore[union-attr]
    finally:
        if proc.poll() is None:
            proc.kill()
    assert code == 128 + signals[0], stderr
    assert "stopping every process" in stderr and "Traceback" not in stderr
    if len(signals) > 1:
        assert "killing every process now" in stderr
    assert processes_with(marker) == [] and processes_with(f"127.0.0.1:{port}") == []


@pytest.mark.e2e
@pytest.mark.apiserver
def test_a_closed_pipe_ends_the_run_quietly_and_stops_everything(tmp_path: Path):
    marker = f"marker-{uuid.uuid4().hex}"
    path = write(tmp_path, job("piped", ["python", "-c", "import time; time.sleep(120)", marker]))
    proc = start_cli(tmp_path, "run", str(path), "--timeout", "100", stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        wait_until(lambda: processes_with(marker), 90, "the pod's process")  # start-up, as above
        proc.stdout.close()  # type: ignore[union-attr]  # what `| head` does once it has its lines
        code = proc.wait(timeout=60)
        stderr = proc.stderr.read()  # type: ignore[union-attr]
    finally:
        if proc.poll() is None:
            proc.kill()
    assert code == cli.EXIT_BROKEN_PIPE and "Traceback" not in stderr, stderr
    assert processes_with(marker) == []


@pytest.mark.e2e
@pytest.mark.apiserver
def test_a_hooks_server_that_cannot_start_is_a_start_up_failure_not_a_failed_job(tmp_path: Path):
    path = write(tmp_path, job("nostart", ["true"]))
    result = subprocess.run([sys.executable, "-m", "localcluster", "--state-dir", str(tmp_path / "state"),
                             "run", str(path), "--timeout", "40"], cwd=REPO, capture_output=True, text=True, timeout=90,
                            env={**os.environ, "GUNICORN_CMD_ARGS": "--no-such-gunicorn-flag"})
    assert result.returncode == cli.EXIT_CANNOT_START, result.stdout + result.stderr
    assert "error: the local cluster could not start: hooks server exited with" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.e2e
@pytest.mark.apiserver
def test_run_waits_for_workers_that_leave_after_the_scheduler(tmp_path: Path):
    # ps-lite in small: the scheduler (which decides success) exits first, the server and workers a moment later.
    def replica(command: list[str], replicas: int = 1) -> dict:
        return {"replicas": replicas, "template": {"spec": {"terminationGracePeriodSeconds": 1, "containers": [
            {"name": "mxnet", "image": "busybox:1.36", "command": command}]}}}
    # As in ps-lite, the scheduler waits until every server and worker has checked in, so none is
    # still Pending when it ends (a pod that has not started by then is not given the grace).
    checkins = tmp_path / "checkins"
    checkins.mkdir()
    late = ["python", "-c", f"import os, time; open(os.path.join({str(checkins)!r}, os.environ['HOSTNAME']), 'w')"
                            f".close(); time.sleep(2)"]
    scheduler = ["python", "-c", f"import os, time\nwhile len(os.listdir({str(checkins)!r})) < 3: time.sleep(0.05)"]
    manifest = {"apiVersion": "kubeflow.org/v1", "kind": "MXJob", "metadata": {"name": "pslite"},
                "spec": {"mxReplicaSpecs": {"Scheduler": replica(scheduler),
                                            "Server": replica(late), "Worker": replica(late, 2)}}}
    out = io.StringIO()
    assert cli.run(run_args(tmp_path, write(tmp_path, manifest), timeout=60), out=out, err=io.StringIO()) == 0
    final = yamlio.load(out.getvalue().split("final status:\n", 1)[1].rsplit("\nMXJob", 1)[0])
    replicas = final["status"]["replicaStatuses"]
    assert replicas["Worker"] == {"active": 0, "succeeded": 2, "failed": 0, "completedIndexes": "0-1"}
    assert replicas["Server"]["succeeded"] == 1
    for pod in ("pslite-worker-0", "pslite-worker-1", "pslite-server-0"):
        assert "exited with code 0" in (tmp_path / "state" / "default" / "pslite" / f"{pod}.log").read_text()


def test_another_interpreter_gets_a_message_not_a_traceback():
    # -S: no site-packages, as with a Python that is not the project's venv.
    result = subprocess.run([sys.executable, "-S", "-m", "localcluster", "run", "x.yaml"], cwd=REPO,
                            capture_output=True, text=True, timeout=30)
    assert result.returncode == cli.EXIT_CANNOT_START
    assert "Traceback" not in result.stderr and ".venv/bin/localcluster" in result.stderr
