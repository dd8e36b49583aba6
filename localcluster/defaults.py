"""Server-side defaulting the API server applies on create, so children look as they would in a cluster.

Modelled because it matters for the three-way merge: a field the server fills in (a Service port's
protocol, a Pod's tolerations) must not look like a difference to apply. Quantity canonicalisation
(`1000m` → `1`) is not modelled.
"""

from __future__ import annotations

import itertools

from .types import KubeObject

_cluster_ips = itertools.count(1)
DEFAULT_TOLERATIONS = [
    {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
    {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
]


def _container(container: dict) -> None:
    image = container.get("image", "")
    tag = image.rsplit("/", 1)[-1]
    latest = ":" not in tag or tag.endswith(":latest")
    container.setdefault("imagePullPolicy", "Always" if latest and "@" not in image else "IfNotPresent")
    container.setdefault("terminationMessagePath", "/dev/termination-log")
    container.setdefault("terminationMessagePolicy", "File")
    container.setdefault("resources", {})
    for var in container.get("env", []):
        # `value` is `omitempty` in the Go type: an empty string is not stored at all.
        if var.get("value") == "":
            del var["value"]
    for port in container.get("ports", []):
        port.setdefault("protocol", "TCP")


def default_pod(pod: KubeObject) -> None:
    """Fill in what the API server and its default admission plugins add to a new Pod."""
    spec = pod.setdefault("spec", {})
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("securityContext", {})
    spec.setdefault("enableServiceLinks", True)
    tolerations = spec.setdefault("tolerations", [])
    for default in DEFAULT_TOLERATIONS:
        if not any(t.get("key") == default["key"] for t in tolerations):
            tolerations.append(dict(default))
    for container in spec.get("initContainers", []) + spec.get("containers", []):
        _container(container)
    pod.setdefault("status", {"phase": "Pending"})


def default_service(service: KubeObject) -> None:
    """Fill in what the API server adds to a new Service (a ClusterIP unless headless)."""
    spec = service.setdefault("spec", {})
    spec.setdefault("type", "ClusterIP")
    spec.setdefault("sessionAffinity", "None")
    if "clusterIP" not in spec:
        n = next(_cluster_ips)
        spec["clusterIP"] = f"10.96.{n // 250}.{n % 250 + 1}"
    spec.setdefault("clusterIPs", [spec["clusterIP"]])
    spec.setdefault("ipFamilies", ["IPv4"])
    spec.setdefault("ipFamilyPolicy", "SingleStack")
    spec.setdefault("internalTrafficPolicy", "Cluster")
    for port in spec.get("ports", []):
        port.setdefault("protocol", "TCP")
        port.setdefault("targetPort", port.get("port"))
    service.setdefault("status", {"loadBalancer": {}})


def default_job(job: KubeObject) -> None:
    """The batch/v1 Job fields the API server fills in that the Job controller stand-in reads."""
    spec = job.setdefault("spec", {})
    spec.setdefault("backoffLimit", 6)
    spec.setdefault("completions", 1)
    spec.setdefault("parallelism", 1)
    spec.setdefault("completionMode", "NonIndexed")
    spec.setdefault("suspend", False)


def default_statefulset(sts: KubeObject) -> None:
    """The apps/v1 StatefulSet fields the API server fills in."""
    spec = sts.setdefault("spec", {})
    spec.setdefault("replicas", 1)
    spec.setdefault("podManagementPolicy", "OrderedReady")
    spec.setdefault("updateStrategy", {"type": "RollingUpdate", "rollingUpdate": {"partition": 0}})
    spec.setdefault("revisionHistoryLimit", 10)


DEFAULTERS = {
    ("v1", "Pod"): default_pod,
    ("v1", "Service"): default_service,
    ("batch/v1", "Job"): default_job,
    ("apps/v1", "StatefulSet"): default_statefulset,
}


def apply_defaults(obj: KubeObject) -> None:
    """Default an object in place according to its type (unknown types are left alone)."""
    defaulter = DEFAULTERS.get((obj.get("apiVersion", ""), obj.get("kind", "")))
    if defaulter is not None:
        defaulter(obj)
