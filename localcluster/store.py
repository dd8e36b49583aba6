"""The API "store": an in-memory, thread-safe stand-in for the Kubernetes API server's object storage.

It owns what the API server would do for us: uids, resourceVersions, generation bumps on spec
changes, creation and deletion timestamps, graceful deletion of Pods bound to a node, background
garbage collection of dependents, and a watch that tells subscribers about every change.
"""

from __future__ import annotations

import copy
import itertools
import threading
import traceback
import uuid
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from datetime import UTC, datetime
from typing import Any, Protocol

import msgspec

from .defaults import apply_defaults, prepare_for_create
from .types import KubeObject, OwnerReference

Key = tuple[str, str, str, str]  # apiVersion, kind, namespace, name
Watcher = Callable[[str, KubeObject], None]

ADDED, MODIFIED, DELETED = "ADDED", "MODIFIED", "DELETED"
DEFAULT_GRACE_SECONDS = 30


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


def _validate(obj: KubeObject) -> None:
    """The API server's validation of the objects whose refusal the tests need to see (422 Invalid)."""
    if obj.get("apiVersion") == "v1" and obj.get("kind") == "Service":
        ports = obj.get("spec", {}).get("ports") or []
        names = [p.get("name") for p in ports if p.get("name")]
        pairs = [(p.get("port"), p.get("protocol", "TCP")) for p in ports]
        for index, name in enumerate(names):
            if name in names[:index]:
                raise StoreError(422, "Invalid",
                                 f"Service {obj['metadata']['name']!r}: spec.ports[{index}].name: Duplicate value: {name!r}")
        for index, pair in enumerate(pairs):
            if pair in pairs[:index]:
                raise StoreError(422, "Invalid", f"Service {obj['metadata']['name']!r}: spec.ports[{index}]: Duplicate value: "
                                                 f"{{port: {pair[0]}, protocol: {pair[1]}}}")


class ObjectStore(Protocol):
    """What the controllers, the kubelet and the DNS stand-in need of an API server: the in-memory
    `Store` below, or `apistore.ApiStore` over a real one."""

    def watch(self, watcher: Watcher) -> None: ...
    def batch(self) -> AbstractContextManager[None]: ...
    def get(self, api_version: str, kind: str, namespace: str, name: str) -> KubeObject | None: ...
    def list_shared(self, api_version: str | None = None, kind: str | None = None,
                    namespace: str | None = None) -> list[KubeObject]: ...
    def list(self, api_version: str | None = None, kind: str | None = None, namespace: str | None = None) -> list[KubeObject]: ...
    def create(self, obj: KubeObject, *, restore: bool = False) -> KubeObject: ...
    def update(self, obj: KubeObject) -> KubeObject: ...
    def update_status(self, api_version: str, kind: str, namespace: str, name: str, status: dict[str, Any], *,
                      current: KubeObject | None = None) -> bool: ...
    def delete(self, api_version: str, kind: str, namespace: str, name: str) -> None: ...
    def remove(self, api_version: str, kind: str, namespace: str, name: str) -> None: ...
    def bind(self, namespace: str, name: str, node: str) -> None: ...


