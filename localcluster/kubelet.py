"""The process kubelet: runs each Pod's containers as local processes and reports Pod status.

Decisions (docs/localcluster.md says the same):
- The image is ignored; `command` + `args` run in the current Python environment (`python` means
  this interpreter, sys.executable) with cwd = the repository root unless `workingDir` is set.
- Init containers run first, one after another; app containers then start together.
- The env starts from a small host allowlist (PATH with this venv first, HOME, LANG, ...), not the
  whole host env, so host DMLC_* settings cannot leak in; then the container's env resolved as the
  kubelet does (podenv: configMapKeyRef, fieldRef, `$(VAR)` expansion), then the DNS stand-in's
  rewrite (ports; names too where DNS cannot be strict, see dns.py), then loopback-only ps-lite
  settings (LOOPBACK_ENV). A missing ConfigMap keeps the
  container waiting (CreateContainerConfigError) and is retried, as in a cluster.
- restartPolicy is honoured with a scaled-down crash-loop backoff (RESTART_BACKOFF, not 10 s..5 min).
- Deletion: SIGTERM to the container's process group, SIGKILL after the grace period, then the Pod
  is removed from the store.
- Scheduling: a pod is bound at once unless the `gate` (the gang scheduler, localcluster/gang.py)
  holds it back; it then stays Pending with PodScheduled False, reason Unschedulable.
- Volumes (volumes.py): emptyDir and configMap volumes are directories under the pod's state dir,
  and mountPaths are rewritten to them in command, args, workingDir and env. `spec.hostname` is the
  pod's HOSTNAME and what a `hostname` stand-in on its PATH prints; a `kubectl` stand-in on its PATH
  runs `kubectl exec` in another pod's environment (kubectl.py). An init container whose image is a
  kubectl image is not run (its image is not here): the kubelet puts the stand-in into the emptyDirs
  it mounts, where it would have copied kubectl, and reports it Completed.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO, cast

from .config import REPO_ROOT
from .dns import LOOPBACK, ClusterDNS
from .podenv import EnvError, expand, resolve_env
from .store import DELETED, Store, StoreError, now_rfc3339
from .types import Container, ContainerState, ContainerStatus, KubeObject, PodStatus
from .volumes import MissingConfigMap, PathMap, path_map, prepare_volumes, rewrite_configmap_files

NODE_NAME = "localcluster"
# ps-lite picks its own address from these; the only interface here is loopback. ps-lite's one
# use of DMLC_USE_KUBERNETES is to make the scheduler bind 0.0.0.0 (in a cluster its Service name
# does not resolve to its own address); locally that would leave loopback, so it is turned off.
LOOPBACK_ENV = {"DMLC_NODE_HOST": LOOPBACK, "DMLC_INTERFACE": "lo"}
LOOPBACK_OVERRIDES = {"DMLC_USE_KUBERNETES": "0"}
# OpenMPI 5's hierarchical collectives (HAN) hang in Allreduce when the "hosts" of a hostfile are
# pods that all share this one machine (verified with 5.0.11); the other collectives work. A
# default only: a container that sets OMPI_MCA_coll itself keeps its value.
LOCAL_DEFAULT_ENV = {"OMPI_MCA_coll": "^han"}
HOST_ENV_ALLOWLIST = ("HOME", "LANG", "LC_ALL", "TZ", "TMPDIR", "USER", "LOGNAME", "TERM")
PYTHON_NAMES = ("python", "python3", f"python{sys.version_info.major}.{sys.version_info.minor}")
RESTART_BACKOFF = (0.5, 8.0)  # first delay, cap (seconds); doubles per restart
POLL_SECONDS = 0.05
GATE_POLL_SECONDS = 0.1
SchedulingGate = Callable[[KubeObject], "str | None"]  # why a pod may not be bound yet, or None
CONFIG_RETRY_SECONDS = 0.5  # how soon a container waiting for its ConfigMap tries again


def is_kubectl_image(image: str) -> bool:
    """An image whose repository's last path element is `kubectl` (bitnami/kubectl, registry.k8s.io/kubectl)."""
    repository = image.split("@", 1)[0].rsplit("/", 1)[-1].split(":", 1)[0]
    return repository == "kubectl"


