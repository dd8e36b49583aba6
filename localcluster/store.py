"""What the local cluster's parts need of the API server: the `ObjectStore` interface, its errors and events.

The one implementation is `controlplane.apistore.ApiStore`, over the real control plane (controlplane/processes.py): the
server assigns uids, resourceVersions and generations, defaults and validates, and collects garbage.
The Metacontroller emulation, the process kubelet, the DNS stand-in and the gang gate are typed to
`ObjectStore` only, so a test can hand them a plain store of its own (tests/helpers/objectstore.py).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Protocol

import msgspec

from localcluster.types import KubeObject, OwnerReference

Key = tuple[str, str, str, str]  # apiVersion, kind, namespace, name
Watcher = Callable[[str, KubeObject], None]

ADDED, MODIFIED, DELETED = "ADDED", "MODIFIED", "DELETED"


_ENCODER, _DECODER = msgspec.json.Encoder(), msgspec.json.Decoder()


def json_copy(obj: Any) -> Any:
    """A deep copy of a JSON value, four times faster than copy.deepcopy (measured on stored Pods:
    160 against 680 µs each), which took most of a sync's time at thousands of children."""
    return _DECODER.decode(_ENCODER.encode(obj))


class StoreError(Exception):
    """An API error: the operation changed nothing."""

    def __init__(self, code: int, reason: str, message: str):
        super().__init__(f"{code} {reason}: {message}")
        self.code = code
        self.reason = reason
        self.message = message


def now_rfc3339() -> str:
    """The current time as Kubernetes writes it: RFC 3339, UTC, whole seconds."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def key_of(obj: KubeObject) -> Key:
    """The identity of an object in the store."""
    meta = obj.get("metadata", {})
    return (obj["apiVersion"], obj["kind"], meta.get("namespace", "default"), meta["name"])


def controller_reference(owner: KubeObject) -> OwnerReference:
    """The controller ownerReference a controller puts on what it creates or adopts."""
    return OwnerReference(apiVersion=owner["apiVersion"], kind=owner["kind"], name=owner["metadata"]["name"],
                          uid=owner["metadata"]["uid"], controller=True, blockOwnerDeletion=True)


def controller_of(obj: KubeObject) -> OwnerReference | None:
    """The object's controller: its ownerReference with controller: true, or None."""
    refs = obj.get("metadata", {}).get("ownerReferences") or []
    return next((ref for ref in refs if ref.get("controller")), None)


def controller_uid(obj: KubeObject) -> str | None:
    """The uid of the object's controller, or None."""
    ref = controller_of(obj)
    return None if ref is None else ref.get("uid")


# A status to write, or how to make it from the status the object has now (read fresh on every retry, so
# what another writer added meanwhile is kept: the scheduler's DisruptionTarget beside the kubelet's status).
NewStatus = dict[str, Any] | Callable[[dict[str, Any]], dict[str, Any]]


class ObjectStore(Protocol):
    """What the Metacontroller emulation, the kubelet and the DNS stand-in need of an API server."""

    def watch(self, watcher: Watcher) -> None: ...
    def get(self, api_version: str, kind: str, namespace: str, name: str) -> KubeObject | None: ...
    def list_shared(self, api_version: str | None = None, kind: str | None = None,
                    namespace: str | None = None) -> list[KubeObject]: ...
    def list(self, api_version: str | None = None, kind: str | None = None, namespace: str | None = None) -> list[KubeObject]: ...
    def create(self, obj: KubeObject) -> KubeObject: ...
    def update(self, obj: KubeObject) -> KubeObject: ...
    def update_status(self, api_version: str, kind: str, namespace: str, name: str, status: NewStatus, *,
                      current: KubeObject | None = None, attempts: int = 10, uid: str | None = None) -> bool: ...
    def delete(self, api_version: str, kind: str, namespace: str, name: str, *, uid: str | None = None) -> None: ...
    def remove(self, api_version: str, kind: str, namespace: str, name: str, *, uid: str | None = None) -> None: ...
    def bind(self, namespace: str, name: str, node: str) -> None: ...
