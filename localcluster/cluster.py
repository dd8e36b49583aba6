"""LocalCluster: the real control plane, the Metacontroller stand-in, the process kubelet with its Node, the gang
stand-in and the hooks server, wired."""

from __future__ import annotations

import copy
import json
import random
import re
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar, cast

from localcluster.cli.jobstatus import status_reader_for
from localcluster.config import ControllerConfig, load_controller_configs
from localcluster.controlplane.apistore import AGENT_EMULATION, ApiStore
from localcluster.controlplane.gang import GangScheduler, api_node
from localcluster.controlplane.kueue import Kueue
from localcluster.controlplane.processes import ControlPlane, ensure_namespace, prepare_cluster
from localcluster.hooks_server import FaultProxy, HooksServer
from localcluster.metacontroller import CLIENT_BURST, CLIENT_QPS, ClientThrottle, MetacontrollerStandIn, Stale
from localcluster.metacontroller.binary import (
    MetacontrollerBinary,
    check_binary,
    install_controllers,
    install_controllers_as_shipped,
    service_hooks,
)
from localcluster.node.dns import HOST_HOSTS, ClusterDNS, strict_dns_unavailable
from localcluster.node.kubelet import ProcessKubelet
from localcluster.node.kubeletapi import ContainerLog, KubeletLogServer
from localcluster.node.podprocess import RESTART_BACKOFF
from localcluster.node.registration import NodeHeartbeat, NodeSize, machine_size
from localcluster.store import StoreError, controller_uid, json_copy
from localcluster.types import KubeObject

T = TypeVar("T")
# Kubernetes' rule for namespaces and for the names of objects that become DNS labels; it also
# keeps a name from being a path ("..", "/etc", "a/b") when it names a folder under the state dir.
DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
DNS_LABEL_MAX = 63


def check_dns_label(field: str, value: object) -> str | None:
    """Why `value` is not a valid DNS label (RFC 1123), naming `field`; None when it is."""
    if not isinstance(value, str) or not value:
        return f"{field} is required and must be a string"
    if len(value) > DNS_LABEL_MAX or not DNS_LABEL.fullmatch(value):
        return (f"{field} {value!r} is not a valid name: use at most {DNS_LABEL_MAX} lower-case letters, "
                "digits and '-', starting and ending with a letter or digit (e.g. my-job)")
    return None

def job_state(job: KubeObject | None) -> str | None:
    """The job's current state: the type of its last condition (what the CRD prints as State)."""
    conditions = (job or {}).get("status", {}).get("conditions") or []
    return conditions[-1].get("type") if conditions else None


def condition(job: KubeObject | None, type_: str) -> dict[str, Any] | None:
    """One condition of the job's status, or None."""
    conditions: list[dict[str, Any]] = (job or {}).get("status", {}).get("conditions") or []
    for cond in conditions:
        if cond.get("type") == type_:
            return cond
    return None


def finished(job: KubeObject | None) -> str | None:
    """'Succeeded' or 'Failed' (a refused spec too) once the job's kind's status reader says it ended;
    UnknownKind for a kind without a reader."""
    if not job:
        return None
    ending = status_reader_for(job.get("kind", ""))(job).ending
    return "Succeeded" if ending == "Succeeded" else "Failed" if ending in ("Failed", "Invalid") else None


