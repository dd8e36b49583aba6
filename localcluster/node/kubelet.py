"""The process kubelet: watches the store for Pods and runs each one's lifecycle in a PodWorker thread.

Owns: running the pods bound to its Node, the order of a pod's life (volumes, init
containers one after another, app containers together, restarts, eviction, termination and removal
from the store), the requests other threads make (delete, evict, kill, stop), `pod.json` copies for
the kubectl stand-in, log file locations and the cleanup of pod folders. The parts it drives live
beside it: podprocess.py (a container's process: start, signals, exit codes, restart backoff, log
lines), podsandbox.py (what a process sees: env, `$(NAME)` expansion, volumes and mountPaths,
stand-in binaries, hosts file and DNS registration, exec registrations), podstatus.py (phase,
conditions, readiness, containerStatuses, the status write).

Decisions (docs/localcluster.md says the same):
- The image is ignored; `command` + `args` run in the current Python environment (`python` means
  this interpreter, sys.executable) with cwd = the repository root unless `workingDir` is set.
- Init containers run first, one after another; app containers then start together.
- The env starts from a small host allowlist (PATH with this venv first, HOME, LANG, ...), not the
  whole host env, so host DMLC_* settings cannot leak in; then the container's env resolved as the
  kubelet does (podenv: configMapKeyRef, fieldRef, `$(VAR)` expansion), then the DNS stand-in's
  rewrite (ports; names too where DNS cannot be strict, see dns.py), then loopback-only ps-lite
  settings (podsandbox.LOOPBACK_ENV). A missing ConfigMap keeps the
  container waiting (CreateContainerConfigError) and is retried, as in a cluster.
- restartPolicy is honoured with a scaled-down crash-loop backoff (RESTART_BACKOFF, not 10 s..5 min).
- Deletion: SIGTERM to the container's process group, SIGKILL after the grace period, then the
  terminal status (phase Failed, or Succeeded when every container exited 0; each container
  terminated), then the Pod is removed from the store, as a kubelet does.
- What daemonized out of a container's process group ends with the container, as with its cgroup
  (proctrack.py: an environment marker per container).
- Scheduling is not the kubelet's: it runs only the pods bound to its Node (registration.py, which it
  registers and keeps Ready with a heartbeat), by kube-scheduler or, for a gang's pods, by the gang
  stand-in (gang.py). A pod nothing has bound is not its business.
- Volumes (volumes.py): emptyDir, configMap and projected volumes are directories under the pod's
  state dir (the ServiceAccount token requested from the API server, bound to the pod), and
  mountPaths are rewritten to them in command, args, workingDir and env; the `kubernetes` Service
  env (KUBERNETES_SERVICE_HOST, ...) names the local kube-apiserver. `spec.hostname` is the
  pod's HOSTNAME and what a `hostname` stand-in on its PATH prints; a `kubectl` stand-in on its PATH
  runs `kubectl exec` in another pod's environment (kubectl.py). An init container whose image is a
  kubectl image is not run (its image is not here): the kubelet puts the stand-in into the emptyDirs
  it mounts, where it would have copied kubectl, and reports it Completed.
"""

from __future__ import annotations

import json
import shutil
import signal
import threading
import time
import traceback
from pathlib import Path
from typing import Any

from localcluster.config import REPO_ROOT
from localcluster.node import proctrack
from localcluster.node.dns import ClusterDNS
from localcluster.node.noprocess import NOPROCESS, NoProcessNode, wants_noprocess
from localcluster.node.podenv import EnvError
from localcluster.node.podprocess import (
    POLL_SECONDS,
    RESTART_BACKOFF,
    ContainerRun,
    backoff,
    is_kubectl_image,
    over_memory_limit,
    record_completed_without_process,
    record_exit,
    record_never_ended,
    record_start_error,
    settle,
    signal_all,
    signal_one,
    spawn,
)
from localcluster.node.podsandbox import PodSandbox
from localcluster.node.podstatus import PodStatusReport, pod_phase
from localcluster.node.registration import NODE_NAME, NodeHeartbeat
from localcluster.node.volumes import VolumeNotReady
from localcluster.store import DELETED, ObjectStore, controller_of, now_rfc3339
from localcluster.types import KubeObject

