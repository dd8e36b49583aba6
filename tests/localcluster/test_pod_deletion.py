"""A running pod deleted: the process kubelet writes a terminal phase before it removes the pod, as a
kubelet does since Kubernetes 1.27 (Kueue's finalizer and the Job controller wait for that phase)."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from helpers.objectstore import ObjectBag

from localcluster.cluster import LocalCluster
from localcluster.controlplane.processes import ControlPlane
from localcluster.node.dns import ClusterDNS
from localcluster.node.kubelet import ProcessKubelet
from localcluster.node.registration import NODE_NAME
from localcluster.store import DELETED

pytestmark = [pytest.mark.e2e]
apiserver = pytest.mark.apiserver

# Each touches its file (argv[1]) once it is ready to be stopped; the test deletes the pod then.
SLEEPS = "import pathlib, sys, time; pathlib.Path(sys.argv[1]).touch(); time.sleep(60)"  # SIGTERM kills it: 143
LEAVES_ON_TERM = ("import pathlib, signal, sys, time; signal.signal(signal.SIGTERM, lambda *_: sys.exit(0)); "
                  "pathlib.Path(sys.argv[1]).touch(); time.sleep(60)")


def delete_when_running(tmp_path: Path, policy: str, scripts: list[str]) -> list[dict[str, Any]]:
    """Run a pod until every container is ready to be stopped, delete it; its statuses from then until it is gone."""
    store = ObjectBag()
    kubelet = ProcessKubelet(store, ClusterDNS(store, strict=False), tmp_path)
    seen: list[dict[str, Any]] = []
    gone = threading.Event()
    ready = [tmp_path / f"ready-{i}" for i in range(len(scripts))]

    def on_event(event: str, obj: dict[str, Any]) -> None:
        if obj.get("kind") != "Pod":
            return
        status = obj.get("status", {})
        if obj["metadata"].get("deletionTimestamp"):
            seen.append({"event": event, **status})
        if event == DELETED:
            gone.set()

    store.watch(on_event)
    kubelet.start()
    try:
        containers = [{"name": f"c{i}", "command": [sys.executable, "-c", script, str(ready[i])]}
                      for i, script in enumerate(scripts)]
        store.create({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},  # bound: no scheduler here
                      "spec": {"nodeName": NODE_NAME, "restartPolicy": policy, "terminationGracePeriodSeconds": 5,
                               "containers": containers}})
        deadline = time.monotonic() + 30
        while not all(path.exists() for path in ready):
            assert time.monotonic() < deadline, "the pod's containers never ran"
            time.sleep(0.05)
        store.delete("v1", "Pod", "default", "p")
        assert gone.wait(30), "the deleted pod was never removed"
        return seen
    finally:
        kubelet.stop()


@pytest.mark.parametrize(("policy", "scripts", "phase", "codes"), [
    pytest.param("Never", [SLEEPS], "Failed", [143], id="killed-by-sigterm-failed"),
    pytest.param("Always", [SLEEPS, LEAVES_ON_TERM], "Failed", [143, 0], id="one-container-failed"),
    pytest.param("Always", [LEAVES_ON_TERM], "Succeeded", [0], id="every-container-exited-0-succeeded"),
])
def test_a_deleted_running_pod_is_written_terminal_before_it_is_removed(tmp_path: Path, policy, scripts, phase, codes):
    seen = delete_when_running(tmp_path, policy, scripts)
    last_write = [s for s in seen if s["event"] != DELETED][-1]
    assert seen[-1]["event"] == DELETED and seen[-1]["phase"] == phase  # the last status it had
    assert last_write["phase"] == phase
    assert [c["state"]["terminated"]["exitCode"] for c in last_write["containerStatuses"]] == codes
    assert last_write["conditions"] and all(c["status"] == "False" for c in last_write["conditions"]
                                            if c["type"] in ("Ready", "ContainersReady"))


@apiserver
def test_on_the_real_control_plane_a_deleted_running_pod_is_seen_failed_before_it_is_gone(
        tmp_path: Path, cluster_plane: ControlPlane):
    ready = tmp_path / "ready-0"
    seen: list[tuple[str, dict[str, Any]]] = []
    with LocalCluster(tmp_path / "state", control_plane=cluster_plane) as cluster:
        cluster.store.watch(lambda event, obj: seen.append((event, obj.get("status", {})))
                            if obj.get("kind") == "Pod" and obj["metadata"]["name"] == "plain" else None)
        cluster.store.create({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "plain", "namespace": "default"},
                              "spec": {"restartPolicy": "Always", "terminationGracePeriodSeconds": 5, "containers": [
                                  {"name": "c", "image": "busybox:1.36",
                                   "command": [sys.executable, "-c", SLEEPS, str(ready)]}]}})
        cluster.wait_for(ready.exists, 60, what="the pod's container running")
        assert cluster.control_plane is not None
        cluster.control_plane.kubectl("delete", "pod", "plain", "--wait=false")
        cluster.wait_for(lambda: seen and seen[-1][0] == DELETED, 30, what="the pod gone")
    terminal = [status for event, status in seen if status.get("phase") in ("Failed", "Succeeded")]
    assert terminal and terminal[0]["phase"] == "Failed"
    assert terminal[0]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 143
    assert seen[-1][1]["phase"] == "Failed"  # the last status it had, as the API server removed it
