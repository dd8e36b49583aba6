"""A minimal level-triggered controller loop over the store, shared by the Job and StatefulSet stand-ins.

Like a kube-controller-manager controller: watch events become keys of the objects to reconcile (an
owned Pod maps to its owner), one worker thread reconciles one key at a time from the store's current
state, and `reconcile` may ask to be called again after a delay (deadlines, backoff).
"""

from __future__ import annotations

import sys
import threading
import traceback

from .delayqueue import DelayQueue
from .store import DELETED, Store, StoreError, controller_of, controller_uid
from .types import KubeObject

Key = tuple[str, str]  # namespace, name


class Reconciler:
    """Reconciles objects of one (apiVersion, kind) whenever they or the Pods they own change."""

    api_version = ""
    kind = ""

    def __init__(self, store: Store):
        self.store = store
        self._queue: DelayQueue[Key] = DelayQueue()
        self._thread = threading.Thread(target=self._work, name=f"{self.kind.lower()}-controller", daemon=True)

    def start(self) -> None:
        """Watch the store and reconcile every existing object once."""
        self.store.watch(self._on_event)
        for obj in self.store.list(self.api_version, self.kind):
            self.enqueue((obj["metadata"]["namespace"], obj["metadata"]["name"]))
        self._thread.start()

    def stop(self) -> None:
        """Stop the worker thread (a reconcile in progress finishes first)."""
        self._queue.stop()
        if self._thread.is_alive():
            self._thread.join(timeout=5)

    def enqueue(self, key: Key, delay: float = 0.0) -> None:
        """Reconcile `key` after `delay` seconds."""
        self._queue.add(key, delay)

    def _on_event(self, event: str, obj: KubeObject) -> None:
        meta = obj.get("metadata", {})
        if obj.get("apiVersion") == self.api_version and obj.get("kind") == self.kind:
            if event == DELETED:
                self.forget(obj)
            else:
                self.enqueue((meta["namespace"], meta["name"]))
            return
        if obj.get("apiVersion") == "v1" and obj.get("kind") == "Pod":
            ref = controller_of(obj)
            if ref is not None and ref.get("kind") == self.kind and ref.get("apiVersion") == self.api_version:
                self.enqueue((meta["namespace"], ref["name"]))

    def _work(self) -> None:
        while (key := self._queue.get()) is not None:
            try:
                again = self.reconcile(key)
            except StoreError as err:  # refused by the API (a quota, say): a FailedCreate event, then retry
                print(f"localcluster: {self.kind} {key[0]}/{key[1]}: {err}; retrying", file=sys.stderr)
                again = 1.0
            except Exception:  # a bug in one reconcile must not stop the controller
                traceback.print_exc()
                again = 1.0
            finally:
                self._queue.done(key)
            if again is not None:
                self.enqueue(key, again)

    def owned_pods(self, owner: KubeObject) -> list[KubeObject]:
        """The Pods whose controller ownerReference is `owner`, sorted by name."""
        uid = owner["metadata"]["uid"]
        return sorted(
            (pod for pod in self.store.list("v1", "Pod", owner["metadata"]["namespace"])
             if controller_uid(pod) == uid),
            key=lambda pod: pod["metadata"]["name"],
        )

    @staticmethod
    def terminating(pod: KubeObject) -> bool:
        return bool(pod["metadata"].get("deletionTimestamp"))

    @staticmethod
    def ready(pod: KubeObject) -> bool:
        """The Pod's Ready condition is True (and it is not being deleted)."""
        conditions = pod.get("status", {}).get("conditions", [])
        return not pod["metadata"].get("deletionTimestamp") and any(
            c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)

    def reconcile(self, key: Key) -> float | None:
        """Bring the world closer to one object's spec; seconds until the next call, or None."""
        raise NotImplementedError

    def forget(self, obj: KubeObject) -> None:
        """Drop in-memory state about a deleted object."""
