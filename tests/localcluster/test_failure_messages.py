"""What a Failed MXJob says about the process that ended it: real processes on the local cluster, on
the real control plane (docs/lifecycle.md, "Why a job failed").

Each worker is a small Python script, not MXNet: what is under test is the line the Failed
condition quotes from the pod's termination message, which the kubelet fills from the tail of the
log (FallbackToLogsOnError: its last 80 lines, 2,048 bytes), and how the end of the process is
named. The OOM-style kill is the process kubelet's: it enforces `resources.limits.memory` by
SIGKILLing the container's process group once its resident memory is over the limit, and reports
exit code 137 with reason OOMKilled, as a kubelet does for a container its memory cgroup killed.
"""
from __future__ import annotations

import signal
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from localcluster.cluster import LocalCluster, condition, finished
from localcluster.controlplane.processes import ControlPlane
from localcluster.types import KubeObject

pytestmark = [pytest.mark.e2e, pytest.mark.apiserver]

# 200 lines of progress, 40 to 60 bytes each: the last 80 are more than 2,048 bytes, so the kubelet's
# tail begins in the middle of a line (the line the Failed message once quoted).
PROGRESS = "for n in range(200): print(f'epoch {n} loss={n / 1000:.3f} accuracy=0.{n:03d} lr=0.1 step={n * 40}')\n"
CHECKPOINT = PROGRESS + "print('ERROR: checkpoint /data/ckpt is not writable'); raise SystemExit(1)\n"
TRACEBACK = PROGRESS + "def main():\n    raise ValueError('the learning rate must be positive')\nmain()\n"
# Waits to be killed; the kill comes once it has said it is ready.
SIGKILLED = PROGRESS + "import time\nprint('ready', flush=True)\ntime.sleep(120)\n"
# Takes memory 4 MiB at a time (filled, so it is resident) until the limit stops it.
HUNGRY = ("import time\nheld = []\nfor n in range(1, 101):\n"
          "    held.append(bytearray(b'\\x01') * (4 << 20))\n"
          "    print(f'allocated {4 * n} MiB', flush=True)\n    time.sleep(0.02)\nprint('never stopped')\n")
MEMORY_LIMIT = "64Mi"


@pytest.fixture
def cluster(tmp_path: Path, cluster_plane: ControlPlane) -> Iterator[LocalCluster]:
    with LocalCluster(tmp_path / "state", control_plane=cluster_plane,
                      restart_backoff=(0.2, 1.0)) as c:
        yield c


def worker_job(name: str, namespace: str, script: str, *, policy: str = "Never", limit: str | None = None,
               **run_policy) -> KubeObject:
    container: dict = {"name": "mxnet", "image": "python:3.12", "command": ["python", "-u", "-c", script]}
    if limit is not None:
        container["resources"] = {"limits": {"memory": limit}}
    return {"apiVersion": "kubeflow.org/v1", "kind": "MXJob", "metadata": {"name": name, "namespace": namespace},
            "spec": {"runPolicy": run_policy, "mxReplicaSpecs": {"Worker": {
                "replicas": 1, "restartPolicy": policy,
                "template": {"spec": {"terminationGracePeriodSeconds": 1, "containers": [container]}}}}}}


def failed_message(job: KubeObject) -> str:
    assert finished(job) == "Failed", job.get("status")
    return condition(job, "Failed")["message"]  # type: ignore[index]


def gone(cluster: LocalCluster, name: str, namespace: str) -> Callable[[], KubeObject | None]:
    """The job once the TTL has run: cleanedUpTime set and no pod left."""
    def check() -> KubeObject | None:
        job = cluster.get_job(name, namespace)
        return job if job and job["status"].get("cleanedUpTime") and not cluster.pods(name, namespace) else None
    return check