CONFIG_RETRY_SECONDS = 0.5  # how soon a container waiting for its ConfigMap tries again
VOLUME_RETRY_SECONDS = 0.2  # how soon a pod waiting for a configMap volume's ConfigMap tries again


class ProcessKubelet:
    """Watches the store for Pods and runs each in a PodWorker thread."""

    def __init__(self, store: ObjectStore, dns: ClusterDNS, log_dir: Path, *, workdir: Path = REPO_ROOT,
                 restart_backoff: tuple[float, float] = RESTART_BACKOFF, node: NodeHeartbeat | None = None,
                 mode: str = "process"):
        """`mode` "noprocess" runs every pod on the no-process node (noprocess.py: Running without a
        process, for scale measurements); "process" runs processes, except for pods whose
        `localcluster.kubeflow.org/kubelet` annotation is "noprocess". `node` registers the Node and keeps
        it Ready while the kubelet runs (None: a test's store that has no scheduler)."""
        if mode not in ("process", NOPROCESS):
            raise ValueError(f"kubelet mode must be 'process' or 'noprocess', not {mode!r}")
        self.store, self.dns, self.log_dir, self.workdir = store, dns, Path(log_dir), Path(workdir)
        self.mode = mode
        self._noprocess: NoProcessNode | None = None
        self.pods_dir = self.log_dir / "pods"  # volumes, stand-in binaries and exec registrations per pod
        self.restart_backoff = restart_backoff
        self.node = node
        self._workers: dict[tuple[str, str], PodWorker] = {}
        self._pod_dirs: set[Path] = set()  # every pod folder this kubelet made, removed at stop
        self._recorded: dict[Path, tuple[str, int, bool]] = {}  # pod.json: (uid, resourceVersion, deleted)
        self._stopping: list[PodWorker] = []
        self._lock = threading.Lock()
        self._stopped = False

    def start(self) -> None:
        """Register the Node, then begin running the Pods bound to it (existing and future)."""
        if self.node is not None:
            self.node.register()
            self.node.start()
        self.store.watch(self._on_event)
        for pod in self.store.list("v1", "Pod"):
            self._on_event("ADDED", pod)

    def _on_event(self, event: str, obj: KubeObject) -> None:
        if obj.get("kind") != "Pod" or obj.get("apiVersion") != "v1" or self._stopped:
            return
        if obj.get("spec", {}).get("nodeName") != NODE_NAME:
            return  # not bound yet (the scheduler's), or another node's; a binding comes as a MODIFIED event
        if self.mode == NOPROCESS or wants_noprocess(obj):
            self.noprocess.on_event(event, obj)
            return
        meta = obj["metadata"]
        key = (meta["namespace"], meta["name"])
        with self._lock:
            self._record(event, obj)
            worker = self._workers.get(key)
            if worker is not None and worker.uid != meta["uid"]:
                worker = None  # a new Pod with the name of one that is gone
            if event == DELETED:
                if worker is not None:
                    worker.force_stop()
                    self._workers.pop(key, None)
                return
            if worker is None:
                if meta.get("deletionTimestamp"):
                    # Bound here, but nothing runs it (a kubelet restart): confirm the deletion, as a kubelet does.
                    threading.Thread(target=self.store.remove, args=("v1", "Pod", meta["namespace"], meta["name"]),
                                     kwargs={"uid": meta["uid"]}, daemon=True).start()
                    return
                worker = PodWorker(self, obj)
                self._workers[key] = worker
                self._pod_dirs.add(worker.sandbox.pod_dir)
                worker.start()
            elif meta.get("deletionTimestamp"):
                worker.request_termination(float(meta.get("deletionGracePeriodSeconds", 30)))

    @property
    def noprocess(self) -> NoProcessNode:
        """The no-process node, made when the first pod goes there."""
        with self._lock:
            if self._noprocess is None:
                self._noprocess = NoProcessNode(self.store, node_name=NODE_NAME)
            return self._noprocess

    def _record(self, event: str, pod: KubeObject) -> None:
        """Keep `<pods_dir>/<ns>/<name>/pod.json` as the API server's copy, for `kubectl get` in pods.

        Watchers run on the writer's thread, so events of one Pod can arrive out of order: an
        older resourceVersion never replaces a newer one.
        """
        meta = pod["metadata"]
        path = self.pods_dir / meta["namespace"] / meta["name"] / "pod.json"
        version = int(meta.get("resourceVersion") or 0)
        uid, last, gone = self._recorded.get(path, ("", -1, False))
        if (uid == meta["uid"] and gone) or version < last:
            return  # a late event of a deleted Pod, or older than what is there
        self._recorded[path] = (meta["uid"], version, event == DELETED)
        if event == DELETED:
            path.unlink(missing_ok=True)
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(pod))
        tmp.replace(path)

    def _forget(self, worker: PodWorker) -> None:
        with self._lock:
            if self._workers.get(worker.key) is worker:
                del self._workers[worker.key]

    def worker(self, namespace: str, name: str) -> PodWorker:
        """The worker running a Pod (KeyError when none)."""
        with self._lock:
            return self._workers[(namespace, name)]

    def log_path(self, pod: KubeObject, container: str) -> Path:
        """Where a container's output goes: `<log_dir>/<namespace>/[<owner>/]<pod>[.<container>].log`."""
        meta = pod["metadata"]
        top = self.top_owner(pod)
        owner = [top] if top else []
        containers = pod.get("spec", {}).get("containers", [])
        first = containers[0]["name"] if containers else None
        suffix = "" if container == first else f".{container}"
        return self.log_dir.joinpath(meta["namespace"], *owner, f"{meta['name']}{suffix}.log")

    def top_owner(self, obj: KubeObject) -> str | None:
        """The name at the top of an object's controller chain (a ChainerJob pod: Pod → Job → ChainerJob)."""
        name = None
        for _ in range(5):
            meta = obj["metadata"]
            ref = controller_of(obj)
            if ref is None:
                return name
            name = ref["name"]
            owner = self.store.get(ref.get("apiVersion", ""), ref.get("kind", ""), meta.get("namespace", "default"), name)
            if owner is None:
                return name
            obj = owner
        return name

    # --- fault injection -------------------------------------------------------------------------

    def kill(self, namespace: str, name: str, container: str | None = None, sig: int = signal.SIGKILL) -> int:
        """Send a signal to a container's process group (the first container by default); its pid."""
        return self.worker(namespace, name).signal(container, sig)

    def evict(self, namespace: str, name: str, message: str = "The node was low on resource.") -> None:
        """Evict a Pod as the kubelet does under pressure: stop its containers, phase Failed, reason Evicted."""
        self.worker(namespace, name).request_eviction(message)

    def kill_all(self) -> None:
        """SIGKILL every container process now, also of pods that `stop` is already stopping."""
        with self._lock:
            workers = list(self._workers.values()) + self._stopping
        for worker in workers:
            worker.kill_all(signal.SIGKILL)
            proctrack.stop(worker.uid)

    def stop(self, grace: float = 2.0) -> None:
        """Stop every process (SIGTERM, SIGKILL after `grace`) and every worker thread."""
        self._stopped = True
        if self.node is not None:
            self.node.stop()
        if self._noprocess is not None:
            self._noprocess.stop()
        with self._lock:
            workers = list(self._workers.values())
            self._workers.clear()
            self._stopping = workers
        for worker in workers:
            worker.request_shutdown(grace)
        for worker in workers:
            worker.join(timeout=grace + 5)
        if any(worker.is_alive() for worker in workers):
            # A pod deleted shortly before still waits out its own, longer grace period (a stopped
            # process never ends on SIGTERM): the cluster does not wait for it, nor leave it running.
            self.kill_all()
            for worker in workers:
                worker.join(timeout=5)
        self._remove_pod_dirs()

    def _remove_pod_dirs(self) -> None:
        """Volumes, stand-in binaries and pod.json go with the run (logs stay): a real kubelet
        removes a pod's emptyDirs with the pod, and nothing reads them once every process is gone."""
        if any(w.is_alive() for w in self._stopping):
            return  # a container outlived its SIGKILL: leave its files alone
        with self._lock:
            dirs, self._pod_dirs = sorted(self._pod_dirs), set()
        for folder in dirs:
            shutil.rmtree(folder, ignore_errors=True)
            for parent in (folder.parent, folder.parent.parent):
                try:
                    parent.rmdir()  # only when empty: another run may share the state dir
                except OSError:
                    break


