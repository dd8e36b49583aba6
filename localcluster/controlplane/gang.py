"""The local cluster's gang scheduler: binds the pods of a PodGroup only together, once the gang is complete and fits.

It stands in for both Volcano and scheduler-plugins' coscheduling, which cannot be built here. As
those do, it is a second scheduler: it places the pods whose `schedulerName` is not kube-scheduler's
(`default-scheduler`; the hooks name `volcano` or `scheduler-plugins-scheduler`, or what the
CompositeController's annotation says), and no other, binding each through `pods/binding` to the
process kubelet's Node. A pod names its group the way each scheduler reads it (Volcano: an
annotation; scheduler-plugins: a label). A gang is placed once its PodGroup exists, at least
`minMember` of its pods exist, and enough of them fit the Node together (`decide`: kube-scheduler's
resource fit, fit.py, against the Node's allocatable less what the pods bound there request), so
every pod of the gang starts at the same time and none starts alone. Until then each stays Pending
with PodScheduled False, reason Unschedulable and the gate's message (for a gang that does not fit:
Volcano's `0/1 nodes are unavailable: 1 Insufficient cpu.` and the numbers behind it), as the
scheduler writes it. A pod of another scheduler outside any gang is bound once it fits. Nothing else
of those schedulers is emulated: not node affinity or taints, queues, preemption, or the PodGroup's
status. kube-scheduler places its own pods on the same Node meanwhile, as two schedulers of one
cluster do: a pod it binds between the gang's decision and its bindings is not seen by that decision.
The marker names are the schedulers' API, written here independently of the hooks so the local
cluster checks what the hooks emit instead of sharing their constants.
"""

from __future__ import annotations

import threading
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from localcluster.controlplane import fit
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


@dataclass(frozen=True)
class Placement:
    """What the stand-in does with a gang: the pods it binds now (together), and why each other one waits."""

    bind: tuple[str, ...] = ()
    held: Mapping[str, str] = field(default_factory=dict)


def _name(pod: KubeObject) -> str:
    return str(pod["metadata"]["name"])


def decide(members: Sequence[KubeObject], *, group: str | None, min_member: int | None,
           node: KubeObject | None, pods: Sequence[KubeObject]) -> Placement:
    """Which of a gang's pods to bind now, and why the others wait (pure: observations in, decision out).

    `members` are the group's pods that exist and are not being deleted (a pod outside any gang: it
    alone, `group` None); `min_member` the PodGroup's minMember (None while there is no PodGroup);
    `node` the Node (None until it is registered); `pods` every pod, to see what occupies the Node.
    A gang waits for its PodGroup, then for minMember pods to exist, then until enough of it fits:
    its unbound pods are fitted in name order against what the Node has free, and those that fit are
    bound once, with the members bound and not failed, they make minMember (a pod outside any gang:
    one). Until then none is bound, and each says why in the scheduler's words (Volcano's, whose
    reasons are kube-scheduler's: `Insufficient cpu`, `Too many pods`)."""
    waiting = sorted((p for p in members if stand_in_for(p)), key=_name)
    prefix = f"pod group {group}: " if group is not None else ""

    def hold(why: str) -> Placement:
        return Placement(held={_name(p): prefix + why for p in waiting})

    if group is not None and min_member is None:
        return hold("waiting for the PodGroup to be created")
    if group is not None and min_member is not None and len(members) < min_member:
        return hold(f"{len(members)} of its minMember {min_member} pods exist; the gang starts when {min_member} do")
    if node is None:
        return hold("0/0 nodes are available: no Node is registered yet.")
    needed = 1 if min_member is None else min_member
    needed -= sum(1 for p in members if (p.get("spec") or {}).get("nodeName")
                  and (p.get("status") or {}).get("phase") != "Failed")
    free = fit.free_on(node, pods)
    taken: list[KubeObject] = []
    left: list[KubeObject] = []
    for pod in waiting:
        requests = fit.pod_requests(pod)
        if fit.short(requests, free):
            left.append(pod)
        else:
            taken.append(pod)
            free = fit.minus(free, requests)
    if len(taken) >= needed or group is None:  # a lone pod is told the scheduler's words alone
        return Placement(bind=tuple(_name(p) for p in taken),
                         held={_name(p): prefix + fit.unavailable(fit.short(fit.pod_requests(p), free)) for p in left})
    return hold(_gang_does_not_fit(node, pods, waiting, needed))


def _gang_does_not_fit(node: KubeObject, pods: Sequence[KubeObject], waiting: Sequence[KubeObject], needed: int) -> str:
    """Why a gang's waiting pods, together, do not fit: the scheduler's reasons, then the numbers behind them."""
    free = fit.free_on(node, pods)
    total: fit.Resources = {}
    for pod in waiting:
        for resource, value in fit.pod_requests(pod).items():
            total[resource] = total.get(resource, Decimal(0)) + value
    reasons = fit.short(total, free, len(waiting))
    if not reasons:  # they fit: the rest of the gang is pods another scheduler places
        return f"{len(waiting)} of its pods fit, and the gang starts when {needed} can be bound together"
    numbers = [(r, total[r], free.get(r, Decimal(0))) for r in sorted(total)
               if f"Insufficient {r}" in reasons]
    if "Too many pods" in reasons:
        numbers.append((fit.PODS, Decimal(len(waiting)), free.get(fit.PODS, Decimal(0))))
    asked = " and ".join(f"{r} {fit.show(r, want)}" for r, want, _ in numbers)
    has = " and ".join(f"{r} {fit.show(r, have)}" for r, _, have in numbers)
    pods_ask = "pod asks" if len(waiting) == 1 else "pods ask"
    return (f"the gang does not fit: {fit.unavailable(reasons)} Its {len(waiting)} unbound {pods_ask} for {asked} "
            f"together, node {node['metadata']['name']} has {has} free; none is bound until {needed} of them fit")


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


