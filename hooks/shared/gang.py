"""Gang scheduling for every job kind: Volcano, scheduler-plugins (coscheduling) or Kubernetes' own
(`scheduling.k8s.io/v1beta1`, feature gate GenericWorkload) PodGroups.

Turned on by the CompositeController itself, which every sync request carries: a `podgroups`
child rule of one of the three PodGroup APIs, plus an optional annotation naming the scheduler. So
the hook has no setting of its own, and the child rules and the answer cannot disagree. This
module owns reading that, the job's `schedulingPolicy`, the PodGroup builder for both APIs, the
minimum resources of a gang, the marks a pod (or pod template) of a gang carries, and the rule
that a gang's new pods wait until its PodGroup exists (new_pods_wait).
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from hooks.shared.errors import InvalidRequest
from hooks.shared.k8s import JSON
from hooks.shared.quantity import Quantity, parse_quantity
from hooks.shared.validation import MAX_INT32

VOLCANO_API = "scheduling.volcano.sh/v1beta1"
COSCHEDULING_API = "scheduling.x-k8s.io/v1alpha1"
KUBERNETES_API = "scheduling.k8s.io/v1beta1"  # kube-scheduler's GangScheduling plugin (Kubernetes 1.37, beta)
PODGROUP_RESOURCE = "podgroups"
SCHEDULER_NAME_ANNOTATION = "scheduling.kubeflow.org/scheduler-name"
# Volcano's scheduler, the name scheduler-plugins' "as a second scheduler" install gives its own, and
# kube-scheduler's default profile, which has the gang plugin once GenericWorkload is on.
DEFAULT_SCHEDULER = {VOLCANO_API: "volcano", COSCHEDULING_API: "scheduler-plugins-scheduler",
                     KUBERNETES_API: "default-scheduler"}
VOLCANO_GROUP_ANNOTATION = "scheduling.k8s.io/group-name"
VOLCANO_TASK_ANNOTATION = "volcano.sh/task-spec"
COSCHEDULING_GROUP_LABEL = "scheduling.x-k8s.io/pod-group"


@dataclass(frozen=True)
class Gang:
    """Which PodGroup API the controller declares and which scheduler places the pods."""

    api_version: str
    scheduler_name: str

    @property
    def child_key(self) -> str:
        """The key of the observed PodGroups in a sync request's children map."""
        return f"PodGroup.{self.api_version}"

    @property
    def volcano(self) -> bool:
        """Volcano (queues, priority on the PodGroup) rather than scheduler-plugins."""
        return self.api_version == VOLCANO_API

    @property
    def kubernetes(self) -> bool:
        """Kubernetes' own PodGroup: a pod joins it by a spec field, the group has only a size."""
        return self.api_version == KUBERNETES_API


@dataclass(frozen=True)
class SchedulingPolicy:
    """A job's schedulingPolicy, validated; None means not given."""

    min_available: int | None = None
    queue: str | None = None
    priority_class: str | None = None
    min_resources: dict[str, Quantity] | None = None
    schedule_timeout_seconds: int | None = None


def read_gang(request: Mapping[str, Any]) -> Gang | None:
    """The gang configuration of the CompositeController in a sync request, or None when it has none."""
    controller = request.get("controller")
    if controller is None:
        return None
    if not isinstance(controller, Mapping):
        raise InvalidRequest("controller: must be the CompositeController object")
    spec = controller.get("spec") or {}
    rules = (spec.get("childResources") if isinstance(spec, Mapping) else None) or []
    if not isinstance(rules, list):
        raise InvalidRequest("controller.spec.childResources: must be a list of child rules")
    found = [(i, rule) for i, rule in enumerate(rules)
             if isinstance(rule, Mapping) and rule.get("resource") == PODGROUP_RESOURCE]
    if not found:
        return None
    supported = (f"use {VOLCANO_API} (Volcano), {COSCHEDULING_API} (scheduler-plugins) or "
                 f"{KUBERNETES_API} (Kubernetes' own, feature gate GenericWorkload)")
    if len(found) > 1:
        raise InvalidRequest(f"controller.spec.childResources: {len(found)} rules for "
                             f"{PODGROUP_RESOURCE}; keep one ({supported})")
    index, rule = found[0]
    api_version = rule.get("apiVersion")
    if not isinstance(api_version, str) or api_version not in DEFAULT_SCHEDULER:
        raise InvalidRequest(f"controller.spec.childResources[{index}].apiVersion: "
                             f"{PODGROUP_RESOURCE} of {api_version!r} are not supported; {supported}")
    metadata = controller.get("metadata") or {}
    annotations = (metadata.get("annotations") if isinstance(metadata, Mapping) else None) or {}
    if not isinstance(annotations, Mapping):
        annotations = {}
    name = annotations.get(SCHEDULER_NAME_ANNOTATION, DEFAULT_SCHEDULER[api_version])
    if not isinstance(name, str) or not name:
        raise InvalidRequest(f"controller.metadata.annotations[{SCHEDULER_NAME_ANNOTATION}]: must "
                             f"name the scheduler, e.g. {DEFAULT_SCHEDULER[api_version]}")
    return Gang(api_version=api_version, scheduler_name=name)


