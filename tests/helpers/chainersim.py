"""ChainerJob scenarios stepped over the local cluster's Metacontroller emulation (see tests/helpers/mcsim.py).

The emulation applies the answers with the shipped chainerjob-controller's child rules; a test
reports what the StatefulSet and Job controllers would (ready workers, the master Job's status).
"""
from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

from helpers import yamlio
from helpers.mcsim import MANIFESTS, T0, Stepped, with_podgroups
from hooks.chainerjob.related import customize_chainerjob
from hooks.chainerjob.sync import CHILD_KEYS, JOB_KEY, SERVICE_ACCOUNT_KEY, STATEFULSET_KEY, sync_chainerjob
from hooks.shared.conditions import rfc3339
from localcluster.metacontroller import Stale

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "chainerjob"
CONTROLLER = MANIFESTS / "chainerjob-controller.yaml"
ON_DELETE = {SERVICE_ACCOUNT_KEY, JOB_KEY}


def gang_controller(api_version: str) -> dict:
    """The shipped chainerjob-controller with the podgroups rule a gang component adds."""
    return with_podgroups(CONTROLLER, api_version)


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
    parent = yamlio.load((EXAMPLES / file_name).read_text())
    parent["metadata"].update(namespace="default", uid="uid-example", generation=1)
    return parent


def key_of(child: dict) -> str:
    return f"{child['kind']}.{child['apiVersion']}"


def _split(key: str) -> tuple[str, str]:
    kind, _, api_version = key.partition(".")
    return api_version, kind


