"""The StatefulSet controller stand-in (apps/v1), for ChainerJob's workers: what kube-controller-manager does.

Emulated: ordinal pods `<sts>-<i>` with `hostname` = the pod name and `subdomain` = serviceName,
the labels Kubernetes adds (`statefulset.kubernetes.io/pod-name`, `apps.kubernetes.io/pod-index`,
`controller-revision-hash`), `Parallel` (every missing ordinal at once) and `OrderedReady` (one at
a time, each waiting for the previous to be Ready) pod management, a pod that ended (Failed or
Succeeded) deleted and recreated under the same name, scaling up and down (to 0 included, highest
ordinals first), and status replicas/readyReplicas/currentReplicas/updatedReplicas/availableReplicas
and observedGeneration, and updates of the pod template as `updateStrategy` says: `RollingUpdate`
(the API default) deletes the highest-ordinal pod of an older template, waits until its
replacement is Running and Ready, then takes the next one down (down to `partition`); `OnDelete`
leaves running pods alone until someone deletes them. Not emulated: maxUnavailable,
volumeClaimTemplates, minReadySeconds and ControllerRevision objects.
"""

from __future__ import annotations

import copy
import hashlib
import json
from typing import cast

from .reconciler import Key, Reconciler
from .store import StoreError, controller_reference
from .types import KubeObject


def revision_hash(sts: KubeObject) -> str:
    """`<sts>-<10 chars>` from the pod template, the shape of the controller-revision-hash label."""
    digest = hashlib.sha256(json.dumps(sts.get("spec", {}).get("template", {}), sort_keys=True).encode()).hexdigest()
    return f"{sts['metadata']['name']}-{digest[:10]}"


def ordinal(sts_name: str, pod_name: str) -> int | None:
    """The ordinal of `<sts>-<i>`, or None when the name is not one of this StatefulSet's."""
    prefix = f"{sts_name}-"
    tail = pod_name[len(prefix):] if pod_name.startswith(prefix) else ""
    return int(tail) if tail.isdigit() else None


class StatefulSetController(Reconciler):
    """Keeps `replicas` ordinal pods of each StatefulSet and reports its status."""

    api_version, kind = "apps/v1", "StatefulSet"

    def reconcile(self, key: Key) -> float | None:
        sts = self.store.get(self.api_version, self.kind, *key)
        if sts is None or sts["metadata"].get("deletionTimestamp"):
            return None
        name, spec = sts["metadata"]["name"], sts.get("spec", {})
        replicas = spec.get("replicas", 1)
        parallel = spec.get("podManagementPolicy", "OrderedReady") == "Parallel"
        pods = {ordinal(name, p["metadata"]["name"]): p for p in self.owned_pods(sts)}
        pods.pop(None, None)
        for i, pod in sorted(pods.items(), key=lambda item: -(item[0] or 0)):
            ended = pod.get("status", {}).get("phase") in ("Failed", "Succeeded")
            if not self.terminating(pod) and ((i is not None and i >= replicas) or ended):
                # Scale-down and replacement of an ended pod: delete; a later pass recreates it if wanted.
                self._delete(pod)
                if not parallel:
                    break
        for i in range(replicas):
            if i not in pods:
                self._create_pod(sts, i)
                if not parallel:
                    break
            elif not parallel and not self.ready(pods[i]):
                break
        revision = revision_hash(sts)
        self._roll(sts, revision, replicas, {i: p for i, p in pods.items() if i is not None})
        current = self.owned_pods(sts)
        ready = sum(1 for p in current if self.ready(p))
        status = {
            "observedGeneration": sts["metadata"]["generation"],
            "replicas": sum(1 for p in current if not self.terminating(p)),
            "readyReplicas": ready,
            "currentReplicas": sum(1 for p in current if p["metadata"]["labels"].get("controller-revision-hash") == revision),
            "updatedReplicas": sum(1 for p in current if p["metadata"]["labels"].get("controller-revision-hash") == revision),
            "availableReplicas": ready,
            "currentRevision": revision,
            "updateRevision": revision,
            "collisionCount": 0,
        }
        for field in ("readyReplicas", "currentReplicas", "updatedReplicas"):
            if not status[field]:
                del status[field]  # omitempty in the Go type (replicas and availableReplicas are not)
        try:
            self.store.update_status(self.api_version, self.kind, *key, status)
        except StoreError:
            pass
        return None

    def _roll(self, sts: KubeObject, revision: str, replicas: int, pods: dict[int, KubeObject]) -> None:
        """RollingUpdate (stateful_set_control.go, the end of updateStatefulSet): one outdated pod at a
        time, highest ordinal first, each replacement Running and Ready before the next."""
        strategy = sts.get("spec", {}).get("updateStrategy") or {}
        if strategy.get("type", "RollingUpdate") != "RollingUpdate":
            return  # OnDelete: a pod takes the new template only once someone deletes it
        partition = (strategy.get("rollingUpdate") or {}).get("partition") or 0
        for i in range(replicas - 1, partition - 1, -1):
            pod = pods.get(i)
            if pod is None:
                return  # its replacement is being created: not healthy yet
            if pod["metadata"].get("labels", {}).get("controller-revision-hash") != revision and not self.terminating(pod):
                self._delete(pod)
                return
            if not (pod.get("status", {}).get("phase") == "Running" and self.ready(pod)):
                return  # wait for the unhealthy pod before touching the next one

    def _delete(self, pod: KubeObject) -> None:
        try:
            self.store.delete("v1", "Pod", pod["metadata"]["namespace"], pod["metadata"]["name"])
        except StoreError:
            pass

    def _create_pod(self, sts: KubeObject, index: int) -> None:
        template = copy.deepcopy(sts.get("spec", {}).get("template", {}))
        meta = template.get("metadata", {})
        pod_name = f"{sts['metadata']['name']}-{index}"
        labels = {**meta.get("labels", {}), "controller-revision-hash": revision_hash(sts),
                  "statefulset.kubernetes.io/pod-name": pod_name, "apps.kubernetes.io/pod-index": str(index)}
        spec = template.get("spec", {})
        spec["hostname"] = pod_name
        if sts.get("spec", {}).get("serviceName"):
            spec["subdomain"] = sts["spec"]["serviceName"]
        pod = {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": pod_name, "namespace": sts["metadata"]["namespace"], "labels": labels,
                         "annotations": dict(meta.get("annotations", {})), "ownerReferences": [controller_reference(sts)]},
            "spec": spec,
        }
        try:
            self.store.create(cast(KubeObject, pod))
        except StoreError as err:
            if err.code != 409:  # 409: the old pod of that name is still terminating; its removal wakes us
                raise
