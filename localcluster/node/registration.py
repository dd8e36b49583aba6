"""The process kubelet's Node: what it registers, how big it says it is, and the heartbeat that keeps it Ready.

kube-scheduler places pods on this Node, so what it says is what decides whether a pod fits:
- allocatable = capacity = this machine's CPUs (those this process may run on) and memory, unless
  told otherwise (`localcluster up --cpus N --memory Q --gpus N`), `nvidia.com/gpu` when asked for
  (nothing here has GPUs: a pod that asks for them is placed, and runs without), and room for
  MAX_PODS pods (a real kubelet's 110 would cap the scale benchmark's 1,000 no-process pods);
- conditions Ready (and the three pressure conditions False), addresses 127.0.0.1, the port of the
  kubelet's log endpoint (kubeletapi.py) for `kubectl logs`.

The heartbeat is a kubelet's: the Lease `kube-node-lease/<node>` renewed every LEASE_RENEW_SECONDS
(a quarter of its duration, as the kubelet does), and the Node's status written again every
STATUS_SECONDS. The node lifecycle controller reads them: while they are fresh it leaves the Node
untainted (and takes off the not-ready taint admission puts on a new Node); once they stop (the
kubelet stopped) it marks the Node NotReady/Unknown and taints it, and takes that back when the
heartbeat resumes.
"""

from __future__ import annotations

import os
import re
import threading
import traceback
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from localcluster.store import StoreError, now_rfc3339
from localcluster.types import KubeObject

NODE_NAME = "localcluster"  # podsandbox.NODE_NAME is the same name, as the pods' spec.nodeName
LEASE_NAMESPACE = "kube-node-lease"
LEASE_SECONDS = 40  # the kubelet's nodeLeaseDurationSeconds
LEASE_RENEW_SECONDS = LEASE_SECONDS / 4
STATUS_SECONDS = 60  # well within the node lifecycle controller's 50 s grace only with the Lease beside it
MAX_PODS = 10000
GPU = "nvidia.com/gpu"
# A Kubernetes resource quantity as a user writes one for the node's size (the API server checks it too).
QUANTITY = re.compile(r"\+?(\d+(\.\d*)?|\.\d+)(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?")


@dataclass(frozen=True)
class NodeSize:
    """What the Node offers: cpu and memory as quantities, GPUs as a count."""

    cpu: str
    memory: str
    gpus: int = 0

    def capacity(self) -> dict[str, str]:
        capacity = {"cpu": self.cpu, "memory": self.memory, "pods": str(MAX_PODS), "ephemeral-storage": "1Ti"}
        if self.gpus:
            capacity[GPU] = str(self.gpus)
        return capacity


def machine_size(cpus: str | None = None, memory: str | None = None, gpus: int = 0) -> NodeSize:
    """This machine's CPUs and memory, each unless given; ValueError naming the option for a bad value."""
    for option, value in (("--cpus", cpus), ("--memory", memory)):
        if value is not None and (not QUANTITY.fullmatch(value) or not re.search(r"[1-9]", value)):
            raise ValueError(f"{option} {value!r} is not a positive quantity: write e.g. --cpus 4, --cpus 500m, "
                             "--memory 16Gi")
    if gpus < 0:
        raise ValueError(f"--gpus {gpus} is negative: write the number of GPUs the node pretends to have, e.g. --gpus 2")
    if cpus is None:
        cpus = str(len(os.sched_getaffinity(0)))
    if memory is None:
        memory = f"{os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') // 1024}Ki"
    return NodeSize(cpus, memory, gpus)


def node_object(size: NodeSize, *, kubelet_port: int = 0, now: str = "") -> KubeObject:
    """The Node as the process kubelet registers it, its status as of `now`."""
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": NODE_NAME, "labels": {"kubernetes.io/hostname": NODE_NAME, "kubernetes.io/os": "linux",
                                                   "kubernetes.io/arch": "amd64",
                                                   "node.kubernetes.io/instance-type": "localcluster"}},
        "status": node_status(size, kubelet_port=kubelet_port, now=now or now_rfc3339()),
    }


