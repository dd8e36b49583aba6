"""TypedDict shapes of the Kubernetes objects the local cluster stores and passes around."""

from __future__ import annotations

from typing import Any, TypedDict


class OwnerReference(TypedDict, total=False):
    """metadata.ownerReferences[] entry."""

    apiVersion: str
    kind: str
    name: str
    uid: str
    controller: bool
    blockOwnerDeletion: bool


class ObjectMeta(TypedDict, total=False):
    """The metadata fields the store manages or reads."""

    name: str
    namespace: str
    uid: str
    resourceVersion: str
    generation: int
    creationTimestamp: str
    deletionTimestamp: str
    deletionGracePeriodSeconds: int
    labels: dict[str, str]
    annotations: dict[str, str]
    ownerReferences: list[OwnerReference]
    finalizers: list[str]


class KubeObject(TypedDict, total=False):
    """Any stored object: a Pod, a Service, an MXJob."""

    apiVersion: str
    kind: str
    metadata: ObjectMeta
    spec: dict[str, Any]
    status: dict[str, Any]


class EnvVar(TypedDict, total=False):
    """containers[].env[] entry (valueFrom: configMapKeyRef and fieldRef are emulated, see podenv)."""

    name: str
    value: str
    valueFrom: dict[str, Any]


class Container(TypedDict, total=False):
    """The container fields the process kubelet uses."""

    name: str
    image: str
    command: list[str]
    args: list[str]
    env: list[EnvVar]
    workingDir: str
    volumeMounts: list[dict[str, Any]]


class ContainerState(TypedDict, total=False):
    """One of waiting / running / terminated, as in containerStatuses[].state."""

    waiting: dict[str, Any]
    running: dict[str, Any]
    terminated: dict[str, Any]


class ContainerStatus(TypedDict, total=False):
    """status.containerStatuses[] entry."""

    name: str
    image: str
    ready: bool
    started: bool
    restartCount: int
    state: ContainerState
    lastState: ContainerState


class PodStatus(TypedDict, total=False):
    """status of a Pod as the kubelet reports it."""

    phase: str
    reason: str
    message: str
    startTime: str
    hostIP: str
    podIP: str
    conditions: list[dict[str, Any]]
    initContainerStatuses: list[ContainerStatus]
    containerStatuses: list[ContainerStatus]


class ChildRule(TypedDict):
    """One childResources rule of the CompositeController, resolved to a kind."""

    apiVersion: str
    resource: str
    kind: str
    updateStrategy: str


class SyncRequest(TypedDict):
    """The body Metacontroller POSTs to a sync hook (hook version v1)."""

    controller: dict[str, Any]
    parent: KubeObject
    children: dict[str, dict[str, KubeObject]]
    related: dict[str, Any]
    finalizing: bool
