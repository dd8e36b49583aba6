"""The local cluster's gang scheduler: holds the pods of a PodGroup back until the gang is complete.

It stands in for both Volcano and scheduler-plugins' coscheduling, which cannot be built here. As
those do, it is a second scheduler: it places the pods whose `schedulerName` is not kube-scheduler's
(`default-scheduler`; the hooks name `volcano` or `scheduler-plugins-scheduler`, or what the
CompositeController's annotation says), and no other, binding each through `pods/binding` to the
process kubelet's Node. A pod names its group the way each scheduler reads it (Volcano: an
annotation; scheduler-plugins: a label); it is bound once its PodGroup exists and at least
`minMember` pods of the group exist, so every pod of the gang starts at the same time. Until then it
stays Pending with PodScheduled False, reason Unschedulable and the gate's message, as the
scheduler writes it. A pod of another scheduler outside any gang is bound at once. Nothing else of
those schedulers is emulated: not resource fit (kube-scheduler's alone here), queues or preemption.
The marker names are the schedulers' API, written here independently of the hooks so the local
cluster checks what the hooks emit instead of sharing their constants.
"""

from __future__ import annotations

import threading
import traceback
from typing import Any

from localcluster.node.registration import NODE_NAME
from localcluster.store import DELETED, ObjectStore, StoreError, now_rfc3339
from localcluster.types import KubeObject

DEFAULT_SCHEDULER = "default-scheduler"  # kube-scheduler's pods; a pod without schedulerName gets it by default
POLL_SECONDS = 0.1  # how often a held pod is looked at again (a PodGroup or a peer may have come)

VOLCANO_API = "scheduling.volcano.sh/v1beta1"
COSCHEDULING_API = "scheduling.x-k8s.io/v1alpha1"
VOLCANO_GROUP_ANNOTATION = "scheduling.k8s.io/group-name"
COSCHEDULING_GROUP_LABEL = "scheduling.x-k8s.io/pod-group"


def group_of(pod: KubeObject) -> tuple[str, str] | None:
    """The (PodGroup apiVersion, name) a pod belongs to, or None for a pod outside any gang."""
    meta = pod.get("metadata", {})
    name = (meta.get("annotations") or {}).get(VOLCANO_GROUP_ANNOTATION)
    if name:
        return VOLCANO_API, name
    name = (meta.get("labels") or {}).get(COSCHEDULING_GROUP_LABEL)
    if name:
        return COSCHEDULING_API, name
    return None


class GangGate:
    """Why a pod may not be scheduled yet (a message), or None once it may."""

    def __init__(self, store: ObjectStore):
        self.store = store

    def __call__(self, pod: KubeObject) -> str | None:
        group = group_of(pod)
        if group is None:
            return None
        api_version, name = group
        namespace = pod["metadata"]["namespace"]
        podgroup = self.store.get(api_version, "PodGroup", namespace, name)
        if podgroup is None:
            return f"pod group {name}: waiting for the PodGroup to be created"
        min_member = int(podgroup.get("spec", {}).get("minMember") or 0)
        members = sum(1 for other in self.store.list_shared("v1", "Pod", namespace)
                      if group_of(other) == group and not other["metadata"].get("deletionTimestamp"))
        if members < min_member:
            return (f"pod group {name}: {members} of its minMember {min_member} pods exist; "
                    f"the gang starts when {min_member} do")
        return None


def stand_in_for(pod: KubeObject) -> bool:
    """Whether the gang stand-in places this pod: unbound, alive, and for a scheduler other than kube-scheduler's."""
    spec, meta = pod.get("spec") or {}, pod.get("metadata") or {}
    return (spec.get("schedulerName") or DEFAULT_SCHEDULER) != DEFAULT_SCHEDULER and not spec.get("nodeName") \
        and not meta.get("deletionTimestamp")


def unschedulable(message: str) -> Any:
    """The status change of a held pod: PodScheduled False with the gate's message (its time kept while it holds)."""

    def change(current: dict[str, Any]) -> dict[str, Any]:
        conditions = [dict(c) for c in current.get("conditions") or []]
        old = next((c for c in conditions if c.get("type") == "PodScheduled"), None)
        if old is not None and old.get("status") == "False" and old.get("message") == message:
            return current
        since = old.get("lastTransitionTime") if old is not None and old.get("status") == "False" else None
        held = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message,
                "lastProbeTime": None, "lastTransitionTime": since or now_rfc3339()}
        return {**current, "phase": current.get("phase") or "Pending",
                "conditions": [c for c in conditions if c.get("type") != "PodScheduled"] + [held]}

    return change


class GangScheduler(threading.Thread):
    """The second scheduler: binds the pods `stand_in_for` says are its own once the gate lets them go."""

    def __init__(self, store: ObjectStore, node_name: str = NODE_NAME):
        super().__init__(name="gang-scheduler", daemon=True)
        self.store, self.node_name, self.gate = store, node_name, GangGate(store)
        self._pending: dict[tuple[str, str], str] = {}  # (namespace, name) -> uid
        self._said: dict[tuple[str, str], str] = {}  # the message last written on a held pod
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._halt = threading.Event()

    def start(self) -> None:
        self.store.watch(self._on_event)
        for pod in self.store.list("v1", "Pod"):
            self._on_event("ADDED", pod)
        super().start()

    def _on_event(self, event: str, obj: KubeObject) -> None:
        if obj.get("kind") != "Pod" or obj.get("apiVersion") != "v1":
            return
        key = (obj["metadata"]["namespace"], obj["metadata"]["name"])
        with self._lock:
            if event == DELETED or not stand_in_for(obj):
                self._pending.pop(key, None)
                self._said.pop(key, None)
                return
            self._pending[key] = obj["metadata"]["uid"]
        self._wake.set()

    def run(self) -> None:
        while not self._halt.is_set():
            with self._lock:
                pending = list(self._pending.items())
            for key, uid in pending:
                try:
                    self._place(key, uid)
                except StoreError:
                    pass  # gone or changed meanwhile: its next event says what to do
                except Exception:  # a bug must not stop the scheduler
                    traceback.print_exc()
            self._wake.wait(POLL_SECONDS)
            self._wake.clear()

    def _place(self, key: tuple[str, str], uid: str) -> None:
        pod = self.store.get("v1", "Pod", *key)
        if pod is None or pod["metadata"]["uid"] != uid or not stand_in_for(pod):
            with self._lock:
                self._pending.pop(key, None)
            return
        reason = self.gate(pod)
        if reason is None:
            self.store.bind(key[0], key[1], self.node_name)
            with self._lock:
                self._pending.pop(key, None)
                self._said.pop(key, None)
        elif self._said.get(key) != reason:
            self.store.update_status("v1", "Pod", *key, unschedulable(reason), current=pod, uid=uid)
            self._said[key] = reason

    def stop(self) -> None:
        self._halt.set()
        self._wake.set()
        if self.is_alive():
            self.join(timeout=5)
