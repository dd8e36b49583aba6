"""docs/write-a-job.md's recipe for killing one pod's process kills that pod's process and nothing else:
not its twin in the same job running the same command line, and not a process of another checkout's
cluster with the same pod name (each pod's processes have its own folder of the state directory first
on their PATH, which is what the recipe matches)."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from localcluster.cluster import LocalCluster

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
GUIDE = REPO / "docs" / "write-a-job.md"
SCRIPT = "examples/digits/train.py"  # what the recipe's pgrep looks for
SLEEP = [sys.executable, "-c", "import time; time.sleep(120)", SCRIPT]


def recipe() -> tuple[str, str]:
    """The recipe's shell lines (from `pod=` to `done`) and the pod they name."""
    block = next(b for b in re.findall(r"```sh\n(.*?)```", GUIDE.read_text(), re.S) if "pgrep" in b)
    lines = block.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("pod="))
    end = next(i for i, line in enumerate(lines) if line.strip() == "done")
    [pod] = re.findall(r"/pods/default/([a-z0-9-]+)/", lines[start])
    assert SCRIPT in "\n".join(lines[start:end + 1])
    return "\n".join(lines[start:end + 1]) + "\n", pod


def job(name: str) -> dict:
    """Two workers that run the same command line and wait."""
    container = {"name": "mxnet", "image": "mxjob/digits-example:1.9.1", "command": SLEEP}
    return {"apiVersion": "kubeflow.org/v1", "kind": "MXJob", "metadata": {"name": name},
            "spec": {"runPolicy": {"cleanPodPolicy": "None"},
                     "mxReplicaSpecs": {"Worker": {"replicas": 2, "restartPolicy": "Never",
                                                   "template": {"spec": {"containers": [container]}}}}}}


def terminated(cluster: LocalCluster, pod: str) -> dict | None:
    found = cluster.pod(pod)
    statuses = (found or {}).get("status", {}).get("containerStatuses", [])
    return statuses[0].get("state", {}).get("terminated") if statuses else None


def test_the_guides_kill_recipe_kills_only_the_pod_it_names(tmp_path: Path):
    shell, named = recipe()
    name = "kill-recipe"
    victim, twin = f"{name}-worker-0", f"{name}-worker-1"
    shell = shell.replace(f"/{named}/", f"/{victim}/")  # the guide's pod, here one of two twins
    # Another checkout's cluster: the same pod name and command line, its own state directory.
    elsewhere = tmp_path / "elsewhere" / ".localcluster" / "pods" / "default" / victim / "uid" / "bin"
    decoy = subprocess.Popen(SLEEP, env={**os.environ, "PATH": f"{elsewhere}:{os.environ['PATH']}"})
    try:
        with LocalCluster(tmp_path / ".localcluster") as cluster:
            cluster.submit(job(name))
            for pod in (victim, twin):
                cluster.wait_for(lambda pod=pod: (cluster.pod(pod) or {}).get("status", {}).get("phase") == "Running",
                                 60, interval=0.2, what=f"{pod} running")
            subprocess.run(["bash", "-c", shell], cwd=tmp_path, check=True, timeout=30)
            ended = cluster.wait_for(lambda: terminated(cluster, victim), 30, interval=0.2, what=f"{victim} ended")
            assert ended["exitCode"] == 137
            assert terminated(cluster, twin) is None and cluster.pod(twin)["status"]["phase"] == "Running"
            assert decoy.poll() is None
    finally:
        decoy.kill()
        decoy.wait()