class Store:
    """Objects keyed by (apiVersion, kind, namespace, name), with watches."""

    def __init__(self, *, new_uid: Callable[[], str] | None = None, now: Callable[[], str] = now_rfc3339) -> None:
        """`new_uid` and `now` give uids and timestamps (scenario tests pass reproducible ones)."""
        self._new_uid = new_uid or (lambda: str(uuid.uuid4()))
        self._now = now
        self._objects: dict[Key, KubeObject] = {}
        self._lock = threading.RLock()
        self._versions = itertools.count(1)
        self._watchers: list[Watcher] = []
        self._batch = threading.local()

    # --- watch -----------------------------------------------------------------------------------

    def watch(self, watcher: Watcher) -> None:
        """Call `watcher(event, object)` after every change (outside the store lock)."""
        self._watchers.append(watcher)

    @contextmanager
    def batch(self) -> Iterator[None]:
        """Hold the store and defer notifications, so watchers see a group of changes as one.

        Every write is a batch of one; a caller may group several writes (a test setting up a scene).
        """
        with self._lock:
            depth = getattr(self._batch, "depth", 0)
            if depth == 0:
                self._batch.pending = []
            self._batch.depth = depth + 1
            try:
                yield
            finally:
                self._batch.depth = depth
                pending = self._batch.pending if depth == 0 else []
        for event, obj in pending:
            self._emit(event, obj)

    def _notify(self, event: str, obj: KubeObject) -> None:
        """Queue one notification until the outermost write or batch releases the lock."""
        self._batch.pending.append((event, copy.deepcopy(obj)))

    def _emit(self, event: str, obj: KubeObject) -> None:
        for watcher in list(self._watchers):
            try:
                watcher(event, obj)
            except Exception:  # a broken watcher must not fail the write that notified it
                traceback.print_exc()

    # Every write runs as a (possibly nested) batch: watchers never run under the store lock.
    _write = batch

    # --- reads -----------------------------------------------------------------------------------

    def get(self, api_version: str, kind: str, namespace: str, name: str) -> KubeObject | None:
        """A copy of one object, or None."""
        with self._lock:
            obj = self._objects.get((api_version, kind, namespace, name))
            return copy.deepcopy(obj) if obj is not None else None

    def list_shared(self, api_version: str | None = None, kind: str | None = None,
                    namespace: str | None = None) -> list[KubeObject]:
        """As `list` (read-only where a store can share its objects; this one changes them in place, so copies)."""
        return self.list(api_version, kind, namespace)

    def list(self, api_version: str | None = None, kind: str | None = None, namespace: str | None = None) -> list[KubeObject]:
        """Copies of every object matching the filters, in creation order."""
        with self._lock:
            return [
                copy.deepcopy(obj)
                for (av, k, ns, _), obj in self._objects.items()
                if (api_version is None or av == api_version)
                and (kind is None or k == kind)
                and (namespace is None or ns == namespace)
            ]

    # --- writes ----------------------------------------------------------------------------------

    def _bump(self, obj: KubeObject) -> None:
        obj["metadata"]["resourceVersion"] = str(next(self._versions))

    def create(self, obj: KubeObject, *, restore: bool = False) -> KubeObject:
        """Create an object; the store assigns uid, resourceVersion, generation and creationTimestamp.

        `restore` keeps a given uid and generation, as a restore from a backup would (scenario tests
        start from a parent they wrote by hand).
        """
        obj = copy.deepcopy(obj)
        meta = obj.setdefault("metadata", {})
        if not meta.get("name"):
            raise StoreError(422, "Invalid", "metadata.name is required (generateName is not emulated)")
        meta.setdefault("namespace", "default")
        apply_defaults(obj)
        _validate(obj)
        with self._write():
            key = key_of(obj)
            if key in self._objects:
                raise StoreError(409, "AlreadyExists", f"{key[1]} {key[3]!r} already exists")
            if not (restore and meta.get("uid")):
                meta["uid"] = self._new_uid()
            if not (restore and meta.get("generation")):
                meta["generation"] = 1
            if not (restore and meta.get("creationTimestamp")):
                meta["creationTimestamp"] = self._now()
            prepare_for_create(obj)
            meta.pop("deletionTimestamp", None)
            meta.pop("deletionGracePeriodSeconds", None)
            self._bump(obj)
            self._objects[key] = obj
            self._notify(ADDED, obj)
            return copy.deepcopy(obj)

    def update(self, obj: KubeObject) -> KubeObject:
        """Replace everything but status and system metadata; spec changes bump generation."""
        with self._write():
            key = key_of(obj)
            stored = self._objects.get(key)
            if stored is None:
                raise StoreError(404, "NotFound", f"{key[1]} {key[3]!r} not found")
            expected = obj.get("metadata", {}).get("resourceVersion")
            if expected and expected != stored["metadata"]["resourceVersion"]:
                raise StoreError(409, "Conflict", f"{key[1]} {key[3]!r} was modified; resourceVersion {expected} is stale")
            new = copy.deepcopy(obj)
            apply_defaults(new)  # the API server defaults on every write, not only on create
            _validate(new)
            meta: dict[str, Any] = new.setdefault("metadata", {})  # type: ignore[assignment]
            for system_field in ("uid", "generation", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "namespace"):
                if system_field in stored["metadata"]:
                    meta[system_field] = stored["metadata"][system_field]
                else:
                    meta.pop(system_field, None)
            if "status" in stored:
                new["status"] = copy.deepcopy(stored["status"])
            else:
                new.pop("status", None)
            if new.get("spec") != stored.get("spec"):
                meta["generation"] = stored["metadata"]["generation"] + 1
            meta["resourceVersion"] = stored["metadata"]["resourceVersion"]
            if new == stored:
                return copy.deepcopy(stored)
            self._bump(new)
            self._objects[key] = new
            self._notify(MODIFIED, new)
            return copy.deepcopy(new)

    def update_status(self, api_version: str, kind: str, namespace: str, name: str, status: dict[str, Any], *,
                      current: KubeObject | None = None) -> bool:
        """Replace .status wholesale (the status subresource); True if it changed. (`current`, the
        caller's fresh read, saves a real server's client a read; nothing to save here.)"""
        with self._write():
            stored = self._objects.get((api_version, kind, namespace, name))
            if stored is None:
                raise StoreError(404, "NotFound", f"{kind} {name!r} not found")
            if stored.get("status") == status:
                return False
            stored["status"] = copy.deepcopy(status)
            self._bump(stored)
            self._notify(MODIFIED, stored)
            return True

    def delete(self, api_version: str, kind: str, namespace: str, name: str) -> None:
        """Delete an object: Pods bound to a node terminate gracefully, the rest go at once."""
        with self._write():
            stored = self._objects.get((api_version, kind, namespace, name))
            if stored is None:
                raise StoreError(404, "NotFound", f"{kind} {name!r} not found")
            if stored["metadata"].get("deletionTimestamp"):
                return
            if kind == "Pod" and api_version == "v1" and stored.get("spec", {}).get("nodeName"):
                # The kubelet owns the end of a bound Pod: it stops the containers, then removes it.
                grace = stored.get("spec", {}).get("terminationGracePeriodSeconds", DEFAULT_GRACE_SECONDS)
                stored["metadata"]["deletionTimestamp"] = self._now()
                stored["metadata"]["deletionGracePeriodSeconds"] = grace
                self._bump(stored)
                self._notify(MODIFIED, stored)
            else:
                self._remove_locked(stored)

    def bind(self, namespace: str, name: str, node: str) -> None:
        """The scheduler's binding: set a Pod's spec.nodeName (which an update may not change), so deletion becomes graceful."""
        with self._write():
            stored = self._objects.get(("v1", "Pod", namespace, name))
            if stored is None:
                raise StoreError(404, "NotFound", f"Pod {name!r} not found")
            if stored.get("spec", {}).get("nodeName"):
                raise StoreError(409, "Conflict", f"Pod {name!r} is already assigned to node {stored['spec']['nodeName']!r}")
            stored["spec"]["nodeName"] = node
            self._bump(stored)
            self._notify(MODIFIED, stored)

    def remove(self, api_version: str, kind: str, namespace: str, name: str) -> None:
        """Remove an object for good (the kubelet, once a terminating Pod's containers are gone)."""
        with self._write():
            stored = self._objects.get((api_version, kind, namespace, name))
            if stored is not None:
                self._remove_locked(stored)

    def _remove_locked(self, stored: KubeObject) -> None:
        """Drop one object and garbage-collect its dependents (background propagation)."""
        del self._objects[key_of(stored)]
        self._notify(DELETED, stored)
        uid = stored["metadata"]["uid"]
        for dependent in list(self._objects.values()):
            refs = dependent["metadata"].get("ownerReferences", [])
            if any(ref.get("uid") == uid for ref in refs):
                self.delete(*key_of(dependent))
