"""The parent informer's cache: where a sync reads its parent, as Metacontroller reads it.

Metacontroller never GETs a parent to sync it: it reads the parent from its informer's cache, fed
by the API server's watch, which can lag the server by any number of writes (its own status writes
included) and can still hold an older spec. `ParentCache` is that cache for one parent kind: it
keeps the last object each watch event delivered, by uid, and answers reads with a copy. Over a
real API server the events come from the informer threads (apistore.py), so the lag is real; over
a store that tells its watchers at once, the cache is as fresh as the store.
"""

from __future__ import annotations

import threading

from localcluster.store import DELETED, json_copy
from localcluster.types import KubeObject


class ParentCache:
    """The last watched version of each parent of one kind, by uid."""

    def __init__(self, api_version: str, kind: str):
        self.api_version, self.kind = api_version, kind
        self._objects: dict[str, KubeObject] = {}
        self._lock = threading.Lock()

    def is_parent(self, obj: KubeObject) -> bool:
        return obj.get("apiVersion") == self.api_version and obj.get("kind") == self.kind

    def on_event(self, event: str, obj: KubeObject) -> None:
        """A watch event: the cache takes it before any handler sees it (an informer updates its
        indexer before it calls the handlers)."""
        if not self.is_parent(obj):
            return
        uid = obj.get("metadata", {}).get("uid")
        if not uid:
            return
        with self._lock:
            if event == DELETED:
                self._objects.pop(uid, None)
            else:
                self._objects[uid] = json_copy(obj)

    def seed(self, obj: KubeObject) -> None:
        """A parent listed before the watch began (the informer's initial list); kept if none is cached."""
        with self._lock:
            self._objects.setdefault(obj["metadata"]["uid"], json_copy(obj))

    def get(self, uid: str) -> KubeObject | None:
        """A copy of the cached parent, or None when the cache has none (deleted, or never seen)."""
        with self._lock:
            obj = self._objects.get(uid)
        return None if obj is None else json_copy(obj)