def api_node(api: Any, name: str = NODE_NAME) -> KubeObject | None:
    """The Node from the API server (`api` an ApiStore), or None while it is not registered."""
    try:
        node: KubeObject = api.request("GET", f"/api/v1/nodes/{name}")
    except StoreError as err:
        if err.code == 404:
            return None
        raise
    return node


class GangScheduler(threading.Thread):
    """The second scheduler: places the pods `stand_in_for` says are its own, a gang at a time, as `decide` says.

    `read_node` reads the Node it binds to (None while it is not there; `api_node` on the API server,
    whose store does not watch Nodes)."""

    def __init__(self, store: ObjectStore, *, read_node: Callable[[], KubeObject | None], node_name: str = NODE_NAME):
        super().__init__(name="gang-scheduler", daemon=True)
        self.store, self.node_name, self.read_node = store, node_name, read_node
        self._pending: dict[tuple[str, str], str] = {}  # (namespace, name) -> uid
        self._said: dict[tuple[str, str], str] = {}  # the message last written on a held pod
        # Pods bound here whose binding the store's cache may not show yet: counted on the Node meanwhile,
        # so the next gang is not fitted into room the last one took.
        self._assumed: dict[tuple[str, str], str] = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._halt = threading.Event()

    def start(self) -> None:
        self.observe()
        super().start()

    def observe(self) -> None:
        """Follow the store's pods from now on, starting with every pod it holds."""
        self.store.watch(self._on_event)
        for pod in self.store.list("v1", "Pod"):
            self._on_event("ADDED", pod)

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
            self.schedule_once()
            self._wake.wait(POLL_SECONDS)
            self._wake.clear()

    def schedule_once(self) -> None:
        """One round: every pending gang (or lone pod) is placed or held, against one reading of the Node."""
        with self._lock:
            pending = list(self._pending.items())
        if not pending:
            return
        try:
            # The Node's allocatable does not change within a round; what the round binds is counted by `_pods`.
            node = self.read_node()
        except StoreError:
            return  # the API server did not answer: the next round reads it again
        except Exception:  # a bug must not stop the scheduler
            traceback.print_exc()
            return
        placed: set[tuple[str, Any]] = set()  # the gangs (or lone pods) placed this round
        for key, uid in pending:
            try:
                self._place(key, uid, placed, node)
            except StoreError:
                pass  # gone or changed meanwhile: its next event says what to do
            except Exception:  # a bug must not stop the scheduler
                traceback.print_exc()

    def _place(self, key: tuple[str, str], uid: str, placed: set[tuple[str, Any]], node: KubeObject | None) -> None:
        pod = self.store.get("v1", "Pod", *key)
        if pod is None or pod["metadata"]["uid"] != uid or not stand_in_for(pod):
            with self._lock:
                self._pending.pop(key, None)
            return
        group = group_of(pod)
        if (key[0], group or key[1]) in placed:
            return
        placed.add((key[0], group or key[1]))
        namespace, min_member, members = key[0], None, [pod]
        if group is not None:
            podgroup = self.store.get(group[0], "PodGroup", namespace, group[1])
            min_member = int(podgroup.get("spec", {}).get("minMember") or 0) if podgroup is not None else None
            members = [p for p in self.store.list_shared("v1", "Pod", namespace)
                       if group_of(p) == group and not p["metadata"].get("deletionTimestamp")]
        placement = decide(members, group=group[1] if group else None, min_member=min_member,
                           node=node, pods=self._pods())
        by_name = {p["metadata"]["name"]: p for p in members}
        for name in placement.bind:
            self._bind(namespace, by_name[name])
        for name, why in placement.held.items():
            held = (namespace, name)
            if self._said.get(held) != why:
                self.store.update_status("v1", "Pod", namespace, name, unschedulable(why),
                                         uid=by_name[name]["metadata"]["uid"])
                self._said[held] = why

    def _bind(self, namespace: str, pod: KubeObject) -> None:
        key = (namespace, pod["metadata"]["name"])
        try:
            self.store.bind(namespace, key[1], self.node_name)
        except StoreError:
            return  # gone, or bound meanwhile: its peers are bound all the same
        with self._lock:
            self._pending.pop(key, None)
            self._said.pop(key, None)
            self._assumed[key] = pod["metadata"]["uid"]

    def _pods(self) -> list[KubeObject]:
        """Every pod as the store has it, with the bindings it may not show yet."""
        pods = self.store.list_shared("v1", "Pod")
        with self._lock:
            if not self._assumed:
                return pods
            cached = {(p["metadata"]["namespace"], p["metadata"]["name"]): p for p in pods}
            # An assumed binding is forgotten once the cache shows it, or the pod is gone.
            self._assumed = {key: uid for key, uid in self._assumed.items() if key in cached
                             and cached[key]["metadata"]["uid"] == uid and not cached[key]["spec"].get("nodeName")}
            assumed = set(self._assumed)
        return [{**pod, "spec": {**pod["spec"], "nodeName": self.node_name}} if key in assumed else pod
                for key, pod in cached.items()]

    def stop(self) -> None:
        self._halt.set()
        self._wake.set()
        if self.is_alive():
            self.join(timeout=5)
