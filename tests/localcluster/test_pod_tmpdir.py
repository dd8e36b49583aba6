"""Each container's TMPDIR is its own and fresh at each start, as a container's /tmp is in a cluster
(localcluster/node/podsandbox.py). Shared, a folder a killed process left behind broke a later one:
OpenMPI's `mpiexec` stops with "The PMIx server's listener thread failed to start" when its session
folder `ompi.<pid>` already exists, which it does once a killed mpiexec's pid comes round again."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers.bare_kubelet import bare_kubelet, phase, wait_for

from localcluster.node.kubelet import ProcessKubelet
from localcluster.node.registration import NODE_NAME

pytestmark = pytest.mark.e2e






@pytest.fixture
def kubelet(tmp_path: Path) -> Iterator[ProcessKubelet]:
    with bare_kubelet(tmp_path / "logs") as started:
        yield started


def run_pod(kubelet: ProcessKubelet, name: str, script: str, *, policy: str = "Never", env: list | None = None) -> None:
    container = {"name": "main", "image": "i", "command": ["sh", "-c", script], "env": env or []}
    kubelet.store.create({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": {
        "nodeName": NODE_NAME, "restartPolicy": policy, "terminationGracePeriodSeconds": 1, "containers": [container]}})


def test_each_pod_has_a_tmpdir_of_its_own_which_goes_with_the_pod(kubelet, tmp_path: Path):
    for name in ("a", "b"):
        run_pod(kubelet, name, f'test -d "$TMPDIR" && test -z "$(ls -A "$TMPDIR")" && echo "$TMPDIR" > {tmp_path / name}')
    for name in ("a", "b"):
        wait_for(lambda n=name: phase(kubelet, n) in ("Succeeded", "Failed"), 20, f"pod {name} finished")
        assert phase(kubelet, name) == "Succeeded"  # its TMPDIR existed, empty
    folders = {name: Path((tmp_path / name).read_text().strip()) for name in ("a", "b")}
    assert folders["a"] != folders["b"] and all(f.is_dir() for f in folders.values())
    kubelet.store.delete("v1", "Pod", "default", "a")
    wait_for(lambda: kubelet.store.get("v1", "Pod", "default", "a") is None, 20, "pod a removed")
    assert not folders["a"].exists() and folders["b"].is_dir()


def test_a_restarted_container_finds_its_tmpdir_empty(kubelet, tmp_path: Path):
    """As a session folder left by a killed mpiexec: the next run does not find it."""
    runs = tmp_path / "runs"
    run_pod(kubelet, "p", f'if [ -e "$TMPDIR/ompi.left" ]; then echo stale >> {runs}; exit 0; fi; '
                          f'mkdir "$TMPDIR/ompi.left"; echo run >> {runs}; [ "$(wc -l < {runs})" -ge 2 ] && exit 0; exit 1',
            policy="OnFailure")
    wait_for(lambda: phase(kubelet, "p") == "Succeeded", 30, "the second run to succeed")
    assert runs.read_text().split() == ["run", "run"]


def test_a_tmpdir_the_container_sets_is_kept(kubelet, tmp_path: Path):
    own = tmp_path / "own"
    own.mkdir()
    run_pod(kubelet, "p", f'echo "$TMPDIR" > {tmp_path / "seen"}', env=[{"name": "TMPDIR", "value": str(own)}])
    wait_for(lambda: phase(kubelet, "p") == "Succeeded", 20, "pod finished")
    assert (tmp_path / "seen").read_text().strip() == str(own)


def test_a_process_execd_into_a_container_uses_that_containers_tmpdir(kubelet, tmp_path: Path):
    """`kubectl exec` runs in the target container (prted, exec'd into a ChainerJob's worker, keeps its
    session there)."""
    run_pod(kubelet, "target", f'echo "$TMPDIR" > {tmp_path / "target"}; exec sleep 300')
    wait_for(lambda: phase(kubelet, "target") == "Running" and (tmp_path / "target").exists(), 20, "target running")
    run_pod(kubelet, "caller", f"kubectl exec target -- sh -c 'echo $TMPDIR > {tmp_path / 'execd'}'")
    wait_for(lambda: phase(kubelet, "caller") in ("Succeeded", "Failed"), 20, "caller finished")
    assert (tmp_path / "execd").read_text() == (tmp_path / "target").read_text()
