"""Typed shapes of the Kubernetes and Metacontroller objects the core reads and writes."""
from __future__ import annotations

from typing import Any, TypedDict

JSON = dict[str, Any]


class Condition(TypedDict):
    type: str
    status: str
    reason: str
    message: str
    lastUpdateTime: str
    lastTransitionTime: str


class RestartRecord(TypedDict, total=False):
    lastFailedUID: str
    lastExitCode: int
    recreations: int
    priorContainerRestarts: int


class SyncResponse(TypedDict, total=False):
    status: JSON
    children: list[JSON]
    resyncAfterSeconds: float


LAST_APPLIED = "metacontroller.k8s.io/last-applied-configuration"
POD_KEY = "Pod.v1"
SERVICE_KEY = "Service.v1"
CONFIG_MAP_KEY = "ConfigMap.v1"
