"""A synchronous, in-memory Metacontroller for ChainerJob scenarios, and the Job and StatefulSet controllers' part.

It applies an answer as Metacontroller does with the chainerjob-controller's child rules
(omitted children deleted; new ones created with a uid and the last-applied annotation; InPlace
kinds updated, OnDelete kinds left alone; status replaced wholesale plus observedGeneration) and
lets a test report what the StatefulSet and Job controllers would: ready workers, the master's status.
"""
from __future__ import annotations

import copy
import itertools
import json
from datetime import datetime, timedelta
from pathlib import Path

import yaml
from mcsim import T0

from hooks.chainerjob.sync import CHILD_KEYS, JOB_KEY, SERVICE_ACCOUNT_KEY, STATEFULSET_KEY, sync_chainerjob
from hooks.shared.conditions import rfc3339
from hooks.shared.k8s import LAST_APPLIED

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "chainerjob"
ON_DELETE = {SERVICE_ACCOUNT_KEY, JOB_KEY}


def chainerjob(name: str = "chj", *, workers: dict | None = None, **spec) -> dict:
    """A ChainerJob with one-container templates; workers maps worker set -> replicas or full spec."""
    def template(command: list[str]) -> dict:
        return {"spec": {"containers": [{"name": "chainer", "image": "chainer/chainermn:7.8.1", "command": command}]}}

    body: dict = {"master": {"template": template(["mpiexec", "-n", "2", "python3", "train.py"])}}
    if workers:
        body["workerSets"] = {
            ws: value if isinstance(value, dict) else {"replicas": value, "template": template(["sleep", "infinity"])}
            for ws, value in workers.items()}
    body.update(spec)
    return {"apiVersion": "kubeflow.org/v1alpha1", "kind": "ChainerJob",
            "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}", "generation": 1},
            "spec": body}


def example(file_name: str) -> dict:
    """A seed manifest from examples/chainerjob, as the API server would store it."""
    parent = yaml.safe_load((EXAMPLES / file_name).read_text())
    parent["metadata"].update(namespace="default", uid="uid-example", generation=1)
    return parent


def key_of(child: dict) -> str:
    return f"{child['kind']}.{child['apiVersion']}"


class ChainerSim:
    """One ChainerJob and its children, synced step by step."""

    def __init__(self, parent: dict, now: datetime = T0, **settings: str):
        self.parent = copy.deepcopy(parent)
        self.children: dict[str, dict[str, dict]] = {key: {} for key in CHILD_KEYS}
        self.now = now
        self.settings = settings
        self.last: dict = {}
        self._uids = itertools.count(1)
        self.created: list[str] = []
        self.deleted: list[str] = []

    def request(self) -> dict:
        """The sync request Metacontroller would send now."""
        return {"controller": {}, "parent": copy.deepcopy(self.parent), "children": copy.deepcopy(self.children),
                "related": {}, "finalizing": False}

    def sync(self) -> dict:
        """Call the hook and apply its answer."""
        self.last = sync_chainerjob(self.request(), now=self.now, **self.settings)
        self.apply(self.last)
        return self.last

    def apply(self, answer: dict) -> None:
        """Apply an answer as Metacontroller does with the chainerjob-controller's update strategies."""
        desired = {(key_of(c), c["metadata"]["name"]): c for c in answer["children"]}
        for key, store in self.children.items():
            for name in list(store):
                if (key, name) not in desired:
                    del store[name]
                    self.deleted.append(f"{key}/{name}")
        for (key, name), child in desired.items():
            store = self.children[key]
            if name in store:
                if key not in ON_DELETE:
                    status = store[name].get("status")
                    meta = store[name]["metadata"]
                    store[name] = {**copy.deepcopy(child), "metadata": meta}
                    meta["annotations"][LAST_APPLIED] = json.dumps(child)
                    if status is not None:
                        store[name]["status"] = status
                continue
            obj = copy.deepcopy(child)
            obj["metadata"]["uid"] = f"u{next(self._uids)}"
            obj["metadata"].setdefault("annotations", {})[LAST_APPLIED] = json.dumps(child)
            obj["metadata"]["labels"]["controller-uid"] = self.parent["metadata"]["uid"]
            if key in (STATEFULSET_KEY, JOB_KEY):
                obj["status"] = {}
            store[name] = obj
            self.created.append(f"{key}/{name}")
        status = copy.deepcopy(answer["status"])
        status["observedGeneration"] = self.parent["metadata"]["generation"]
        self.parent["status"] = status

    # --- the StatefulSet and Job controllers, and users ----------------------------------------

    def ready(self, statefulset: str, count: int | None = None) -> None:
        """A StatefulSet reports `count` ready pods (all it asks for when not given)."""
        obj = self.children[STATEFULSET_KEY][statefulset]
        replicas = obj["spec"]["replicas"]
        obj["status"] = {"replicas": replicas, "readyReplicas": replicas if count is None else count}

    def all_ready(self) -> None:
        for name in self.children[STATEFULSET_KEY]:
            self.ready(name)

    def master(self, name: str, *, active: int = 0, succeeded: int = 0, failed: int = 0,
               finished: tuple[str, str, str] | None = None) -> None:
        """The Job controller's status of the master Job; finished = (Complete|Failed, reason, message)."""
        job = self.children[JOB_KEY][name]
        status: dict = {"startTime": job.get("status", {}).get("startTime") or rfc3339(self.now)}
        if active:
            status["active"] = active
        if succeeded:
            status["succeeded"] = succeeded
        if failed:
            status["failed"] = failed
        if finished is not None:
            ctype, reason, message = finished
            at = rfc3339(self.now)
            # What a batch/v1 Job reports: the interim condition, then the final one.
            interim = "SuccessCriteriaMet" if ctype == "Complete" else "FailureTarget"
            status["conditions"] = [
                {"type": interim, "status": "True", "reason": reason, "message": message,
                 "lastProbeTime": at, "lastTransitionTime": at},
                {"type": ctype, "status": "True", "reason": reason, "message": message,
                 "lastProbeTime": at, "lastTransitionTime": at}]
            if ctype == "Complete":
                status["completionTime"] = at
            status["ready"] = 0
            status["terminating"] = 0
        job["status"] = status

    def delete(self, key: str, name: str) -> None:
        """Someone deletes a child (kubectl delete, garbage collection)."""
        del self.children[key][name]

    def edit(self, spec_update: dict) -> None:
        """A user edit of the spec: generation moves on."""
        self.parent["spec"].update(spec_update)
        self.parent["metadata"]["generation"] += 1

    def tick(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)

    # --- reading ---------------------------------------------------------------------------------

    @property
    def status(self) -> dict:
        return self.parent.get("status", {})

    def state(self) -> str:
        """What `kubectl get chj` shows in the State column."""
        conds = self.status.get("conditions") or []
        return conds[-1]["type"] if conds else ""

    def names(self, key: str) -> list[str]:
        return sorted(self.children[key])