def parse_scheduling_policy(raw: Any, path: str, problems: list[str]) -> SchedulingPolicy:
    """Read a schedulingPolicy object, adding every problem (with its field path) to `problems`."""
    if raw is None:
        return SchedulingPolicy()
    if not isinstance(raw, Mapping):
        problems.append(f"{path}: must be an object (minAvailable, queue, minResources, "
                        f"priorityClass, scheduleTimeoutSeconds)")
        return SchedulingPolicy()
    min_available = _int32(raw.get("minAvailable"), f"{path}.minAvailable", "pods", problems)
    timeout = _int32(raw.get("scheduleTimeoutSeconds"), f"{path}.scheduleTimeoutSeconds",
                     "seconds", problems)
    names = {}
    for key in ("queue", "priorityClass"):
        value = raw.get(key)
        if value is not None and not isinstance(value, str):
            problems.append(f"{path}.{key}: must be a name (a string), got {value!r}")
            value = None
        names[key] = value or None
    resources = _min_resources(raw.get("minResources"), f"{path}.minResources", problems)
    return SchedulingPolicy(min_available=min_available, queue=names["queue"],
                            priority_class=names["priorityClass"], min_resources=resources,
                            schedule_timeout_seconds=timeout)


def check_min_available(policy: SchedulingPolicy, total: int, path: str,
                        problems: list[str]) -> None:
    """A gang larger than the job could never be complete, so its pods would wait forever."""
    if policy.min_available is not None and policy.min_available > total:
        problems.append(f"{path}.minAvailable: {policy.min_available} is more than the job's "
                        f"{total} pods, so the gang could never start; use at most {total}, or "
                        f"leave it out to gang every pod")


def _int32(value: Any, path: str, unit: str, problems: list[str]) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        problems.append(f"{path}: must be a non-negative integer ({unit}), got {value!r}")
        return None
    if value > MAX_INT32:
        problems.append(f"{path}: must be at most {MAX_INT32} ({unit}), got {value}")
        return None
    return int(value)  # an int already; int() tells the type checker


def _min_resources(raw: Any, path: str, problems: list[str]) -> dict[str, Quantity] | None:
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        problems.append(f"{path}: must be a map of resource name to quantity, e.g. "
                        f"{{cpu: 8, memory: 32Gi, nvidia.com/gpu: 4}}")
        return None
    resources = {}
    for name, value in raw.items():
        try:
            quantity = parse_quantity(value)
        except ValueError as err:
            problems.append(f"{path}.{name}: {err}")
            continue
        if quantity.value < 0:
            problems.append(f"{path}.{name}: must not be negative, got {value!r}")
            continue
        resources[str(name)] = quantity
    return resources


def min_resources(members: Iterable[tuple[str, Mapping[str, Any], int]], min_member: int,
                  problems: list[str]) -> dict[str, str]:
    """What the first `min_member` pods request together: the gang's minResources, canonical.

    `members` lists (field path of the pod template spec, the spec, how many pods use it) in the
    job's fixed order (replica types, then indexes). The order Metacontroller creates them in is
    not defined within a kind, so this is an estimate whenever the members differ. A pod counts
    as the scheduler counts it: the sum of its containers, or its largest init container where
    that is more; a container's limit stands in
    for a request it does not make (a GPU is usually only a limit).
    """
    total: dict[str, Quantity] = {}
    left = min_member
    for path, pod_spec, count in members:
        if left <= 0:
            break
        taken = min(count, left)
        left -= taken
        for name, quantity in _pod_requests(path, pod_spec, problems).items():
            scaled = Quantity(quantity.value * taken, quantity.format)
            total[name] = total[name] + scaled if name in total else scaled
    return {name: total[name].canonical() for name in sorted(total)}


def _pod_requests(path: str, pod_spec: Mapping[str, Any], problems: list[str]) -> dict[str, Quantity]:
    containers: dict[str, Quantity] = {}
    for i, container in enumerate(pod_spec.get("containers") or []):
        for name, quantity in _container_requests(f"{path}.containers[{i}]", container,
                                                  problems).items():
            containers[name] = containers[name] + quantity if name in containers else quantity
    for i, container in enumerate(pod_spec.get("initContainers") or []):
        for name, quantity in _container_requests(f"{path}.initContainers[{i}]", container,
                                                  problems).items():
            if name not in containers or quantity.value > containers[name].value:
                containers[name] = quantity
    return containers