def test_the_error_printed_last_ends_the_message_and_stays_after_the_pods_are_gone(cluster: LocalCluster,
                                                                                    namespace: str):
    # OnFailure: the kubelet restarts the container in place, which backoffLimit 0 does not allow.
    cluster.submit(worker_job("ckpt", namespace, CHECKPOINT, policy="OnFailure", backoffLimit=0,
                              cleanPodPolicy="All", ttlSecondsAfterFinished=0))
    done = cluster.wait_finished("ckpt", timeout=60, namespace=namespace)
    message = failed_message(done)
    assert message == (f"MXJob {namespace}/ckpt has reached the specified backoff limit: 1 restarts, backoffLimit 0; pod "
                       "ckpt-worker-0 was lost (exit code 1, reason Error: 'ERROR: checkpoint /data/ckpt is not "
                       "writable').")
    after = cluster.wait_for(gone(cluster, "ckpt", namespace), 30, what="the pods cleaned up")
    assert failed_message(after) == message
    outcome = cluster.store.get("v1", "ConfigMap", namespace, "ckpt-outcome")
    assert outcome is not None and "ERROR: checkpoint /data/ckpt is not writable" in outcome["data"]["record"]


def test_a_python_traceback_is_quoted_by_its_exception_line(cluster: LocalCluster, namespace: str):
    cluster.submit(worker_job("trace", namespace, TRACEBACK))
    message = failed_message(cluster.wait_finished("trace", timeout=60, namespace=namespace))
    assert message == (f"MXJob {namespace}/trace failed: Worker 0 (pod trace-worker-0) failed with exit code 1, reason Error: "
                       "'ValueError: the learning rate must be positive'; restartPolicy Never does not retry."
                       )


def test_a_sigkilled_process_is_named_as_killed_and_its_last_log_line_said_as_only_that(cluster: LocalCluster,
                                                                                       namespace: str):
    cluster.submit(worker_job("killed", namespace, SIGKILLED))
    # A line of its own: the kubelet's start line quotes the script, 'ready' included.
    cluster.wait_for(lambda: "ready" in _log(cluster, "killed-worker-0", namespace).splitlines(), 60,
                     what="the worker ready")
    cluster.kubelet.kill(namespace, "killed-worker-0", sig=signal.SIGKILL)
    message = failed_message(cluster.wait_finished("killed", timeout=60, namespace=namespace))
    assert message == (f"MXJob {namespace}/killed failed: Worker 0 (pod killed-worker-0) failed with exit code 137, killed by "
                       "SIGKILL, reason Error, last log line: 'ready'; restartPolicy Never does not retry."
                       )


def test_a_process_over_its_memory_limit_is_oom_killed_and_says_so(cluster: LocalCluster, namespace: str):
    cluster.submit(worker_job("hungry", namespace, HUNGRY, limit=MEMORY_LIMIT))
    done = cluster.wait_finished("hungry", timeout=60, namespace=namespace)
    message = failed_message(done)
    prefix = (f"MXJob {namespace}/hungry failed: Worker 0 (pod hungry-worker-0) failed with exit code 137, killed by "
              "SIGKILL, reason OOMKilled, last log line: 'allocated ")
    assert message.startswith(prefix) and message.endswith(" MiB'; restartPolicy Never does not retry."), message
    allocated = int(message[len(prefix):].split()[0])
    # Killed at the limit: past it by at most what one 50 ms poll lets it take (4 MiB per 20 ms).
    assert 40 <= allocated <= 64 + 16, allocated
    log = _log(cluster, "hungry-worker-0", namespace)
    assert "never stopped" not in log.splitlines()  # (the start line quotes the script)
    terminated = cluster.pod("hungry-worker-0", namespace)["status"]["containerStatuses"][0]["state"]["terminated"]
    assert (terminated["exitCode"], terminated["reason"]) == (137, "OOMKilled")


def _log(cluster: LocalCluster, pod: str, namespace: str) -> str:
    """The pod's log so far; "" before the pod exists or has written one."""
    if cluster.pod(pod, namespace) is None:
        return ""
    path = cluster.log_path(pod, namespace=namespace)
    return path.read_text() if path.exists() else ""
