"""kube-scheduler's resource fit, for the gang stand-in: what a pod requests, what a Node has free, and
the scheduler's words when a pod does not fit. Pure: objects in, numbers and words out.

The rules are kube-scheduler's (the NodeResourcesFit plugin over `PodRequests`, v1.37):
- a pod requests the sum of its containers' requests, or, where more, its largest init container
  together with the sidecars (init containers with `restartPolicy: Always`) started before it;
  sidecars keep running beside the containers, so they add to the sum as well;
- pod-level requests (`spec.resources.requests`) replace the containers' for cpu, memory and hugepages;
- the pod's `overhead` (its RuntimeClass's) is added;
- only requests count: the API server writes a container's limit as its request when it has none.
A Node has free its `allocatable` less what the pods bound to it and not terminal request, and room
for `allocatable.pods` pods less those. A resource the pod asks none of is never short.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from decimal import Decimal
from typing import Any

from kubernetes.utils import parse_quantity

from localcluster.types import KubeObject

Resources = dict[str, Decimal]
PODS = "pods"  # in allocatable: how many pods the Node takes
TERMINAL = ("Succeeded", "Failed")  # a pod in these phases holds nothing (kube-scheduler does not even watch it)


def _quantities(raw: Any) -> Resources:
    return {str(name): parse_quantity(value) for name, value in (raw or {}).items()}


def _add(total: Resources, more: Mapping[str, Decimal]) -> None:
    for name, value in more.items():
        total[name] = total.get(name, Decimal(0)) + value


def _at_least(total: Resources, other: Mapping[str, Decimal]) -> None:
    for name, value in other.items():
        if value > total.get(name, Decimal(0)):
            total[name] = value


def _pod_level(name: str) -> bool:
    return name in ("cpu", "memory") or name.startswith("hugepages-")


def pod_requests(pod: KubeObject) -> Resources:
    """What kube-scheduler counts a pod as requesting (the module's rules); ValueError for a bad quantity."""
    spec = pod.get("spec") or {}
    total: Resources = {}
    for container in spec.get("containers") or []:
        _add(total, _quantities((container.get("resources") or {}).get("requests")))
    sidecars: Resources = {}
    init: Resources = {}  # the most any one init container needs while it runs
    for container in spec.get("initContainers") or []:
        own = _quantities((container.get("resources") or {}).get("requests"))
        if container.get("restartPolicy") == "Always":
            _add(total, own)
            _add(sidecars, own)
            _at_least(init, sidecars)
        else:
            running = dict(own)
            _add(running, sidecars)
            _at_least(init, running)
    _at_least(total, init)
    pod_level = _quantities((spec.get("resources") or {}).get("requests"))
    total.update({name: value for name, value in pod_level.items() if _pod_level(name)})
    _add(total, _quantities(spec.get("overhead")))
    return total


def occupies(pod: KubeObject, node: str) -> bool:
    """Whether a pod holds part of the Node: bound there and not terminal (a pod being deleted still runs)."""
    return (pod.get("spec") or {}).get("nodeName") == node and (pod.get("status") or {}).get("phase") not in TERMINAL


def free_on(node: KubeObject, pods: Iterable[KubeObject]) -> Resources:
    """The Node's allocatable less what the pods that occupy it (of `pods`, any namespace) request."""
    name = node["metadata"]["name"]
    free = _quantities((node.get("status") or {}).get("allocatable"))
    for pod in pods:
        if occupies(pod, name):
            for resource, value in pod_requests(pod).items():
                free[resource] = free.get(resource, Decimal(0)) - value
            free[PODS] = free.get(PODS, Decimal(0)) - 1
    return free


def minus(free: Mapping[str, Decimal], requests: Mapping[str, Decimal], pods: int = 1) -> Resources:
    """What is left of `free` once `pods` pods requesting `requests` together are placed."""
    left = dict(free)
    for resource, value in requests.items():
        left[resource] = left.get(resource, Decimal(0)) - value
    left[PODS] = left.get(PODS, Decimal(0)) - pods
    return left


def short(requests: Mapping[str, Decimal], free: Mapping[str, Decimal], pods: int = 1) -> list[str]:
    """kube-scheduler's reasons `pods` pods requesting `requests` together do not fit in `free`, sorted as it
    sorts them (`Insufficient cpu`, `Too many pods`); [] when they fit."""
    reasons = [f"Insufficient {name}" for name, value in requests.items()
               if name != PODS and value > 0 and value > free.get(name, Decimal(0))]
    if pods > free.get(PODS, Decimal(0)):
        reasons.append("Too many pods")
    return sorted(reasons)


def unavailable(reasons: Iterable[str]) -> str:
    """The scheduler's message for one Node that does not fit, as Volcano writes it on a pod."""
    return f"0/1 nodes are unavailable: {', '.join(f'1 {reason}' for reason in reasons)}."


def show(resource: str, value: Decimal) -> str:
    """A quantity as a user writes it: cpu in cores or millicores, bytes in the largest exact binary unit."""
    if resource == "cpu" and value != value.to_integral_value():
        return f"{(value * 1000).to_integral_value()}m"
    if value != value.to_integral_value():
        return str(value.normalize())
    number = int(value)
    if resource in ("memory", "ephemeral-storage") or resource.startswith("hugepages-"):
        for suffix, power in (("Ti", 40), ("Gi", 30), ("Mi", 20), ("Ki", 10)):
            if number and number % 2 ** power == 0:
                return f"{number >> power}{suffix}"
    return str(number)
