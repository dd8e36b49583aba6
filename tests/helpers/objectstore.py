"""A plain object store for tests that need a bag of objects, not an API server.

The scenario harness (`mcsim.py`, `chainersim.py`) and the unit tests of the kubelet, DNS, gang gate
and Metacontroller emulation read and write objects through `localcluster.store.ObjectStore`; this
is the smallest thing that answers it in memory, with no network and an explicit clock. It keeps
only the bookkeeping every API server does to any object (uid, resourceVersion, generation bumped
by a spec change, creation timestamp, optimistic concurrency, status as a subresource, watch events)
and two rules of Pods the hooks and the kubelet rely on: a new Pod is Pending, and a Pod bound to a
node is deleted gracefully (it gets a deletionTimestamp, the kubelet removes it). It has no defaults, no validation and no garbage
collection: whatever depends on those runs on the real control plane (tests/conftest.py).
"""

from __future__ import annotations

import copy
import itertools
import threading
import traceback
import uuid
from collections.abc import Callable
from typing import Any

from localcluster.store import ADDED, DELETED, MODIFIED, Key, NewStatus, StoreError, Watcher, key_of, now_rfc3339
from localcluster.types import KubeObject

SYSTEM_FIELDS = ("uid", "generation", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "namespace")
DEFAULT_GRACE_SECONDS = 30


