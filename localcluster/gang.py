"""The local cluster's gang scheduler: holds the pods of a PodGroup back until the gang is complete.

It stands in for both Volcano and scheduler-plugins' coscheduling, and is consulted by the
kubelet before it binds a pod (the scheduler's job in a cluster). A pod names its group the way
each scheduler reads it (Volcano: an annotation; scheduler-plugins: a label); it may start once its
PodGroup exists and at least `minMember` pods of the group exist, so every pod of the gang starts
at the same time. The marker names are the schedulers' API, written here independently of the
hooks so the local cluster checks what the hooks emit instead of sharing their constants.
"""

from __future__ import annotations

from .store import ObjectStore
from .types import KubeObject

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