def node_status(size: NodeSize, *, kubelet_port: int, now: str, previous: dict[str, Any] | None = None) -> dict[str, Any]:
    """The Node's status at `now`: a condition's lastTransitionTime stays as `previous` had it while its status holds."""
    before = {c.get("type"): c for c in (previous or {}).get("conditions") or []}

    def condition(kind: str, status: str, reason: str, message: str) -> dict[str, str]:
        old = before.get(kind) or {}
        since = old.get("lastTransitionTime") if old.get("status") == status else None
        return {"type": kind, "status": status, "reason": reason, "message": message,
                "lastHeartbeatTime": now, "lastTransitionTime": since or now}

    capacity = size.capacity()
    return {
        "capacity": capacity, "allocatable": capacity,
        "conditions": [
            condition("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
            condition("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
            condition("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
            condition("Ready", "True", "KubeletReady", "localcluster's process kubelet is posting ready status"),
        ],
        "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}, {"type": "Hostname", "address": NODE_NAME}],
        # Where the API server finds the kubelet's log endpoint (kubeletapi.py), for `kubectl logs`.
        "daemonEndpoints": {"kubeletEndpoint": {"Port": kubelet_port}},
        "nodeInfo": {"kubeletVersion": "localcluster", "operatingSystem": "linux", "architecture": "amd64",
                     "containerRuntimeVersion": "localcluster://processes", "kernelVersion": "", "osImage": "",
                     "kubeProxyVersion": "", "machineID": "", "systemUUID": "", "bootID": ""},
    }


def micro_time() -> str:
    """A Lease's renewTime (MicroTime: microseconds, UTC)."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class NodeHeartbeat(threading.Thread):
    """Registers the Node, then keeps its Lease and status current until stopped.

    `api` is an ApiStore (its `request` makes one API call by path): a Node and a Lease are not
    kinds the stores watch.
    """

    NODE_PATH = f"/api/v1/nodes/{NODE_NAME}"
    LEASE_PATH = f"/apis/coordination.k8s.io/v1/namespaces/{LEASE_NAMESPACE}/leases/{NODE_NAME}"

    def __init__(self, api: Any, size: NodeSize, *, kubelet_port: int = 0):
        super().__init__(name="node-heartbeat", daemon=True)
        self.api, self.size, self.kubelet_port = api, size, kubelet_port
        self._halt = threading.Event()

    def register(self) -> None:
        """Create the Node, or, when it is there (an earlier kubelet's), write its status as this one sees it;
        then take the Lease. Synchronous: the scheduler can place pods once this returns."""
        try:
            self.api.request("POST", "/api/v1/nodes", node_object(self.size, kubelet_port=self.kubelet_port))
        except StoreError as err:
            if err.code != 409:
                raise
            self.write_status()
        self.renew_lease()

    def write_status(self) -> None:
        for _ in range(5):
            node = self.api.request("GET", self.NODE_PATH)
            node["status"] = node_status(self.size, kubelet_port=self.kubelet_port, now=now_rfc3339(),
                                         previous=node.get("status"))
            try:
                self.api.request("PUT", self.NODE_PATH + "/status", node)
                return
            except StoreError as err:
                if err.code != 409:
                    raise

    def renew_lease(self) -> None:
        spec = {"holderIdentity": NODE_NAME, "leaseDurationSeconds": LEASE_SECONDS, "renewTime": micro_time()}
        try:
            lease = self.api.request("GET", self.LEASE_PATH)
        except StoreError as err:
            if err.code != 404:
                raise
            node = self.api.request("GET", self.NODE_PATH)
            owner = {"apiVersion": "v1", "kind": "Node", "name": NODE_NAME, "uid": node["metadata"]["uid"]}
            self.api.request("POST", self.LEASE_PATH.rsplit("/", 1)[0], {
                "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": NODE_NAME, "namespace": LEASE_NAMESPACE, "ownerReferences": [owner]}, "spec": spec})
            return
        lease["spec"] = {**lease.get("spec", {}), **spec}
        self.api.request("PUT", self.LEASE_PATH, lease)

    def run(self) -> None:
        since_status = 0.0
        while not self._halt.wait(LEASE_RENEW_SECONDS):
            since_status += LEASE_RENEW_SECONDS
            try:
                self.renew_lease()
                if since_status >= STATUS_SECONDS:
                    self.write_status()
                    since_status = 0.0
            except StoreError:
                pass  # the API server is busy or restarting: the next beat tries again, as a kubelet does
            except Exception:  # a bug must not end the heartbeat silently
                traceback.print_exc()

    def stop(self) -> None:
        self._halt.set()
        if self.is_alive():
            self.join(timeout=5)
