"""A node without processes, as kwok's fake nodes: pods bound to it are reported Running (Ready) and
nothing runs. For scale measurements only (benchmarks/scale_bench.py); never for the tests that run
real MXNet or ChainerMN.

A pod ends only when asked, by two annotations of the pod (set them in a job's pod template):
- `localcluster.kubeflow.org/exit-after-seconds`: its main container "exits" that long after it
  started running (absent: it runs until deleted);
- `localcluster.kubeflow.org/exit-code`: with this code (default 0).
The exit follows the restart policy as the kubelet does: under `Never` (or `OnFailure` with code 0)
the pod ends Succeeded or Failed; otherwise the container is restarted at once (restartCount + 1,
lastState terminated) and exits again after the same time. Every container of the pod is reported
with the same state. Deletion is immediate: there is nothing to stop, so a deleted pod is removed
(grace 0) as soon as its deletionTimestamp is seen.

One pod costs no thread: one timer thread keeps the due steps in a heap and a few writer threads
(WRITERS) do the API calls, so thousands of pods fit in one process.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
import traceback
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from localcluster.node.podstatus import keep_others
from localcluster.ports import LOOPBACK
from localcluster.store import ObjectStore, StoreError, now_rfc3339
from localcluster.types import KubeObject

ANNOTATION_PREFIX = "localcluster.kubeflow.org/"
KUBELET_ANNOTATION = ANNOTATION_PREFIX + "kubelet"  # "noprocess": this pod goes to the no-process node
EXIT_CODE_ANNOTATION = ANNOTATION_PREFIX + "exit-code"
EXIT_AFTER_ANNOTATION = ANNOTATION_PREFIX + "exit-after-seconds"
NOPROCESS = "noprocess"
WRITERS = 4  # concurrent API writers (status writes)


def wants_noprocess(pod: KubeObject) -> bool:
    """Whether a pod asks for the no-process node (its annotation)."""
    return ((pod.get("metadata") or {}).get("annotations") or {}).get(KUBELET_ANNOTATION) == NOPROCESS


def exit_plan(pod: KubeObject) -> tuple[float | None, int]:
    """(seconds until the main container exits, or None: never; its exit code) from the annotations."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    after = annotations.get(EXIT_AFTER_ANNOTATION)
    try:
        seconds = float(after) if after is not None else None
    except ValueError:
        seconds = None
    try:
        code = int(annotations.get(EXIT_CODE_ANNOTATION, "0"))
    except ValueError:
        code = 1
    return seconds, code


@dataclass
class _Pod:
    namespace: str
    name: str
    uid: str
    spec: dict[str, Any]
    exit_after: float | None
    exit_code: int
    lock: threading.Lock = field(default_factory=threading.Lock)
    phase: str = "Pending"
    started_at: str = ""
    start_time: str = field(default_factory=now_rfc3339)
    ready_since: str = ""
    restarts: int = 0
    last_state: dict[str, Any] = field(default_factory=dict)
    state: dict[str, Any] = field(default_factory=dict)
    gone: bool = False


