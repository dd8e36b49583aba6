"""The local cluster's gang gate, on the store alone: who waits, with which message, and when not."""
from __future__ import annotations

import pytest
from helpers.objectstore import ObjectBag

from localcluster.gang import GangGate

VOLCANO = "scheduling.volcano.sh/v1beta1"
COSCHEDULING = "scheduling.x-k8s.io/v1alpha1"


def pod(name: str, *, volcano: str | None = None, coscheduling: str | None = None) -> dict:
    meta: dict = {"name": name, "namespace": "default"}
    if volcano:
        meta["annotations"] = {"scheduling.k8s.io/group-name": volcano}
    if coscheduling:
        meta["labels"] = {"scheduling.x-k8s.io/pod-group": coscheduling}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "spec": {"containers": [{"name": "c", "image": "i", "command": ["true"]}]}}


def podgroup(api_version: str, name: str, min_member: int) -> dict:
    return {"apiVersion": api_version, "kind": "PodGroup",
            "metadata": {"name": name, "namespace": "default"}, "spec": {"minMember": min_member}}


@pytest.mark.parametrize(("marks", "api_version"), [
    pytest.param({"volcano": "g"}, VOLCANO, id="volcano"),
    pytest.param({"coscheduling": "g"}, COSCHEDULING, id="scheduler-plugins"),
])
def test_gang_waits_for_its_podgroup_then_for_min_member_pods(marks, api_version):
    store = ObjectBag()
    gate = GangGate(store)
    first = store.create(pod("a", **marks))
    assert gate(first) == "pod group g: waiting for the PodGroup to be created"
    store.create(podgroup(api_version, "g", 2))
    assert gate(first) == "pod group g: 1 of its minMember 2 pods exist; the gang starts when 2 do"
    store.create(pod("other", volcano="h"))  # another group's pod does not count
    assert gate(first) is not None
    store.create(pod("b", **marks))
    assert gate(first) is None


def test_pods_outside_a_gang_are_never_held():
    assert GangGate(ObjectBag())(pod("solo")) is None


def test_a_podgroup_of_the_other_api_does_not_open_the_gate():
    store = ObjectBag()
    store.create(podgroup(COSCHEDULING, "g", 1))
    assert GangGate(store)(store.create(pod("a", volcano="g"))) is not None