def exit_code(returncode: int) -> int:
    """A Popen return code as the kubelet reports it: a signal N becomes 128 + N."""
    return 128 - returncode if returncode < 0 else returncode


@dataclass
class _Run:
    """One container's process, or its last outcome."""

    container: Container
    init: bool = False
    process: subprocess.Popen | None = None
    log: TextIO | None = None
    restart_count: int = 0
    state: dict[str, Any] = field(default_factory=lambda: {"waiting": {"reason": "ContainerCreating"}})
    last_state: dict[str, Any] = field(default_factory=dict)
    restart_at: float | None = None
    exit_code: int | None = None
    settled: bool = False  # the restart decision for the last exit has been taken
    config_retry_at: float | None = None  # waiting for a ConfigMap (CreateContainerConfigError)

    @property
    def name(self) -> str:
        return self.container["name"]

    def status(self) -> ContainerStatus:
        """containerStatuses[] entry."""
        running = "running" in self.state
        return ContainerStatus(
            name=self.name,
            image=self.container.get("image", ""),
            ready=running and not self.init,
            started=running,
            restartCount=self.restart_count,
            state=cast(ContainerState, dict(self.state)),
            lastState=cast(ContainerState, dict(self.last_state)),
        )


class ProcessKubelet:
    """Watches the store for Pods and runs each in a PodWorker thread."""

    def __init__(
        self,
        store: Store,
        dns: ClusterDNS,
        log_dir: Path,
        *,
        workdir: Path = REPO_ROOT,
        restart_backoff: tuple[float, float] = RESTART_BACKOFF,
        gate: SchedulingGate | None = None,
    ):
        self.store, self.dns, self.log_dir, self.workdir = store, dns, Path(log_dir), Path(workdir)
        self.pods_dir = self.log_dir / "pods"  # volumes, stand-in binaries and exec registrations per pod
        self.restart_backoff = restart_backoff
        self.gate = gate
        self._workers: dict[tuple[str, str], PodWorker] = {}
        self._pod_dirs: set[Path] = set()  # every pod folder this kubelet made, removed at stop
        self._recorded: dict[Path, tuple[str, int, bool]] = {}  # pod.json: (uid, resourceVersion, deleted)
        self._stopping: list[PodWorker] = []
        self._lock = threading.Lock()
        self._stopped = False

    def start(self) -> None:
        """Begin running Pods (existing and future)."""
        self.store.watch(self._on_event)
        for pod in self.store.list("v1", "Pod"):
            self._on_event("ADDED", pod)

    def _on_event(self, event: str, obj: KubeObject) -> None:
        if obj.get("kind") != "Pod" or obj.get("apiVersion") != "v1" or self._stopped:
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
                    return
                worker = PodWorker(self, obj)
                self._workers[key] = worker
                self._pod_dirs.add(worker.pod_dir)
                worker.start()
            elif meta.get("deletionTimestamp"):
                worker.request_termination(float(meta.get("deletionGracePeriodSeconds", 30)))

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
            ref = next((r for r in meta.get("ownerReferences", []) if r.get("controller")), None)
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
            worker._kill_all(signal.SIGKILL)

    def stop(self, grace: float = 2.0) -> None:
        """Stop every process (SIGTERM, SIGKILL after `grace`) and every worker thread."""
        self._stopped = True
        with self._lock:
            workers = list(self._workers.values())
            self._workers.clear()
            self._stopping = workers
        for worker in workers:
            worker.request_shutdown(grace)
        for worker in workers:
            worker.join(timeout=grace + 5)
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
        self.init_runs = [_Run(c, init=True) for c in self.spec.get("initContainers", [])]
        self.runs = [_Run(c) for c in self.spec.get("containers", [])]
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._terminate_grace: float | None = None
        self._evict_message: str | None = None
        self._shutdown = False
        self._forced = False
        self._status: PodStatus = {}
        self._start_time = now_rfc3339()
        self._conditions: dict[str, tuple[str, str]] = {}
        self._containers_started = False
        self._init_failed = False
        self._unschedulable: str | None = None  # why the scheduling gate holds the pod back
        self.pod_dir = kubelet.pods_dir / meta["namespace"] / meta["name"]
        self.state_root = self.pod_dir / self.uid  # this pod's volumes and bin/; a recreated pod gets its own
        self.hostname = self.spec.get("hostname") or meta["name"]
        self.hosts_file = self.state_root / "etc-hosts"  # its /etc/hosts when names are strict (dns.py)
        self.maps = {c["name"]: path_map(self.state_root, pod, c)
                     for c in self.spec.get("initContainers", []) + self.spec.get("containers", [])}
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
            for run in self.init_runs + self.runs:
                if (container is None and not run.init) or run.name == container:
                    if run.process is None or run.process.poll() is not None:
                        raise ProcessLookupError(f"container {run.name} of pod {self.key[1]} is not running")
                    os.killpg(run.process.pid, sig)
                    return run.process.pid
        raise KeyError(f"pod {self.key[1]} has no container {container}")

    # --- the worker thread -----------------------------------------------------------------------

    def run(self) -> None:
        try:
            self._run()
        except Exception:  # a kubelet bug must not leave processes behind
            traceback.print_exc()
            self._kill_all(signal.SIGKILL)
        finally:
            for run in self.init_runs + self.runs:
                if run.log is not None:
                    run.log.close()
            self.kubelet._forget(self)

    def _run(self) -> None:
        if not self._wait_for_gate():
            self._terminate()
            return
        if not self._bind():
            return
        self._write_status()
        init_ok = self._prepare() and self._run_init_containers()
        if init_ok:
            for run in self.runs:
                self._start(run)
            self._containers_started = True
            self._condition("Initialized", "True")
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
        """Volumes and stand-in binaries; waits (ContainerCreating) while a ConfigMap is missing, as the kubelet does."""
        while True:
            try:
                unsupported = prepare_volumes(self.state_root, self.pod, self._get_configmap)
                break
            except MissingConfigMap as err:
                for run in self.init_runs + self.runs:
                    run.state = {"waiting": {"reason": "ContainerCreating", "message": f"MountVolume.SetUp failed: {err}"}}
                self._write_status()
                if not self._sleep_until(time.monotonic() + 0.2):
                    return False
        union: dict[str, Path] = {}
        for mapping in self.maps.values():
            union = {**{p: Path(d) for p, d in mapping.as_dict().items()}, **union}
        rewrite_configmap_files(self.state_root, self.pod, PathMap(union))
        bin_dir = self.state_root / "bin"
        bin_dir.mkdir(parents=True, exist_ok=True)
        self._write_script(bin_dir / "hostname", f"#!/bin/sh\necho {shlex.quote(self.hostname)}\n")
        self._write_script(bin_dir / "kubectl", self._kubectl_wrapper())
        if self.kubelet.dns.strict:
            self.kubelet.dns.register(*self.key, self.hostname, self.hosts_file)
        if unsupported:
            log = self.kubelet.log_path(self.pod, self._first_container or "pod")
            log.parent.mkdir(parents=True, exist_ok=True)
            with log.open("a") as out:
                out.write(f"=== localcluster: volumes not emulated (left out of the path mapping): {', '.join(unsupported)}\n")
        return True

    def _get_configmap(self, namespace: str, name: str) -> KubeObject | None:
        return self.kubelet.store.get("v1", "ConfigMap", namespace, name)

    def _kubectl_wrapper(self) -> str:
        python, repo = shlex.quote(sys.executable), shlex.quote(str(REPO_ROOT))
        pods, namespace = shlex.quote(str(self.kubelet.pods_dir)), shlex.quote(self.key[0])
        return (f"#!/bin/sh\n# kubectl stand-in of the local cluster: only `kubectl exec` (localcluster/kubectl.py)\n"
                f"PYTHONPATH={repo} exec {python} -m localcluster.kubectl --pods-dir {pods} --namespace-default {namespace} \"$@\"\n")

    @staticmethod
    def _write_script(path: Path, text: str) -> None:
        path.write_text(text)
        os.chmod(path, 0o755)

    def _publish(self, run: _Run, env: dict[str, str], workdir: Path) -> None:
        """Tell the kubectl stand-in how to exec into this running container."""
        info = {"uid": self.uid, "container": run.name, "first": run.name == self._first_container and not run.init,
                "env": env, "cwd": str(workdir), "mounts": self.maps[run.name].as_dict()}
        path = self.pod_dir / f"exec-{run.name}.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(info))
        tmp.replace(path)

    def _unpublish(self, run: _Run) -> None:
        """The container stopped: no new execs, and the processes exec'd into it die with it."""
        path = self.pod_dir / f"exec-{run.name}.json"
        try:
            if json.loads(path.read_text()).get("uid") == self.uid:
                path.unlink()
        except (OSError, ValueError):
            pass
        registry = self.pod_dir / f"exec-{run.name}.pids"
        for marker in sorted(registry.glob("*")) if registry.is_dir() else []:
            try:
                if marker.read_text() == self.uid:
                    os.killpg(int(marker.name), signal.SIGKILL)
            except (OSError, ValueError):
                pass
            marker.unlink(missing_ok=True)

    def _stopping(self) -> bool:
        with self._lock:
            evicting = self._evict_message is not None and self._status.get("reason") != "Evicted"
            return self._terminate_grace is not None or evicting

    def _wait_for_gate(self) -> bool:
        """Stay Pending while the gate holds the pod back; False if the pod ends meanwhile."""
        gate = self.kubelet.gate
        while gate is not None and not self._stopping():
            current = self.kubelet.store.get("v1", "Pod", *self.key)
            if current is None or current["metadata"]["uid"] != self.uid:
                return False
            reason = gate(current)
            if reason is None:
                self._unschedulable = None
                return True
            if reason != self._unschedulable:
                self._unschedulable = reason
                self._condition("PodScheduled", "False")
                self._write_status()
            self._wake.wait(GATE_POLL_SECONDS)
            self._wake.clear()
        return not self._stopping()

    def _bind(self) -> bool:
        """Set spec.nodeName (the scheduler's binding), so deletion becomes graceful."""
        for _ in range(20):
            current = self.kubelet.store.get("v1", "Pod", *self.key)
            if current is None or current["metadata"]["uid"] != self.uid:
                return False
            if current.get("spec", {}).get("nodeName"):
                return True
            current["spec"]["nodeName"] = NODE_NAME
            try:
                self.kubelet.store.update(current)
                self._condition("PodScheduled", "True")
                return True
            except StoreError as err:
                if err.code != 409:
                    return False
        return False

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
                while run.process is not None and run.process.poll() is None:
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
                if not self._sleep_until(time.monotonic() + self._backoff(run)):
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

    def _backoff(self, run: _Run) -> float:
        first, cap = self.kubelet.restart_backoff
        return min(cap, first * (2 ** run.restart_count))

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
            if run.process is not None and run.process.poll() is not None:
                self._record_exit(run)
                changed = True
            if "terminated" in run.state and not run.settled:
                run.settled = True
                changed = True
                if self.policy == "Always" or (self.policy == "OnFailure" and run.exit_code != 0):
                    run.restart_at = now + self._backoff(run)
                    run.last_state = {"terminated": run.state["terminated"]}
                    run.state = {"waiting": {"reason": "CrashLoopBackOff", "message": f"back-off restarting failed container {run.name}"}}
            if run.config_retry_at is not None and now >= run.config_retry_at:
                run.config_retry_at = None
                self._start(run)
                changed = True
        return changed

    def _env(self, container: Container) -> tuple[dict[str, str], dict[str, str]]:
        """The process env (host allowlist, the container's env expanded and DNS-rewritten, loopback
        settings), and the container's declared env alone, which is all `$(NAME)` sees (as the kubelet's)."""
        host = {name: os.environ[name] for name in HOST_ENV_ALLOWLIST if name in os.environ}
        host["PATH"] = os.pathsep.join([str(self.state_root / "bin"), str(Path(sys.executable).parent),
                                        os.environ.get("PATH", os.defpath)])
        host["HOSTNAME"] = self.hostname
        namespace = self.key[0]
        runtime = {"status.podIP": LOOPBACK, "status.hostIP": LOOPBACK, "status.podIPs": LOOPBACK,
                   "status.hostIPs": LOOPBACK, "spec.nodeName": NODE_NAME}
        # The kubelet expands $(NAME) with the declared entries only: a host or image variable
        # such as $(HOME) stays as written in a cluster, so it does here too.
        declared = resolve_env(container, self.pod, runtime=runtime,
                               config_map=lambda name: self.kubelet.store.get("v1", "ConfigMap", namespace, name))
        rewritten = self.kubelet.dns.rewrite_env(self.key[0], declared)
        if not self.kubelet.dns.strict:
            # Names rewritten to loopback: a scheduler told to bind 0.0.0.0 would leave loopback for nothing.
            for name, value in LOOPBACK_OVERRIDES.items():
                if name in rewritten:
                    rewritten[name] = value
        mapping = self.maps[container["name"]]
        rewritten = {name: mapping.rewrite(value) for name, value in rewritten.items()}
        return {**LOCAL_DEFAULT_ENV, **host, **rewritten, **LOOPBACK_ENV}, rewritten

    def _start(self, run: _Run) -> None:
        """Start a container's process; a start failure is a terminated state with exit code 128."""
        try:
            env, declared = self._env(run.container)
        except EnvError as err:
            run.state = {"waiting": {"reason": "CreateContainerConfigError", "message": str(err)}}
            run.config_retry_at = time.monotonic() + CONFIG_RETRY_SECONDS
            return
        mapping = self.maps[run.name]
        argv = [mapping.rewrite(expand(part, declared)) for part in run.container.get("command", []) + run.container.get("args", [])]
        workdir = Path(mapping.rewrite(run.container.get("workingDir", "")) or self.kubelet.workdir)
        if not workdir.is_absolute():
            workdir = self.kubelet.workdir / workdir
        if run.log is None:
            path = self.kubelet.log_path(self.pod, run.name)
            path.parent.mkdir(parents=True, exist_ok=True)
            run.log = path.open("a", buffering=1)
        started = now_rfc3339()
        run.settled = False
        run.log.write(f"=== localcluster: pod {self.key[1]} container {run.name} start #{run.restart_count} at {started}: {argv}\n")
        error = None
        if run.init and is_kubectl_image(run.container.get("image", "")):
            self._deliver_kubectl(run, started)
            return
        if not run.container.get("command"):
            error = "the local cluster ignores images, so a container needs `command` (the image's entrypoint is unknown)"
        else:
            if argv[0] in PYTHON_NAMES:
                argv[0] = sys.executable
            elif os.sep not in argv[0]:
                argv[0] = shutil.which(argv[0], path=env["PATH"]) or argv[0]
            strict = self.kubelet.dns.strict
            program = workdir / argv[0]  # an absolute argv[0] stays itself; a relative one runs from workdir
            if strict and not (program.is_file() and os.access(program, os.X_OK)):
                # The namespace wrapper would start and then fail; a command that cannot start is a StartError.
                error = f"failed to start container process: [Errno 2] No such file or directory: {argv[0]!r}"
            else:
                try:
                    with self._lock:
                        run.process = subprocess.Popen(
                            self.kubelet.dns.wrap(argv, self.hosts_file) if strict else argv,
                            cwd=workdir, env=env, stdin=subprocess.DEVNULL, stdout=run.log, stderr=subprocess.STDOUT,
                            start_new_session=True,  # its own process group: signals reach its children too
                        )
                except OSError as err:
                    error = f"failed to start container process: {err}"
                else:
                    self._publish(run, env, workdir)
        if error is not None:
            run.log.write(f"=== localcluster: {error}\n")
            run.process = None
            run.exit_code = 128
            run.state = {"terminated": {"exitCode": 128, "reason": "StartError", "message": error,
                                        "startedAt": started, "finishedAt": started}}
            return
        run.state = {"running": {"startedAt": started}}

    def _deliver_kubectl(self, run: _Run, started: str) -> None:
        """What a kubectl image's init container would do: put kubectl into the emptyDirs it mounts."""
        targets = []
        emptydirs = {v["name"] for v in self.spec.get("volumes", []) if "emptyDir" in v}
        for mount in run.container.get("volumeMounts", []):
            if mount.get("name") in emptydirs:
                target = self.state_root / "volumes" / mount["name"] / "kubectl"
                self._write_script(target, self._kubectl_wrapper())
                targets.append(mount["mountPath"])
        assert run.log is not None
        run.log.write(f"=== localcluster: image {run.container.get('image')} is a kubectl image: not run; the kubectl "
                      f"stand-in was put into {', '.join(targets) or 'no emptyDir'} instead\n")
        run.process, run.exit_code = None, 0
        run.state = {"terminated": {"exitCode": 0, "reason": "Completed", "startedAt": started, "finishedAt": started}}

    def _record_exit(self, run: _Run) -> None:
        if run.process is None or "terminated" in run.state:
            return
        self._unpublish(run)
        code = exit_code(run.process.wait())
        run.process = None
        run.exit_code = code
        finished = now_rfc3339()
        reason = "Completed" if code == 0 else "Error"
        started = run.state.get("running", {}).get("startedAt", finished)
        run.state = {"terminated": {"exitCode": code, "reason": reason, "startedAt": started, "finishedAt": finished}}
        if run.log is not None:
            run.log.write(f"=== localcluster: container {run.name} exited with code {code} at {finished}\n")

    def _phase(self) -> str:
        """Pending until containers start; Succeeded/Failed once every container is done for good."""
        if self._init_failed or self._status.get("reason") == "Evicted":
            return "Failed"
        if not self._containers_started:
            return "Pending"
        if any(r.config_retry_at is not None for r in self.runs) and not any("running" in r.state for r in self.runs):
            return "Pending"
        if any("running" in r.state or r.restart_at is not None for r in self.runs):
            return "Running"
        # A container that will be restarted keeps the pod Running, even before its restart is
        # scheduled (a StartError is recorded before the restart decision).
        if self.policy == "Always" or (self.policy == "OnFailure" and any(r.exit_code != 0 for r in self.runs)):
            return "Running"
        if all(r.exit_code == 0 for r in self.runs):
            return "Succeeded"
        return "Failed"

    def _condition(self, kind: str, value: str) -> None:
        if self._conditions.get(kind, ("", ""))[0] != value:
            self._conditions[kind] = (value, now_rfc3339())

    def _write_status(self) -> None:
        """Compute the Pod's status and write it when it changed (each write wakes the controller)."""
        phase = self._phase()
        ready = "True" if phase == "Running" and all("running" in r.state for r in self.runs) else "False"
        self._condition("ContainersReady", ready)
        self._condition("Ready", ready)
        status: PodStatus = {
            "phase": phase,
            "hostIP": LOOPBACK,
            "podIP": LOOPBACK,
            "startTime": self._start_time,
            "conditions": [
                {"type": kind, "status": value, "lastTransitionTime": at} for kind, (value, at) in self._conditions.items()
            ],
            "containerStatuses": [r.status() for r in self.runs],
        }
        if self.init_runs:
            status["initContainerStatuses"] = [r.status() for r in self.init_runs]
        if self._unschedulable is not None:
            for cond in status["conditions"]:
                if cond["type"] == "PodScheduled":
                    cond.update(reason="Unschedulable", message=self._unschedulable)
        if self._status.get("reason"):
            status["reason"], status["message"] = self._status["reason"], self._status.get("message", "")
        self._status = status
        if self._forced:
            return
        try:
            self.kubelet.store.update_status("v1", "Pod", *self.key, dict(status))
        except StoreError:
            pass  # the Pod is gone; nothing to report to

    def _kill_all(self, sig: int) -> None:
        with self._lock:
            for run in self.init_runs + self.runs:
                if run.process is not None and run.process.poll() is None:
                    try:
                        os.killpg(run.process.pid, sig)
                    except ProcessLookupError:
                        pass

    def _stop_processes(self, grace: float) -> None:
        """SIGTERM, then SIGKILL once `grace` has passed."""
        self._kill_all(signal.SIGTERM)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and any(r.process is not None and r.process.poll() is None for r in self.init_runs + self.runs):
            time.sleep(POLL_SECONDS)
        self._kill_all(signal.SIGKILL)
        for run in self.init_runs + self.runs:
            self._record_exit(run)
            run.restart_at = None
            run.settled = True

    def _evict(self) -> None:
        grace = float(self.spec.get("terminationGracePeriodSeconds", 30))
        self._stop_processes(grace)
        self._status["reason"], self._status["message"] = "Evicted", self._evict_message or ""
        self._write_status()

    def _terminate(self) -> None:
        """Stop the containers, then remove the Pod from the store (unless the whole cluster stops)."""
        with self._lock:
            grace = self._terminate_grace if self._terminate_grace is not None else 0.0
        self._stop_processes(grace)
        self.kubelet.dns.unregister(*self.key)
        if not self._shutdown and not self._forced:
            self.kubelet.store.remove("v1", "Pod", *self.key)