class ObjectBag:
    """Objects keyed by (apiVersion, kind, namespace, name), with watches; thread-safe."""

    def __init__(self, *, new_uid: Callable[[], str] | None = None, now: Callable[[], str] = now_rfc3339) -> None:
        """`new_uid` and `now` give uids and timestamps (scenario tests pass reproducible ones)."""
        self._new_uid = new_uid or (lambda: str(uuid.uuid4()))
        self._now = now
        self._objects: dict[Key, KubeObject] = {}
        self._lock = threading.RLock()
        self._versions = itertools.count(1)
        self._watchers: list[Watcher] = []

    def watch(self, watcher: Watcher) -> None:
        """Call `watcher(event, object)` after every change, outside the lock."""
        self._watchers.append(watcher)

    def _emit(self, event: str, obj: KubeObject) -> None:
        for watcher in list(self._watchers):
            try:
                watcher(event, copy.deepcopy(obj))
            except Exception:  # a broken watcher must not fail the write that notified it
                traceback.print_exc()

    def _stored(self, api_version: str, kind: str, namespace: str, name: str) -> KubeObject:
        stored = self._objects.get((api_version, kind, namespace, name))
        if stored is None:
            raise StoreError(404, "NotFound", f"{kind} {name!r} not found")
        return stored

    def _bump(self, obj: KubeObject) -> KubeObject:
        obj["metadata"]["resourceVersion"] = str(next(self._versions))
        return copy.deepcopy(obj)

    # --- reads -----------------------------------------------------------------------------------

    def get(self, api_version: str, kind: str, namespace: str, name: str) -> KubeObject | None:
        with self._lock:
            obj = self._objects.get((api_version, kind, namespace, name))
            return copy.deepcopy(obj) if obj is not None else None

    def list(self, api_version: str | None = None, kind: str | None = None, namespace: str | None = None) -> list[KubeObject]:
        """Copies of every object matching the filters, in creation order."""
        with self._lock:
            return [copy.deepcopy(obj) for (av, k, ns, _), obj in self._objects.items()
                    if api_version in (None, av) and kind in (None, k) and namespace in (None, ns)]

    list_shared = list  # objects here change in place, so even the shared list is of copies

    # --- writes ----------------------------------------------------------------------------------

    def create(self, obj: KubeObject, *, restore: bool = False) -> KubeObject:
        """Create an object with a new uid, generation 1 and the current time; `restore` keeps the
        uid, generation and creationTimestamp it has (scenario tests start from a parent written by hand)."""
        obj = copy.deepcopy(obj)
        meta = obj.setdefault("metadata", {})
        if not meta.get("name"):
            raise StoreError(422, "Invalid", "metadata.name is required")
        meta.setdefault("namespace", "default")
        meta.pop("deletionTimestamp", None)
        meta.pop("deletionGracePeriodSeconds", None)
        if (obj.get("apiVersion"), obj.get("kind")) == ("v1", "Pod"):
            obj["status"] = {"phase": "Pending"}  # as the Pod's create strategy does: the hooks read the phase
        with self._lock:
            if key_of(obj) in self._objects:  # before a uid is taken: scenario uids stay reproducible
                raise StoreError(409, "AlreadyExists", f"{obj['kind']} {meta['name']!r} already exists")
            fresh = {"uid": self._new_uid, "generation": lambda: 1, "creationTimestamp": self._now}
            for field, make in fresh.items():
                if not (restore and meta.get(field)):
                    meta[field] = make()  # type: ignore[literal-required]
            self._objects[key_of(obj)] = obj
            created = self._bump(obj)
        self._emit(ADDED, created)
        return created

    def update(self, obj: KubeObject) -> KubeObject:
        """Replace everything but status and system metadata; a spec change bumps generation."""
        with self._lock:
            stored = self._stored(*key_of(obj))
            expected = obj.get("metadata", {}).get("resourceVersion")
            if expected and expected != stored["metadata"]["resourceVersion"]:
                raise StoreError(409, "Conflict", f"{obj['kind']} {obj['metadata']['name']!r} was modified")
            new = copy.deepcopy(obj)
            meta: dict[str, Any] = new["metadata"]  # type: ignore[assignment]
            for field in SYSTEM_FIELDS:
                if field in stored["metadata"]:
                    meta[field] = stored["metadata"][field]  # type: ignore[literal-required]
                else:
                    meta.pop(field, None)
            new.pop("status", None)
            if "status" in stored:
                new["status"] = copy.deepcopy(stored["status"])
            if new.get("spec") != stored.get("spec"):
                meta["generation"] = stored["metadata"]["generation"] + 1
            meta["resourceVersion"] = stored["metadata"]["resourceVersion"]
            if new == stored:
                return copy.deepcopy(stored)
            self._objects[key_of(new)] = new
            updated = self._bump(new)
        self._emit(MODIFIED, updated)
        return updated

    def update_status(self, api_version: str, kind: str, namespace: str, name: str, status: NewStatus, *,
                      current: KubeObject | None = None, attempts: int = 10, uid: str | None = None) -> bool:
        """Replace .status wholesale (the status subresource); True if it changed. `current` (the fresh read an
        API client makes before its PUT) is not needed here, nor `attempts`: the bag holds the object itself, so
        nothing conflicts."""
        with self._lock:
            stored = self._stored(api_version, kind, namespace, name)
            if uid is not None and stored["metadata"].get("uid") != uid:
                raise StoreError(404, "NotFound", f"{kind} {name!r} of uid {uid} not found")
            if callable(status):
                status = status(copy.deepcopy(stored.get("status") or {}))
            if stored.get("status") == status:
                return False
            stored["status"] = copy.deepcopy(status)
            updated = self._bump(stored)
        self._emit(MODIFIED, updated)
        return True

    def delete(self, api_version: str, kind: str, namespace: str, name: str, *, uid: str | None = None) -> None:
        """Delete an object: a Pod bound to a node terminates gracefully (the kubelet removes it), the rest go at once.
        With `uid`, only that object: another of the name fails the precondition with a 409, as on the API server."""
        with self._lock:
            stored = self._stored(api_version, kind, namespace, name)
            if uid is not None and stored["metadata"]["uid"] != uid:
                raise StoreError(409, "Conflict", f"Precondition failed: UID in precondition: {uid}, "
                                                  f"UID in object meta: {stored['metadata']['uid']}")
            if stored["metadata"].get("deletionTimestamp"):
                return
            if (api_version, kind) != ("v1", "Pod") or not stored.get("spec", {}).get("nodeName"):
                del self._objects[key_of(stored)]
                event, obj = DELETED, copy.deepcopy(stored)
            else:
                stored["metadata"]["deletionTimestamp"] = self._now()
                stored["metadata"]["deletionGracePeriodSeconds"] = stored["spec"].get(
                    "terminationGracePeriodSeconds", DEFAULT_GRACE_SECONDS)
                event, obj = MODIFIED, self._bump(stored)
        self._emit(event, obj)

    def remove(self, api_version: str, kind: str, namespace: str, name: str, *, uid: str | None = None) -> None:
        """Remove an object for good (the kubelet, once a terminating Pod's containers are gone); with
        `uid`, only the object of that uid."""
        with self._lock:
            key = (api_version, kind, namespace, name)
            stored = self._objects.get(key)
            if stored is not None and uid is not None and stored["metadata"].get("uid") != uid:
                return
            stored = self._objects.pop(key, None)
        if stored is not None:
            self._emit(DELETED, stored)

    def bind(self, namespace: str, name: str, node: str) -> None:
        """The scheduler's binding: set a Pod's spec.nodeName, once."""
        with self._lock:
            stored = self._stored("v1", "Pod", namespace, name)
            if stored.get("spec", {}).get("nodeName"):
                raise StoreError(409, "Conflict", f"Pod {name!r} is already assigned to node {stored['spec']['nodeName']!r}")
            stored.setdefault("spec", {})["nodeName"] = node
            updated = self._bump(stored)
        self._emit(MODIFIED, updated)