class LocalCluster:
    """Everything needed to run jobs on this machine; use as a context manager so processes end.

    One Metacontroller stand-in per CompositeController (per job kind), all calling the same hooks
    server on their own routes; the real control plane's kube-controller-manager runs the Job and
    StatefulSet controllers and the garbage collector.
    """

    def __init__(
        self,
        state_dir: Path | str = ".localcluster",
        *,
        hook_url: str | None = None,
        fault_proxy: bool = False,
        configs: list[ControllerConfig] | None = None,
        restart_backoff: tuple[float, float] = RESTART_BACKOFF,
        time_scale: float = 1.0,
        client_qps: float = CLIENT_QPS,
        client_burst: int = CLIENT_BURST,
        stale: Stale | None = None,
        strict_dns: bool = True,
        hot_loop_syncs: int = 25,
        hooks_log: Path | None = None,
        control_plane: ControlPlane | None = None,
        control_plane_dir: Path | None = None,
        gpus: int = 0,
        cpus: str | None = None,
        memory: str | None = None,
        metacontroller: str = "emulation",
        kubelet_mode: str = "process",
        service_dns: bool = False,
        kueue: bool = False,
        audit_reads: bool = False,
    ):
        """It runs on the real control plane `control_plane` (a test session's, say), or on one started
        here, in `control_plane_dir` (default <state dir>/controlplane), and stopped with the cluster.
        `metacontroller` says what syncs the jobs: "emulation" (localcluster/metacontroller/), "none" (a
        real Metacontroller the user points at the control plane's kubeconfig), or the path of a
        Metacontroller binary, which the cluster runs (localcluster/metacontroller/binary.py) with the
        CompositeControllers installed, their hooks pointed at the local hooks server. `kubelet_mode` "noprocess" runs every
        pod without a process (localcluster/node/noprocess.py), for scale measurements only. `service_dns` calls each
        hook at the URL its CompositeController names, resolved as cluster DNS would (a Service in the store;
        the hooks server stands in for its endpoints): for checking an install's URLs. The emulation
        resolves them itself (MetacontrollerStandIn); a binary gets the CompositeControllers as they are
        and a hosts file naming the hooks' Service at a loopback address where the fault proxy listens
        on the Service's port (root only: a mount namespace of its own).
        `kueue` installs and starts a real Kueue (localcluster/controlplane/kueue.py, built by `make kueue`) before any pod can
        be created; it needs a control plane of its own: its webhooks and its finalizers on pods would outlive it
        on a shared one. `cpus`, `memory` and `gpus` size the Node the pods are scheduled to (node/registration.py: this
        machine's CPUs and memory by default); a bad value is a ValueError naming the option. `audit_reads` has
        the control plane it starts log every read with its client (`ControlPlane.audit_reads`)."""
        if kueue and control_plane is not None:
            raise ValueError("LocalCluster(kueue=True) starts its own control plane: Kueue's webhooks and pod finalizers "
                             "would outlive it on a shared one")
        self.state_dir = Path(state_dir).resolve()
        self.configs = configs or load_controller_configs()
        self.control_plane, self.control_plane_dir = control_plane, control_plane_dir
        self._audit_reads = audit_reads
        self._own_control_plane = False
        self._strict_dns, self._restart_backoff = strict_dns, restart_backoff
        self.node_size: NodeSize = machine_size(cpus, memory, gpus)
        self._kubelet_mode = kubelet_mode
        self.engine = metacontroller if metacontroller in ("emulation", "none") else "binary"
        self.metacontroller_binary: MetacontrollerBinary | None = None
        if self.engine == "binary":
            self.metacontroller_binary = MetacontrollerBinary(
                check_binary(metacontroller), self.state_dir / "metacontroller", client_qps=client_qps, client_burst=client_burst)
        self.log_server: KubeletLogServer | None = None
        # With the real Kueue (v0.17: no MXJob integration) the hooks form plain-pod groups, unless the
        # environment says otherwise (docs/ecosystem.md, "Kueue").
        settings = {"MXJOB_KUEUE_POD_GROUPS": "true"} if kueue else {}
        self.hooks: HooksServer | None = None if hook_url else HooksServer(hooks_log or self.state_dir / "hooks-server.log",
                                                                           settings=settings)
        self._hook_url = hook_url
        self.proxy: FaultProxy | None = None
        self._want_proxy = fault_proxy
        # One Metacontroller process: one client throttle for every controller's API calls.
        self.throttle = ClientThrottle(client_qps, client_burst)
        self._time_scale, self._stale, self._hot_loop_syncs = time_scale, stale, hot_loop_syncs
        self._service_dns = service_dns
        self.want_kueue = kueue
        self.kueue: Kueue | None = None
        self.controllers: dict[str, MetacontrollerStandIn] = {}
        self._backend = ""

    def _wire(self, store: ApiStore) -> None:
        """The store and what reads it: DNS, the kubelet with its Node, the gang stand-in."""
        self.store = store
        self.dns = ClusterDNS(self.store, strict=self._strict_dns)
        if self._strict_dns and not self.dns.strict:
            print(f"localcluster: names cannot resolve as in a cluster here: {self.dns.fallback_reason}. Service names are "
                  "rewritten to 127.0.0.1 in each container's env instead, so they resolve from the start "
                  "(docs/localcluster.md, 'DNS').", file=sys.stderr)
        port = self.log_server.port if self.log_server is not None else 0
        self.kubelet = ProcessKubelet(self.store, self.dns, self.state_dir, restart_backoff=self._restart_backoff,
                                      node=NodeHeartbeat(store, self.node_size, kubelet_port=port), mode=self._kubelet_mode)
        self.gang = GangScheduler(self.store, read_node=lambda: api_node(store))

    def _start_kubernetes(self) -> None:
        """The real control plane, the CRDs the jobs and children need, a Node, and an API-backed store."""
        if self.control_plane is None:
            # A fresh cluster every time: what an earlier run left in etcd would come back to life.
            workdir = self.control_plane_dir or self.state_dir / "controlplane"
            shutil.rmtree(workdir, ignore_errors=True)
            self.control_plane = ControlPlane(workdir=workdir, hold_controllers=True, audit_reads=self._audit_reads)
            self._own_control_plane = True
            self.control_plane.start()
        self.log_server = KubeletLogServer(self._log_file, self._pod_running)
        self.log_server.start()
        prepare_cluster(self.control_plane)
        if self._own_control_plane:
            self.control_plane.start_controllers()  # after the CRDs: the garbage collector knows the jobs at once
        if self.want_kueue:  # before the kubelet and the controllers: no pod is created before its webhook answers
            self.kueue = Kueue(self.control_plane)
            self.kueue.start()
        kinds = {("v1", "Pod"), ("v1", "Service"), ("batch/v1", "Job"), ("apps/v1", "StatefulSet")}
        for config in self.configs:
            kinds.add((config.parent_api_version, config.parent_kind))
            kinds |= {(rule["apiVersion"], rule["kind"]) for rule in config.children}
        if self.want_kueue:  # an MXJob's customize hook relates its Kueue Workloads (hooks.shared.kueue)
            kinds.add(("kueue.x-k8s.io/v1beta2", "Workload"))
        store = ApiStore(self.control_plane.kubeconfig, sorted(kinds))
        store.start()
        self._wire(store)

    def _log_file(self, namespace: str, name: str, container: str) -> ContainerLog | None:
        """For the log endpoint: a pod's container's log and state, None when the pod has no such container."""
        pod = self.store.get("v1", "Pod", namespace, name)
        spec = (pod or {}).get("spec", {})
        if pod is None or container not in [c["name"] for c in spec.get("containers", []) + spec.get("initContainers", [])]:
            return None
        status = pod.get("status", {})
        statuses = status.get("containerStatuses", []) + status.get("initContainerStatuses", [])
        mine: dict[str, Any] = next((cs for cs in statuses if cs.get("name") == container), {})
        state = mine.get("state") or {}
        # Waiting to start: no instance has run yet (in CrashLoopBackOff the last one has, and is what is served).
        ran = "running" in state or "terminated" in state or "terminated" in (mine.get("lastState") or {})
        waiting = None if ran else (state.get("waiting") or {}).get("reason", "ContainerCreating")
        return ContainerLog(self.kubelet.log_path(pod, container), int(mine.get("restartCount", 0)), waiting)

    def _pod_running(self, namespace: str, name: str) -> bool:
        """Whether `kubectl logs -f` should keep following: the pod exists and has not ended."""
        pod = self.store.get("v1", "Pod", namespace, name)
        return pod is not None and pod.get("status", {}).get("phase") in (None, "Pending", "Running")

    def controller_for(self, job: KubeObject | None) -> MetacontrollerStandIn | None:
        """The stand-in that syncs this job (by its kind)."""
        return self.controllers.get((job or {}).get("kind", "")) if job else None

    # --- lifecycle -------------------------------------------------------------------------------

    def start(self) -> LocalCluster:
        """Start the hooks server (unless an external hook URL was given), the controller and the kubelet."""
        self.state_dir.mkdir(parents=True, exist_ok=True)
        try:
            self._start_kubernetes()
            if self.hooks is not None:
                self.hooks.start()
            backend = self._hook_url or self.hooks.url  # type: ignore[union-attr]
            if self.metacontroller_binary is not None and self._service_dns:
                self.proxy = self._service_proxy(backend)
            elif self._want_proxy:
                self.proxy = FaultProxy(backend)
            if self.proxy is not None:
                self.proxy.start()
                backend = self.proxy.url
            self._backend = backend
            for config in self.configs if self.engine == "emulation" else ():
                self.controllers[config.parent_kind] = self._stand_in(config)
            for controller in self.controllers.values():
                controller.start()
            if self.metacontroller_binary is not None:
                assert self.control_plane is not None
                if self._service_dns:
                    install_controllers_as_shipped(self.control_plane, self.configs)
                else:
                    install_controllers(self.control_plane, self.configs, backend)
                self.metacontroller_binary.start(self.control_plane)
            self.kubelet.start()
            self.gang.start()
        except BaseException:
            self.stop()
            raise
        return self

    def _service_proxy(self, backend: str) -> FaultProxy:
        """For a real Metacontroller calling the hooks by Service name: the fault proxy listening on the
        Services' port at a loopback address of its own, and that address under those names in the hosts
        file the binary runs with. A cluster's DNS answers every Service; this file knows only the hooks'."""
        reason = strict_dns_unavailable()
        if reason:
            raise RuntimeError(f"a real Metacontroller cannot reach the hooks by Service name here: {reason}")
        names, port = service_hooks(self.configs)
        last_error: OSError | None = None
        for _ in range(20):
            address = f"127.0.{random.randint(1, 254)}.{random.randint(2, 254)}"
            try:
                proxy = FaultProxy(backend, (address, port))
            except OSError as err:  # that address's port is taken (another cluster's)
                last_error = err
                continue
            hosts = self.state_dir / "metacontroller-hosts"
            hosts.write_text(HOST_HOSTS.read_text() + f"\n{address} {' '.join(names)}\n")
            assert self.metacontroller_binary is not None
            self.metacontroller_binary.hosts = hosts
            return proxy
        raise RuntimeError(f"no loopback address with port {port} free for the hooks: {last_error}")

    def _stand_in(self, config: ControllerConfig) -> MetacontrollerStandIn:
        # Its own User-Agent, so the API server's audit log tells its requests from the kubelet's and a test's.
        return MetacontrollerStandIn(self.store.agent(AGENT_EMULATION), config, self._backend, time_scale=self._time_scale,
                                     throttle=self.throttle, stale=self._stale, hot_loop_syncs=self._hot_loop_syncs,
                                     service_dns=self._service_dns)

    def use_controller(self, config: ControllerConfig) -> MetacontrollerStandIn:
        """Install another CompositeController for a parent kind on the running cluster (a gang
        component added, say): as Metacontroller restarts a controller whose spec changed, the old
        stand-in stops and a new one starts, which syncs every parent of that kind."""
        old = self.controllers.pop(config.parent_kind, None)
        if old is not None:
            old.stop()
        self.configs = [c for c in self.configs if c.parent_kind != config.parent_kind] + [config]
        self.controllers[config.parent_kind] = controller = self._stand_in(config)
        controller.start()
        return controller

    def stop(self) -> None:
        """Stop every process this cluster started (containers, hooks server) and its threads."""
        # Each part is stopped even if an earlier one fails, so no process outlives the cluster. In this
        # order: what writes (Metacontroller, the schedulers, the kubelet) before what it writes to.
        parts = [*self.controllers.values(), self.metacontroller_binary, getattr(self, "gang", None),
                 getattr(self, "kubelet", None), self.log_server, getattr(self, "store", None), self.kueue,
                 self.control_plane if self._own_control_plane else None, self.proxy, self.hooks]
        steps: list[Callable[..., None]] = [part.stop for part in parts if part is not None]
        errors: list[BaseException] = []
        for step in steps:
            try:
                step()
            except Exception as err:  # keep stopping the rest; report the first failure
                errors.append(err)
        if errors:
            raise errors[0]

    def kill(self) -> None:
        """SIGKILL every process at once (a second Ctrl-C while stopping); `stop` still cleans up after."""
        if hasattr(self, "kubelet"):
            self.kubelet.kill_all()
        if self.hooks is not None:
            self.hooks.kill()

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- jobs ------------------------------------------------------------------------------------

    def submit(self, job: KubeObject, *, clear_logs: bool = True, field_validation: str = "Strict",
               warn: Callable[[str], None] | None = None) -> KubeObject:
        """Create a job (the server assigns uid, generation 1, creationTimestamp, the CRD's defaults);
        clears its old logs unless told not to (the caller did it before starting a cluster that keeps
        files there). A field the CRD does not know is met as `field_validation` says (Strict: a 400
        StoreError; Warn: pruned, and named to `warn`; Ignore: pruned), as `kubectl apply --validate` does."""
        job = copy.deepcopy(job)
        meta = job.setdefault("metadata", {})
        meta.setdefault("namespace", "default")
        job.pop("status", None)
        # The name becomes a folder that is emptied: check it before any file operation.
        folder = self.job_dir(meta.get("name"), meta["namespace"])
        if clear_logs:
            shutil.rmtree(folder, ignore_errors=True)
        if self.control_plane is not None:
            ensure_namespace(self.control_plane, meta["namespace"])
        return self.store.create(job, field_validation=field_validation, warn=warn)

    def apply(self, objects: list[KubeObject]) -> None:
        """`kubectl apply --server-side` of other objects (Kueue's queues, say), their namespaces made first;
        ValueError with kubectl's message when the server refuses one."""
        assert self.control_plane is not None, "start() first"
        for namespace in sorted({str(obj["metadata"]["namespace"]) for obj in objects if obj.get("metadata", {}).get("namespace")}):
            ensure_namespace(self.control_plane, namespace)
        result = self.control_plane.kubectl("apply", "--server-side", "-f", "-", check=False,
                                            input=json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}))
        if result.returncode != 0:
            raise ValueError(result.stderr.strip() or f"kubectl apply exited with {result.returncode}")

    def job_dir(self, name: object, namespace: object = "default") -> Path:
        """Where the logs of a job's pods go: `<state dir>/<namespace>/<name>`; ValueError for a bad name."""
        for field, value in (("metadata.namespace", namespace), ("metadata.name", name)):
            problem = check_dns_label(field, value)
            if problem:
                raise ValueError(problem)
        folder = (self.state_dir / str(namespace) / str(name)).resolve()
        if not folder.is_relative_to(self.state_dir) or folder == self.state_dir:
            # A DNS label cannot climb out, but a symlink left in the state dir can: never follow it.
            raise ValueError(f"the job's folder resolves to {folder}, outside the state dir {self.state_dir} "
                             f"(a symlink?); remove it or use another --state-dir")
        return folder

    def get_job(self, name: str, namespace: str = "default") -> KubeObject | None:
        """The stored job of that name, of whichever parent kind a controller follows."""
        for config in self.configs:
            job = self.store.get(config.parent_api_version, config.parent_kind, namespace, name)
            if job is not None:
                return job
        return None

    def update_job(self, name: str, mutate: Callable[[KubeObject], None], namespace: str = "default") -> KubeObject:
        """Edit a job's spec or metadata like `kubectl edit` (retrying on conflicts)."""
        for _ in range(50):
            job = self.get_job(name, namespace)
            if job is None:
                raise StoreError(404, "NotFound", f"MXJob {name!r} not found")
            mutate(job)
            try:
                return self.store.update(job)
            except StoreError as err:
                if err.code != 409:
                    raise
        raise StoreError(409, "Conflict", f"MXJob {name!r}: too many conflicts")

    def children_of(self, job_name: str, api_version: str, kind: str, namespace: str = "default") -> list[KubeObject]:
        """A job's children of any apiVersion and kind (by controller ownerReference), sorted by name."""
        job = self.get_job(job_name, namespace)
        if job is None:
            return []
        uid = job["metadata"]["uid"]
        return sorted(
            (json_copy(obj) for obj in self.store.list_shared(api_version, kind, namespace) if controller_uid(obj) == uid),
            key=lambda obj: obj["metadata"]["name"],
        )

    def pods(self, name: str, namespace: str = "default") -> list[KubeObject]:
        """A job's Pods, its own and those of its Jobs and StatefulSets (descendants), sorted by name."""
        job = self.get_job(name, namespace)
        if job is None:
            return []
        owners = {job["metadata"]["uid"]}
        for api_version, kind in (("batch/v1", "Job"), ("apps/v1", "StatefulSet")):
            owners |= {obj["metadata"]["uid"] for obj in self.store.list_shared(api_version, kind, namespace)
                       if controller_uid(obj) in owners}
        return sorted(
            (json_copy(pod) for pod in self.store.list_shared("v1", "Pod", namespace) if controller_uid(pod) in owners),
            key=lambda pod: pod["metadata"]["name"],
        )

    def pod(self, name: str, namespace: str = "default") -> KubeObject | None:
        """One Pod by name."""
        return self.store.get("v1", "Pod", namespace, name)

    def delete_pod(self, name: str, namespace: str = "default") -> None:
        """`kubectl delete pod`: graceful (SIGTERM, grace period, SIGKILL), then gone."""
        self.store.delete("v1", "Pod", namespace, name)

    def log_path(self, pod_name: str, container: str | None = None, namespace: str = "default") -> Path:
        """The log file of a Pod's container (its first container by default)."""
        pod = self.pod(pod_name, namespace)
        if pod is None:
            raise KeyError(f"pod {pod_name} not found")
        return self.kubelet.log_path(pod, container or pod["spec"]["containers"][0]["name"])

    def restart_hooks(self) -> None:
        """Restart the hooks server on the same port (fault injection)."""
        if self.hooks is None:
            raise RuntimeError("this cluster talks to an external hook")
        self.hooks.restart()

    def wait_for(self, check: Callable[[], T], timeout: float, interval: float = 0.05, what: str = "condition") -> T:
        """Poll `check` until it returns something truthy; TimeoutError after `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            value = check()
            if value:
                return value
            if time.monotonic() >= deadline:
                raise TimeoutError(f"timed out after {timeout:g}s waiting for {what}")
            time.sleep(interval)

    def wait_finished(self, name: str, timeout: float, namespace: str = "default") -> KubeObject:
        """Wait until the job is Succeeded or Failed; the job. Raises on timeout or a hot loop."""

        def check() -> KubeObject | None:
            job = self.get_job(name, namespace)
            controller = self.controller_for(job)
            if job is not None and controller is not None:
                hot = controller.hot_loop(job["metadata"]["uid"])
                if hot:
                    raise RuntimeError(f"{job['kind']} {name}: {hot}")
            return job if finished(job) else None

        return cast(KubeObject, self.wait_for(check, timeout, what=f"job {name} to finish"))