class ChainerSim(Stepped):
    """One ChainerJob and its children, synced step by step."""

    def __init__(self, parent: dict, now: datetime = T0, controller: dict | None = None, *,
                 stale: Stale | None = None, **settings: str):
        super().__init__(parent, sync_chainerjob, CONTROLLER, now=now, controller=controller, stale=stale, settings=settings,
                         # The customize route takes the server's Kueue setting, as the sync route does.
                         customize=lambda request: customize_chainerjob(
                             request, kueue_pod_groups=settings.get("kueue_pod_groups", "false")))

    def label(self, obj: Any) -> str:
        return key_of(obj)

    @property
    def children(self) -> dict[str, dict[str, dict]]:
        """Stored children by request key (`Job.batch/v1`), then name."""
        keys = list(CHILD_KEYS) + [self.config.child_key(rule) for rule in self.config.children if rule["kind"] == "PodGroup"]
        return {key: self.objects(*_split(key)) for key in keys}

    # --- the StatefulSet and Job controllers, and users ----------------------------------------

    def ready(self, statefulset: str, count: int | None = None) -> None:
        """A StatefulSet reports `count` ready pods (all it asks for when not given)."""
        replicas = self.children[STATEFULSET_KEY][statefulset]["spec"]["replicas"]
        self.write_status(*_split(STATEFULSET_KEY), statefulset,
                          {"replicas": replicas, "readyReplicas": replicas if count is None else count})

    def all_ready(self) -> None:
        for name in self.children[STATEFULSET_KEY]:
            self.ready(name)

    def master(self, name: str, *, active: int = 0, succeeded: int = 0, failed: int = 0,
               finished: tuple[str, str, str] | None = None, decided_only: bool = False) -> None:
        """The Job controller's status of the master Job; finished = (Complete|Failed, reason, message).

        A batch/v1 Job posts the interim condition (SuccessCriteriaMet or FailureTarget) first and the
        final one once its pods are gone; `decided_only` reports the first of those two statuses.
        """
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
            interim = "SuccessCriteriaMet" if ctype == "Complete" else "FailureTarget"
            status["conditions"] = [
                {"type": interim, "status": "True", "reason": reason, "message": message,
                 "lastProbeTime": at, "lastTransitionTime": at}]
            if not decided_only:
                status["conditions"].append({"type": ctype, "status": "True", "reason": reason, "message": message,
                                             "lastProbeTime": at, "lastTransitionTime": at})
                if ctype == "Complete":
                    status["completionTime"] = at
            status["ready"] = 0
            status["terminating"] = 0
        self.write_status(*_split(JOB_KEY), name, status)

    def master_pod(self, name: str, *, phase: str, exit_code: int | None = None, reason: str | None = None,
                   message: str | None = None, pod_reason: str | None = None, finished_at: str | None = None,
                   container: str = "chainer") -> None:
        """The Job controller's pod of the master Job (owned by the Job, not by the ChainerJob: only
        the customize hook relates it), created if new, with the kubelet's status of it."""
        job = self.children[JOB_KEY][f"{self.name}-master"]
        if self.store.get("v1", "Pod", self.namespace, name) is None:
            template = job["spec"]["template"]
            self.store.create({"apiVersion": "v1", "kind": "Pod", "metadata": {
                "name": name, "namespace": self.namespace,
                "labels": {**template["metadata"]["labels"], "batch.kubernetes.io/job-name": job["metadata"]["name"]},
                "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": job["metadata"]["name"],
                                     "uid": job["metadata"]["uid"], "controller": True}]},
                "spec": template["spec"]})
        state: dict = {"running": {}}
        if exit_code is not None:
            terminated = {"exitCode": exit_code, "finishedAt": finished_at or rfc3339(self.now)}
            terminated.update({k: v for k, v in (("reason", reason), ("message", message)) if v is not None})
            state = {"terminated": terminated}
        status: dict = {"phase": phase, "containerStatuses": [{"name": container, "restartCount": 0, "state": state}]}
        if pod_reason is not None:
            status["reason"] = pod_reason
        self.store.update_status("v1", "Pod", self.namespace, name, status)

    def worker_pod(self, name: str, *, phase: str = "Running") -> None:
        """The StatefulSet controller's pod `name` of the worker set in its name, created if new
        (owned by the StatefulSet: only the customize hook relates it), with the kubelet's phase."""
        statefulset = name.rpartition("-")[0]
        owner = self.children[STATEFULSET_KEY][statefulset]
        if self.store.get("v1", "Pod", self.namespace, name) is None:
            template = owner["spec"]["template"]
            self.store.create({"apiVersion": "v1", "kind": "Pod", "metadata": {
                "name": name, "namespace": self.namespace, "labels": dict(template["metadata"]["labels"]),
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": statefulset,
                                     "uid": owner["metadata"]["uid"], "controller": True}]},
                "spec": template["spec"]})
        self.store.update_status("v1", "Pod", self.namespace, name, {
            "phase": phase, "containerStatuses": [{"name": "chainer", "restartCount": 0, "state": {"running": {}}}]})

    def disrupt(self, name: str, reason: str, message: str, *, phase: str = "Running") -> None:
        """What kube-scheduler (or the eviction API) does to a victim: DisruptionTarget on it, then its
        deletion; the kubelet then stops it (`phase` Failed, its container killed by SIGTERM) before it is gone."""
        pod = self.store.get("v1", "Pod", self.namespace, name)
        assert pod is not None, f"no pod {name}"
        state = {"running": {}} if phase == "Running" else {"terminated": {"exitCode": 143, "reason": "Error"}}
        self.store.update_status("v1", "Pod", self.namespace, name, {
            "phase": phase, "conditions": [{"type": "DisruptionTarget", "status": "True", "reason": reason,
                                            "message": message}],
            "containerStatuses": [{"name": "chainer", "restartCount": 0, "state": state}]})
        if not pod["metadata"].get("deletionTimestamp"):
            self.change("v1", "Pod", name, lambda p: p["spec"].update(nodeName="node-1"))
            self.store.delete("v1", "Pod", self.namespace, name)

    def evict(self, name: str, reason: str, message: str, *, phase: str = "Running") -> None:
        """What Kueue v0.17.0 does to each pod of a group it stops (pkg/controller/jobs/pod `Stop`):
        TerminationTarget on its status, then its deletion; the kubelet then stops it (`phase` Failed,
        its container ended by SIGTERM) and Kueue's finalizer lets it go once it is."""
        pod = self.store.get("v1", "Pod", self.namespace, name)
        assert pod is not None, f"no pod {name}"
        state = {"running": {}} if phase == "Running" else {"terminated": {"exitCode": 143, "reason": "Error"}}
        self.store.update_status("v1", "Pod", self.namespace, name, {
            "phase": phase, "conditions": [{"type": "TerminationTarget", "status": "True", "reason": reason,
                                            "message": message}],
            "containerStatuses": [{"name": "chainer", "restartCount": 0, "state": state}]})
        if not pod["metadata"].get("deletionTimestamp"):
            self.change("v1", "Pod", name, lambda p: p["spec"].update(nodeName="node-1"))
            self.store.delete("v1", "Pod", self.namespace, name)

    def delete(self, key: str, name: str) -> None:
        """Someone deletes a child (kubectl delete, garbage collection)."""
        self.remove(*_split(key), name)

    def names(self, key: str) -> list[str]:
        return sorted(self.children[key])