class NoProcessNode:
    """Runs pods bound to the node without processes: report Running, and end them when their annotations say."""

    def __init__(self, store: ObjectStore, *, node_name: str, writers: int = WRITERS):
        self.store, self.node_name = store, node_name
        self._pods: dict[tuple[str, str], _Pod] = {}
        self._lock = threading.Lock()
        self._heap: list[tuple[float, int, Callable[[], None]]] = []
        self._seq = itertools.count()
        self._wake = threading.Condition(self._lock)
        self._pool = ThreadPoolExecutor(max_workers=writers, thread_name_prefix="noprocess-writer")
        self._stopped = False
        self._timer = threading.Thread(target=self._run_timers, name="noprocess-timers", daemon=True)
        self._timer.start()
        self.status_writes = 0

    def __len__(self) -> int:
        with self._lock:
            return len(self._pods)

    # --- events ----------------------------------------------------------------------------------

    def on_event(self, event: str, obj: KubeObject) -> None:
        """A Pod event the kubelet routed here (its watcher thread: no API call is made on it)."""
        meta = obj["metadata"]
        key = (meta["namespace"], meta["name"])
        with self._lock:
            if self._stopped:
                return
            pod = self._pods.get(key)
            if pod is not None and pod.uid != meta["uid"]:
                pod.gone = True
                pod = None
            if event == "DELETED":
                if pod is not None:
                    pod.gone = True
                    self._pods.pop(key, None)
                return
            if meta.get("deletionTimestamp"):
                if obj.get("spec", {}).get("nodeName") == self.node_name or pod is not None:
                    self._submit(lambda: self._remove(key, meta["uid"]))
                return
            if pod is not None:
                return
            seconds, code = exit_plan(obj)
            pod = _Pod(key[0], key[1], meta["uid"], obj.get("spec") or {}, seconds, code)
            self._pods[key] = pod
        self._submit(lambda: self._admit(pod))

    def _submit(self, step: Callable[[], None]) -> None:
        if not self._stopped:
            self._pool.submit(self._guarded, step)

    def _later(self, seconds: float, step: Callable[[], None]) -> None:
        with self._lock:
            heapq.heappush(self._heap, (time.monotonic() + seconds, next(self._seq), step))
            self._wake.notify()

    @staticmethod
    def _guarded(step: Callable[[], None]) -> None:
        try:
            step()
        except StoreError:
            pass  # the pod is gone or changed under us: its next event says what to do
        except Exception:  # a bug must not stop the writers
            traceback.print_exc()

    def _run_timers(self) -> None:
        with self._lock:
            while not self._stopped:
                if not self._heap:
                    self._wake.wait()
                    continue
                due, _, step = self._heap[0]
                wait = due - time.monotonic()
                if wait > 0:
                    self._wake.wait(wait)
                    continue
                heapq.heappop(self._heap)
                self._pool.submit(self._guarded, step)

    # --- a pod's life ----------------------------------------------------------------------------

    def _admit(self, pod: _Pod) -> None:
        with pod.lock:
            if not pod.gone:
                self._start(pod)

    def _start(self, pod: _Pod) -> None:
        pod.phase, pod.started_at = "Running", now_rfc3339()
        pod.ready_since = pod.ready_since or pod.started_at
        pod.state = {"running": {"startedAt": pod.started_at}}
        self._write(pod)
        if pod.exit_after is not None:
            self._later(pod.exit_after, lambda: self._exit(pod))

    def _exit(self, pod: _Pod) -> None:
        with pod.lock:
            if pod.gone or pod.phase != "Running":
                return
            finished = now_rfc3339()
            terminated = {"exitCode": pod.exit_code, "reason": "Completed" if pod.exit_code == 0 else "Error",
                          "startedAt": pod.started_at, "finishedAt": finished}
            policy = pod.spec.get("restartPolicy", "Always")
            if policy == "Never" or (policy == "OnFailure" and pod.exit_code == 0):
                pod.phase = "Succeeded" if pod.exit_code == 0 else "Failed"
                pod.state = {"terminated": terminated}
                self._write(pod)
                return
            pod.restarts += 1
            pod.last_state = {"terminated": terminated}
            self._start(pod)

    def _remove(self, key: tuple[str, str], uid: str) -> None:
        with self._lock:
            pod = self._pods.get(key)
            if pod is not None and pod.uid == uid:
                pod.gone = True
                del self._pods[key]
        self.store.remove("v1", "Pod", *key, uid=uid)

    def _write(self, pod: _Pod) -> None:
        """The status as the kubelet reports it; every container shares the main one's state."""
        now = now_rfc3339()
        ready = "True" if pod.phase == "Running" else "False"
        conditions: list[dict[str, Any]] = [
            {"type": "Initialized", "status": "True", "lastTransitionTime": pod.start_time},
            {"type": "ContainersReady", "status": ready, "lastTransitionTime": pod.ready_since or now},
            {"type": "Ready", "status": ready, "lastTransitionTime": pod.ready_since or now}]
        status: dict[str, Any] = {"phase": pod.phase, "hostIP": LOOPBACK, "podIP": LOOPBACK, "startTime": pod.start_time,
                                  "conditions": conditions}
        if pod.state:
            status["containerStatuses"] = [
                {"name": c.get("name", ""), "image": c.get("image", ""), "ready": ready == "True", "started": ready == "True",
                 "restartCount": pod.restarts, "state": pod.state, "lastState": pod.last_state}
                for c in pod.spec.get("containers") or []]
        self.store.update_status("v1", "Pod", pod.namespace, pod.name, lambda current: keep_others(current, status),
                                 uid=pod.uid)
        self.status_writes += 1

    # --- life ------------------------------------------------------------------------------------

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            self._wake.notify_all()
        self._pool.shutdown(wait=True, cancel_futures=True)
        self._timer.join(timeout=5)