def _container_requests(path: str, container: Any, problems: list[str]) -> dict[str, Quantity]:
    resources = container.get("resources") if isinstance(container, Mapping) else None
    if not isinstance(resources, Mapping):
        return {}
    found: dict[str, Quantity] = {}
    for field in ("requests", "limits"):
        values = resources.get(field) or {}
        if not isinstance(values, Mapping):
            problems.append(f"{path}.resources.{field}: must be a map of resource name to quantity")
            continue
        for name, value in values.items():
            if name in found:
                continue  # a request wins over the limit of the same resource
            try:
                found[name] = parse_quantity(value)
            except ValueError as err:
                problems.append(f"{path}.resources.{field}.{name}: {err}")
    return found


def podgroup_for(gang: Gang, *, name: str, namespace: str, labels: Mapping[str, str],
                 min_member: int, policy: SchedulingPolicy,
                 resources: Mapping[str, str]) -> JSON:
    """The job's one PodGroup, with only the fields its API has (the API server prunes or refuses others)."""
    spec: JSON
    if gang.kubernetes:
        # minCount must be positive, and gang or basic is fixed at creation: minAvailable 0 (no pod
        # waits for another) is a gang of one, which kube-scheduler places as it places any pod.
        spec = {"schedulingPolicy": {"gang": {"minCount": max(min_member, 1)}}}
        return _podgroup(gang, name, namespace, labels, spec)
    spec = {"minMember": min_member}
    if resources:
        spec["minResources"] = dict(resources)
    if gang.volcano:
        if policy.queue:
            spec["queue"] = policy.queue
        if policy.priority_class:
            spec["priorityClassName"] = policy.priority_class
    elif policy.schedule_timeout_seconds is not None:
        spec["scheduleTimeoutSeconds"] = policy.schedule_timeout_seconds
    return _podgroup(gang, name, namespace, labels, spec)


def _podgroup(gang: Gang, name: str, namespace: str, labels: Mapping[str, str], spec: JSON) -> JSON:
    return {"apiVersion": gang.api_version, "kind": "PodGroup",
            "metadata": {"name": name, "namespace": namespace, "labels": dict(labels)},
            "spec": spec}


def mark_pod(gang: Gang, metadata: JSON, pod_spec: JSON, *, group: str, task: str,
             priority_class: str | None) -> None:
    """Put a fresh pod (or pod template) of the gang in its group, for the gang's scheduler."""
    if not pod_spec.get("schedulerName"):
        pod_spec["schedulerName"] = gang.scheduler_name
    if priority_class and not pod_spec.get("priorityClassName"):
        pod_spec["priorityClassName"] = priority_class
    if gang.volcano:
        metadata["annotations"] = {**(metadata.get("annotations") or {}),
                                   VOLCANO_GROUP_ANNOTATION: group, VOLCANO_TASK_ANNOTATION: task}
    elif gang.kubernetes:
        pod_spec["schedulingGroup"] = {"podGroupName": group}
    else:
        metadata["labels"] = {**(metadata.get("labels") or {}), COSCHEDULING_GROUP_LABEL: group}


def new_pods_wait(podgroup: Mapping[str, Any] | None, observed_podgroups: Mapping[str, Any]) -> bool:
    """Whether the job's new pods (or pod-making children) must wait for its PodGroup.

    `podgroup` is the PodGroup the answer holds (None when the job has none: no gang, finished or
    suspended, so nothing waits). Metacontroller writes a `scheduling.*` child after every core,
    apps and batch child, so a pod answered together with its PodGroup reaches the scheduler
    before the group exists and is rejected until it does. So the first answer holds the PodGroup
    (and the other non-pod children) alone, and its creation triggers the sync that adds the
    pods. Only creation waits: a child that exists is always kept, even when its PodGroup has
    gone (the same answer creates the group again). A PodGroup being deleted is no group.
    """
    if podgroup is None:
        return False
    observed = observed_podgroups.get(podgroup["metadata"]["name"])
    if not isinstance(observed, Mapping):
        return True
    meta = observed.get("metadata")
    return isinstance(meta, Mapping) and bool(meta.get("deletionTimestamp"))


def podgroup_wait_message(kind: str, key: str, podgroup: Mapping[str, Any], what: str) -> str:
    """What a status says while `what` (the job's pods, or the children that make them) wait."""
    group = f"{podgroup['metadata']['namespace']}/{podgroup['metadata']['name']}"
    served = ("the API server serves it (kube-apiserver --feature-gates=GenericWorkload=true "
              f"--runtime-config={KUBERNETES_API}=true)" if podgroup["apiVersion"] == KUBERNETES_API
              else "the PodGroup CRD is installed")
    return (f"{kind} {key}: {what} are created once its PodGroup {group} ({podgroup['apiVersion']}) "
            f"exists, so they reach the gang scheduler with their group; Metacontroller creates it "
            f"after the job's other children. If this lasts, check that {served} "
            f"and that Metacontroller may create podgroups.")