class PodWorker(threading.Thread):
    """Runs one Pod from admission to removal, writing its status to the store like the kubelet."""

    def __init__(self, kubelet: ProcessKubelet, pod: KubeObject):
        meta = pod["metadata"]
        super().__init__(name=f"pod-{meta['name']}", daemon=True)
        self.kubelet, self.pod = kubelet, pod
        self.key = (meta["namespace"], meta["name"])
        self.uid = meta["uid"]
        self.spec: dict[str, Any] = pod.get("spec", {})
        self.policy = self.spec.get("restartPolicy", "Always")
        self.init_runs = [ContainerRun(c, init=True) for c in self.spec.get("initContainers", [])]
        self.runs = [ContainerRun(c) for c in self.spec.get("containers", [])]
        self.sandbox = PodSandbox(pod, pods_dir=kubelet.pods_dir, store=kubelet.store, dns=kubelet.dns,
                                  workdir=kubelet.workdir)
        self.report = PodStatusReport(kubelet.store, *self.key, uid=self.uid)
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._terminate_grace: float | None = None
        self._evict_message: str | None = None
        self._shutdown = False
        self._forced = False
        self._deleted = False  # its containers were stopped for its deletion: the phase is terminal
        self._containers_started = False
        self._init_failed = False
        self._first_container = self.runs[0].name if self.runs else None

    # --- requests from other threads -------------------------------------------------------------

    def request_termination(self, grace: float) -> None:
        with self._lock:
            if self._terminate_grace is None:
                self._terminate_grace = grace
        self._wake.set()

    def request_eviction(self, message: str) -> None:
        with self._lock:
            self._evict_message = message
        self._wake.set()

    def request_shutdown(self, grace: float) -> None:
        with self._lock:
            self._shutdown = True
            self._terminate_grace = grace if self._terminate_grace is None else min(grace, self._terminate_grace)
        self._wake.set()

    def force_stop(self) -> None:
        """The Pod vanished from the store (force delete): kill what runs, write nothing."""
        with self._lock:
            self._forced = True
            self._terminate_grace = 0.0
        self._wake.set()

    def signal(self, container: str | None, sig: int) -> int:
        with self._lock:
            return signal_one(self.init_runs + self.runs, container, sig, pod=self.key[1])

    def kill_all(self, sig: int) -> None:
        """Send `sig` to every container's process group now."""
        with self._lock:
            signal_all(self.init_runs + self.runs, sig)

    # --- the worker thread -----------------------------------------------------------------------

    def run(self) -> None:
        try:
            self._run()
        except Exception:  # a kubelet bug must not leave processes behind
            traceback.print_exc()
            self.kill_all(signal.SIGKILL)
            proctrack.stop(self.uid)
        finally:
            for run in self.init_runs + self.runs:
                run.close_log()
            self.kubelet._forget(self)

    def _run(self) -> None:
        if self._stopping():
            self._terminate()
            return
        self._write_status()
        init_ok = self._prepare() and self._run_init_containers()
        if init_ok:
            for run in self.runs:
                self._start(run)
            self._containers_started = True
            self.report.condition("Initialized", "True")
            self._step()  # a container that failed to start goes to CrashLoopBackOff before the first report
        self._write_status()
        while init_ok and not self._stopping():
            if self._step():
                self._write_status()
            self._wake.wait(POLL_SECONDS)
            self._wake.clear()
        # Finished (Succeeded/Failed) pods stay until deleted, as in Kubernetes.
        while not self._stopping():
            self._wake.wait(1.0)
            self._wake.clear()
        if self._evict_message is not None and self._terminate_grace is None:
            self._evict()
            while not self._stopping():
                self._wake.wait(1.0)
                self._wake.clear()
        self._terminate()

    def _prepare(self) -> bool:
        """Volumes and stand-in binaries; waits (ContainerCreating) while a ConfigMap is missing or a
        ServiceAccount token cannot be had, as the kubelet does."""
        while True:
            try:
                unsupported = self.sandbox.prepare()
                break
            except VolumeNotReady as err:
                for run in self.init_runs + self.runs:
                    run.state = {"waiting": {"reason": "ContainerCreating", "message": f"MountVolume.SetUp failed: {err}"}}
                self._write_status()
                if not self._sleep_until(time.monotonic() + VOLUME_RETRY_SECONDS):
                    return False
        if unsupported:
            log = self.kubelet.log_path(self.pod, self._first_container or "pod")
            log.parent.mkdir(parents=True, exist_ok=True)
            with log.open("a") as out:
                out.write(f"=== localcluster: volumes not emulated (left out of the path mapping): {', '.join(unsupported)}\n")
        return True

    def _stopping(self) -> bool:
        with self._lock:
            evicting = self._evict_message is not None and not self.report.evicted
            return self._terminate_grace is not None or evicting

    def _run_init_containers(self) -> bool:
        """Run init containers in order; False if the Pod ends (failed or stopping) before app containers."""
        for run in self.init_runs:
            while True:
                self._start(run)
                self._write_status()
                if run.config_retry_at is not None:
                    if not self._sleep_until(run.config_retry_at):
                        return False
                    run.config_retry_at = None
                    continue
                while run.alive():
                    if self._stopping():
                        return False
                    self._wake.wait(POLL_SECONDS)
                    self._wake.clear()
                self._record_exit(run)
                if run.exit_code == 0:
                    break
                if self.policy == "Never":
                    self._init_failed = True
                    self._write_status()
                    return False
                self._write_status()
                if not self._sleep_until(time.monotonic() + backoff(run, self.kubelet.restart_backoff)):
                    return False
                run.last_state, run.restart_count = {"terminated": run.state["terminated"]}, run.restart_count + 1
        return True

    def _sleep_until(self, deadline: float) -> bool:
        while time.monotonic() < deadline:
            if self._stopping():
                return False
            self._wake.wait(min(POLL_SECONDS * 4, deadline - time.monotonic()))
            self._wake.clear()
        return not self._stopping()

    def _step(self) -> bool:
        """Reap exits, restart per policy; True when the status needs writing."""
        changed = False
        now = time.monotonic()
        for run in self.runs:
            # Restart first, then settle: a container that cannot start at all (StartError) is put
            # back into CrashLoopBackOff in the same step, so the pod never shows phase Failed under
            # OnFailure/Always (which would make the operator recreate it in a tight loop).
            if run.restart_at is not None and now >= run.restart_at:
                run.restart_at = None
                run.restart_count += 1
                self._start(run)
                changed = True
            over_memory_limit(run)  # killed now: its exit is reaped below or on the next step
            if run.process is not None and run.process.poll() is not None:
                self._record_exit(run)
                changed = True
            if "terminated" in run.state and not run.settled:
                settle(run, policy=self.policy, now=now, restart_backoff=self.kubelet.restart_backoff)
                changed = True
            if run.config_retry_at is not None and now >= run.config_retry_at:
                run.config_retry_at = None
                self._start(run)
                changed = True
        return changed

    def _start(self, run: ContainerRun) -> None:
        """Start a container's process; a start failure is a terminated state with exit code 128."""
        try:
            env, declared = self.sandbox.env(run.container)
        except EnvError as err:
            run.state = {"waiting": {"reason": "CreateContainerConfigError", "message": str(err)}}
            run.config_retry_at = time.monotonic() + CONFIG_RETRY_SECONDS
            return
        env = proctrack.tagged(env, self.uid, run.name)  # also in what is exec'd into it (publish)
        self.sandbox.fresh_tmp(run.name)
        argv, workdir = self.sandbox.command(run.container, declared)
        log = run.open_log(self.kubelet.log_path(self.pod, run.name))
        started = now_rfc3339()
        run.settled = False
        log.write(f"=== localcluster: pod {self.key[1]} container {run.name} start #{run.restart_count} at {started}: {argv}\n")
        if run.init and is_kubectl_image(run.container.get("image", "")):
            targets = self.sandbox.deliver_kubectl(run.container)
            log.write(f"=== localcluster: image {run.container.get('image')} is a kubectl image: not run; the kubectl "
                      f"stand-in was put into {', '.join(targets) or 'no emptyDir'} instead\n")
            record_completed_without_process(run, started)
            return
        with self._lock:
            error = spawn(run, argv, env=env, workdir=workdir, wrap=self.sandbox.wrapper())
        if error is not None:
            record_start_error(run, error, started)
            return
        self.sandbox.publish(run.name, first=run.name == self._first_container and not run.init, env=env, workdir=workdir)
        run.state = {"running": {"startedAt": started}}

    def _record_exit(self, run: ContainerRun) -> None:
        if run.process is None or "terminated" in run.state:
            return
        self.sandbox.unpublish(run.name)
        record_exit(run)
        proctrack.stop(self.uid, run.name)  # what left its process group dies with it, as with its cgroup

    def _write_status(self) -> None:
        """Compute the Pod's status and write it (each write wakes the controller)."""
        phase = pod_phase(self.runs, policy=self.policy, containers_started=self._containers_started,
                          failed=self._init_failed or self.report.evicted, deleted=self._deleted)
        status = self.report.compose(phase, self.runs, self.init_runs)
        if not self._forced:
            self.report.write(status)

    def _stop_processes(self, grace: float) -> None:
        """SIGTERM, then SIGKILL once `grace` has passed."""
        self.kill_all(signal.SIGTERM)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and any(r.alive() for r in self.init_runs + self.runs):
            time.sleep(POLL_SECONDS)
        self.kill_all(signal.SIGKILL)
        for run in self.init_runs + self.runs:
            self._record_exit(run)
            run.restart_at = None
            run.settled = True
        proctrack.stop(self.uid)  # also of containers that ended before: a pod leaves nothing behind

    def _evict(self) -> None:
        grace = float(self.spec.get("terminationGracePeriodSeconds", 30))
        self._stop_processes(grace)
        self.report.evict(self._evict_message or "")
        self._write_status()

    def _terminate(self) -> None:
        """Stop the containers, write the terminal status, then remove the Pod from the store (unless
        the whole cluster stops).

        The terminal status comes first, as a kubelet (since Kubernetes 1.27) writes it for a pod it
        stops on deletion: every container terminated, phase Failed (Succeeded only when every
        container exited 0). Kueue's finalizer holds a deleted pod until it sees a terminal phase, and
        the Job controller counts a deleted pod by it; the removal waits for the finalizers.
        """
        with self._lock:
            grace = self._terminate_grace if self._terminate_grace is not None else 0.0
        self._stop_processes(grace)
        self.sandbox.unregister()
        if not self._shutdown and not self._forced:
            for run in self.init_runs + self.runs:
                record_never_ended(run)
            self._deleted = True
            self._write_status()
            self.kubelet.store.remove("v1", "Pod", *self.key, uid=self.uid)
