"""A process that daemonizes out of its container (setsid, a double fork) dies with the container,
as it would with a container's cgroup: when its pod is deleted, when its container ends by itself,
and when it was exec'd into the container from another pod (localcluster/node/proctrack.py)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers.bare_kubelet import bare_kubelet, phase, wait_for

from localcluster.node.kubelet import ProcessKubelet
from localcluster.node.registration import NODE_NAME

pytestmark = pytest.mark.e2e

# The canonical daemon: fork, setsid, fork again; the grandchild writes its pid and sleeps.
DOUBLE_FORK = """
import os, sys, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        with open(sys.argv[1] + ".tmp", "w") as f:
            f.write(str(os.getpid()))
        os.replace(sys.argv[1] + ".tmp", sys.argv[1])
        time.sleep(1000)
    os._exit(0)
os.wait()
"""


def daemonize(kind: str, pid_file: Path) -> str:
    """A shell line that leaves one daemon behind, its pid in `pid_file`, and returns at once."""
    if kind == "setsid":  # no job control in `sh -c`: setsid does not fork, so $! is the daemon
        return f"setsid sleep 1000 & echo $! > {pid_file}.tmp && mv {pid_file}.tmp {pid_file}"
    script = pid_file.with_name("daemonize.py")
    script.write_text(DOUBLE_FORK)
    return f"{sys.executable} {script} {pid_file}"


def alive(pid: int) -> bool:
    """Runs (a zombie waiting for init to reap it counts as gone)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False




@pytest.fixture
def kubelet(tmp_path: Path) -> Iterator[ProcessKubelet]:
    with bare_kubelet(tmp_path / "logs") as started:
        yield started


def run_pod(kubelet: ProcessKubelet, name: str, script: str, policy: str = "Never") -> None:
    kubelet.store.create({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": {
        "nodeName": NODE_NAME, "restartPolicy": policy, "terminationGracePeriodSeconds": 1,
        "containers": [{"name": "main", "image": "i", "command": ["sh", "-c", script]}]}})




def daemon_of(kubelet: ProcessKubelet, pid_file: Path, container_pid: int | None = None) -> int:
    """The daemon's pid once it runs, after checking it left the container's process group
    (so signalling the group, all the kubelet did before, would not reach it)."""
    pid = int(str(wait_for(lambda: pid_file.exists() and pid_file.read_text().strip(), 20, "the daemon's pid")))
    assert alive(pid)
    if container_pid is not None:
        assert os.getpgid(pid) != container_pid and os.getsid(pid) != container_pid
    return pid


@pytest.mark.parametrize("kind", ["setsid", "double-fork"])
def test_a_daemon_dies_when_its_pod_is_deleted(kubelet, tmp_path: Path, kind: str):
    pid_file = tmp_path / "daemon.pid"
    run_pod(kubelet, "p", f"{daemonize(kind, pid_file)}; exec sleep 300")
    wait_for(lambda: phase(kubelet, "p") == "Running", 20, "pod running")
    [run] = kubelet.worker("default", "p").runs
    daemon = daemon_of(kubelet, pid_file, run.process.pid if run.process else None)
    kubelet.store.delete("v1", "Pod", "default", "p")
    wait_for(lambda: kubelet.store.get("v1", "Pod", "default", "p") is None, 20, "pod removed")
    assert not alive(daemon)


@pytest.mark.parametrize("kind", ["setsid", "double-fork"])
@pytest.mark.parametrize("exit_code", [0, 3], ids=["succeeded", "failed"])
def test_a_daemon_dies_when_its_container_ends_while_the_finished_pod_stays(kubelet, tmp_path: Path, kind: str, exit_code: int):
    pid_file = tmp_path / "daemon.pid"
    # The container waits for the daemon's pid, so the daemon runs before the container ends.
    run_pod(kubelet, "p", f"{daemonize(kind, pid_file)}; while [ ! -s {pid_file} ]; do sleep 0.05; done; exit {exit_code}")
    wait_for(lambda: phase(kubelet, "p") in ("Succeeded", "Failed"), 20, "pod finished")
    daemon = int(pid_file.read_text())
    assert phase(kubelet, "p") == ("Succeeded" if exit_code == 0 else "Failed")
    wait_for(lambda: not alive(daemon), 5, "daemon gone")
    assert kubelet.store.get("v1", "Pod", "default", "p") is not None  # a finished pod stays until deleted


@pytest.mark.parametrize("ends", ["target", "caller"])
def test_a_daemon_execd_into_a_container_belongs_to_that_container(kubelet, tmp_path: Path, ends: str):
    """`kubectl exec` runs in the target container: a daemon it leaves dies with the target, not with
    the pod that called kubectl (as with prted, exec'd into a ChainerJob's worker by the master)."""
    pid_file = tmp_path / "daemon.pid"
    run_pod(kubelet, "target", "exec sleep 300")
    wait_for(lambda: phase(kubelet, "target") == "Running", 20, "target running")
    run_pod(kubelet, "caller", f"kubectl exec target -- sh -c \"{daemonize('double-fork', pid_file)}\"; exec sleep 300")
    daemon = daemon_of(kubelet, pid_file)
    kubelet.store.delete("v1", "Pod", "default", ends)
    wait_for(lambda: kubelet.store.get("v1", "Pod", "default", ends) is None, 20, f"{ends} removed")
    assert alive(daemon) == (ends == "caller")
