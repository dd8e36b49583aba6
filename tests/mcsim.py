"""A synchronous, in-memory Metacontroller for scenario tests of the pure sync.

It applies an answer the way Metacontroller does (omitted children deleted, new children created
with a fresh uid and the last-applied annotation, status replaced wholesale plus
observedGeneration) and lets a test play kubelet by setting pod phases. Time is explicit.
"""
from __future__ import annotations

import copy
import itertools
import json
from datetime import UTC, datetime, timedelta

from hooks.mxjob.sync import sync_mxjob
from hooks.shared.k8s import LAST_APPLIED

T0 = datetime(2026, 11, 21, 10, 0, 0, tzinfo=UTC)


def mxjob(name: str = "mx", *, replicas: dict | None = None, **spec) -> dict:
    """An MXJob with one-container templates; replicas maps type -> count or full replica spec."""
    replicas = replicas or {"Scheduler": 1, "Server": 1, "Worker": 2}
    specs = {}
    for rtype, value in replicas.items():
        entry = value if isinstance(value, dict) else {"replicas": value}
        entry.setdefault("template", {"spec": {"containers": [
            {"name": "mxnet", "image": "mxjob/mxnet:1.9.1", "command": ["python", "train.py"]}]}})
        specs[rtype] = entry
    return {"apiVersion": "kubeflow.org/v1", "kind": "MXJob",
            "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}", "generation": 1},
            "spec": {"mxReplicaSpecs": specs, **spec}}


def gang_controller(api_version: str, scheduler_name: str | None = None) -> dict:
    """A CompositeController with a podgroups child rule, as the kustomize components add it (the
    hook reads only that rule and the annotation, so the other rules are abridged)."""
    meta: dict = {"name": "mxjob-controller"}
    if scheduler_name is not None:
        meta["annotations"] = {"scheduling.kubeflow.org/scheduler-name": scheduler_name}
    return {"apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": "CompositeController",
            "metadata": meta,
            "spec": {"parentResource": {"apiVersion": "kubeflow.org/v1", "resource": "mxjobs"},
                     "generateSelector": True,
                     "childResources": [
                         {"apiVersion": "v1", "resource": "pods",
                          "updateStrategy": {"method": "OnDelete"}},
                         {"apiVersion": "v1", "resource": "services",
                          "updateStrategy": {"method": "InPlace"}},
                         {"apiVersion": api_version, "resource": "podgroups",
                          "updateStrategy": {"method": "InPlace"}}]}}


class Sim:
    """One MXJob and its children, synced step by step."""

    def __init__(self, parent: dict, now: datetime = T0, controller: dict | None = None):
        self.parent = copy.deepcopy(parent)
        self.controller = copy.deepcopy(controller or {})
        self.pods: dict[str, dict] = {}
        self.services: dict[str, dict] = {}
        self.podgroups: dict[str, dict] = {}
        self.config_maps: dict[str, dict] = {}
        self.now = now
        self.last: dict = {}
        self._uids = itertools.count(1)
        self.created: list[str] = []
        self.deleted: list[str] = []

    # --- Metacontroller --------------------------------------------------------------------

    def request(self) -> dict:
        """The sync request Metacontroller would send now."""
        children = {"Pod.v1": copy.deepcopy(self.pods), "Service.v1": copy.deepcopy(self.services),
                    "ConfigMap.v1": copy.deepcopy(self.config_maps)}
        if self.podgroup_key:
            children[self.podgroup_key] = copy.deepcopy(self.podgroups)
        return {"controller": copy.deepcopy(self.controller), "parent": copy.deepcopy(self.parent),
                "children": children, "related": {}, "finalizing": False}

    @property
    def podgroup_key(self) -> str | None:
        """The children key of the controller's PodGroup rule, if it declares one."""
        for rule in self.controller.get("spec", {}).get("childResources", []):
            if rule.get("resource") == "podgroups":
                return f"PodGroup.{rule['apiVersion']}"
        return None

    def sync(self) -> dict:
        """Call the hook and apply its answer."""
        self.last = sync_mxjob(self.request(), now=self.now)
        self.apply(self.last)
        return self.last

    def apply(self, answer: dict) -> None:
        """Apply an answer as Metacontroller does (Pods and ConfigMaps OnDelete, Services and PodGroups InPlace)."""
        desired = {(c["kind"], c["metadata"]["name"]): c for c in answer["children"]}
        stores = {"Pod": self.pods, "Service": self.services, "ConfigMap": self.config_maps, "PodGroup": self.podgroups}
        for kind, store in stores.items():
            for name in list(store):
                if (kind, name) not in desired:
                    del store[name]
                    self.deleted.append(f"{kind}/{name}")
        for (kind, name), child in desired.items():
            store = stores[kind]
            if name in store:
                if kind in ("Service", "PodGroup"):  # InPlace
                    store[name]["spec"] = copy.deepcopy(child["spec"])
                continue
            obj = copy.deepcopy(child)
            obj["metadata"]["uid"] = f"u{next(self._uids)}"
            obj["metadata"].setdefault("annotations", {})[LAST_APPLIED] = json.dumps(child)
            obj["metadata"]["ownerReferences"] = [{"apiVersion": "kubeflow.org/v1", "kind": "MXJob",
                                                   "name": self.parent["metadata"]["name"],
                                                   "uid": self.parent["metadata"]["uid"],
                                                   "controller": True}]
            if kind == "Pod":
                obj["status"] = {"phase": "Pending"}
            store[name] = obj
            self.created.append(f"{kind}/{name}")
        status = copy.deepcopy(answer["status"])
        status["observedGeneration"] = self.parent["metadata"]["generation"]
        self.parent["status"] = status

    # --- kubelet and users -----------------------------------------------------------------

    def run(self, *names: str) -> None:
        """Pods start running (all pods when no name is given)."""
        for name in names or list(self.pods):
            self.set_phase(name, "Running")

    def set_phase(self, name: str, phase: str, *, exit_code: int | None = None,
                  restarts: int = 0, last_exit_code: int | None = None) -> None:
        """Report a pod phase with the mxnet container's state (and last state), as the kubelet does."""
        state = {"running": {}} if phase == "Running" else {}
        if exit_code is not None:
            state = {"terminated": {"exitCode": exit_code}}
        container = {"name": "mxnet", "restartCount": restarts, "state": state}
        if last_exit_code is not None:
            container["lastState"] = {"terminated": {"exitCode": last_exit_code}}
        self.pods[name]["status"] = {"phase": phase, "containerStatuses": [container]}

    def gc(self, name: str) -> None:
        """The pod disappears without the operator asking (garbage collection, kubectl delete)."""
        del self.pods[name]

    def edit(self, spec_update: dict) -> None:
        """A user edit of the spec: generation moves on."""
        self.parent["spec"].update(spec_update)
        self.parent["metadata"]["generation"] += 1

    def tick(self, seconds: float) -> None:
        """Time passes."""
        self.now += timedelta(seconds=seconds)

    # --- reading ---------------------------------------------------------------------------

    @property
    def status(self) -> dict:
        """The parent's status as last written."""
        return self.parent.get("status", {})

    def state(self) -> str:
        """What `kubectl get mxj` shows in the State column."""
        conds = self.status.get("conditions") or []
        return conds[-1]["type"] if conds else ""

    def condition(self, ctype: str) -> dict | None:
        """One condition by type."""
        return next((c for c in self.status.get("conditions", []) if c["type"] == ctype), None)
