"""Queues and Workloads of a real Kueue on the local cluster (`LocalCluster(kueue=True)`), for the modules that
run jobs through it: skip (or, under KUEUE=run, fail) without a Kueue build, make a quota, read Workloads."""
from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from localcluster.cluster import LocalCluster
from localcluster.controlplane import kueue
from localcluster.types import KubeObject

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
GATE = "kueue.x-k8s.io/admission"
KUEUE_API = "/apis/kueue.x-k8s.io/v1beta2"


def kueue_or_skip() -> None:
    """Skip saying how to get a Kueue when none is built; under KUEUE=run (`make test`) fail instead."""
    problem = kueue.missing()
    if problem is None:
        return
    if os.environ.get("KUEUE") == "run":
        pytest.fail(f"KUEUE=run, but {problem}", pytrace=False)
    pytest.skip(f"not run against a real Kueue: {problem}")


def quota(name: str, *, cpu: str) -> list[KubeObject]:
    """A ResourceFlavor, a ClusterQueue `name` lending `cpu`, and a LocalQueue `q` for it in namespace `name`."""
    flavor: Any = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": name}}
    cluster_queue: Any = {
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": name},
        "spec": {"namespaceSelector": {}, "resourceGroups": [{
            "coveredResources": ["cpu"],
            "flavors": [{"name": name, "resources": [{"name": "cpu", "nominalQuota": cpu}]}]}]},
    }
    local_queue: Any = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
                        "metadata": {"name": "q", "namespace": name}, "spec": {"clusterQueue": name}}
    return [flavor, cluster_queue, local_queue]


def gated(obj: KubeObject | None) -> bool:
    """Whether a pod is still behind Kueue's admission gate."""
    return GATE in [gate.get("name") for gate in (obj or {}).get("spec", {}).get("schedulingGates") or []]


def phase(obj: KubeObject | None) -> str | None:
    return (obj or {}).get("status", {}).get("phase")


def workloads(cluster: LocalCluster, namespace: str) -> list[dict[str, Any]]:
    assert cluster.control_plane is not None
    items: list[dict[str, Any]] = cluster.control_plane.get(f"{KUEUE_API}/namespaces/{namespace}/workloads")["items"]
    return items


def group_workload(cluster: LocalCluster, namespace: str, job: str) -> dict[str, Any] | None:
    """The one Workload of a job's pod group (Kueue names it after the group, `<job>-<uid>-<attempt>`)."""
    found = [w for w in workloads(cluster, namespace) if w["metadata"]["name"].startswith(f"{job}-")]
    assert len(found) <= 1, [w["metadata"]["name"] for w in found]
    return found[0] if found else None


def cond(obj: dict[str, Any] | None, type_: str) -> dict[str, Any]:
    found: dict[str, Any] = next((c for c in (obj or {}).get("status", {}).get("conditions") or [] if c["type"] == type_), {})
    return found


def released(cluster: LocalCluster, queue: str) -> bool:
    """Whether ClusterQueue `queue` holds no quota and no Workload (its status follows a moment after the Workloads')."""
    assert cluster.control_plane is not None
    status = cluster.control_plane.get(f"{KUEUE_API}/clusterqueues/{queue}")["status"]
    used = [r["total"] for f in status.get("flavorsUsage") or [] for r in f["resources"]]
    return status.get("admittedWorkloads", 0) == 0 and status.get("pendingWorkloads", 0) == 0 and set(used) <= {"0"}


@contextmanager
def queued_cluster(state_dir: Path) -> Iterator[LocalCluster]:
    """A local cluster with a real Kueue, for a module's tests (Kueue's start is paid once); its hooks server
    forms pod groups of queued jobs of both kinds (MXJOB_KUEUE_POD_GROUPS=true, as LocalCluster(kueue=True) sets it)."""
    kueue_or_skip()
    with LocalCluster(state_dir, kueue=True) as c:
        yield c


def preempting_queue(cluster: LocalCluster, prefix: str = "kq") -> str:
    """A namespace with a LocalQueue `q` over a ClusterQueue of 1 CPU that preempts lower priorities, and the
    WorkloadPriorityClasses `<namespace>-low` (100) and `<namespace>-high` (1000); the namespace's name."""
    namespace = f"{prefix}-{uuid.uuid4().hex[:8]}"
    objects = quota(namespace, cpu="1")
    objects[1]["spec"]["preemption"] = {"withinClusterQueue": "LowerPriority"}
    objects += [{"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "WorkloadPriorityClass",
                 "metadata": {"name": f"{namespace}-{level}"}, "value": value}
                for level, value in (("low", 100), ("high", 1000))]
    cluster.apply(objects)
    return namespace


def new_queue(cluster: LocalCluster, prefix: str, *, cpu: str = "1") -> str:
    """A namespace of its own with a LocalQueue `q` over a ClusterQueue lending `cpu`; the namespace's name."""
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    cluster.apply(quota(name, cpu=cpu))
    return name
