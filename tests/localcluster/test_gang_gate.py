"""The local cluster's gang stand-in, on the store alone: which pods it places, who waits, with which
message, and when not."""
from __future__ import annotations

import time

import pytest
from helpers.objectstore import ObjectBag

from localcluster.controlplane.gang import GangGate, GangScheduler, stand_in_for, unschedulable

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


def scheduled(store: ObjectBag, name: str) -> tuple[str | None, dict]:
    """(the node a pod is bound to, its PodScheduled condition) as the store has them."""
    current = store.get("v1", "Pod", "default", name)
    condition = next((c for c in current.get("status", {}).get("conditions", []) if c["type"] == "PodScheduled"), {})
    return current["spec"].get("nodeName"), condition


@pytest.mark.parametrize(("scheduler", "mine"), [
    pytest.param(None, False, id="no-scheduler-name-is-kube-schedulers"),
    pytest.param("default-scheduler", False, id="default-scheduler"),
    pytest.param("volcano", True, id="volcano"),
    pytest.param("scheduler-plugins-scheduler", True, id="scheduler-plugins"),
])
def test_the_stand_in_places_only_the_pods_of_other_schedulers(scheduler, mine):
    spec = pod("a", volcano="g")
    if scheduler:
        spec["spec"]["schedulerName"] = scheduler
    assert stand_in_for(spec) is mine
    spec["spec"]["nodeName"] = "localcluster"
    assert stand_in_for(spec) is False  # bound already


def test_the_stand_in_binds_a_gang_only_once_it_is_complete_and_says_why_until_then():
    store = ObjectBag()
    gang = GangScheduler(store)
    gang.start()
    try:
        for name in ("a", "b"):
            manifest = pod(name, volcano="g")
            manifest["spec"]["schedulerName"] = "volcano"
            if name == "a":
                store.create(manifest)
        store.create(podgroup(VOLCANO, "g", 2))
        deadline = time.monotonic() + 5
        while scheduled(store, "a")[1].get("reason") != "Unschedulable" and time.monotonic() < deadline:
            time.sleep(0.05)
        assert scheduled(store, "a") == (None, {**scheduled(store, "a")[1], "status": "False", "reason": "Unschedulable",
                                                 "message": "pod group g: 1 of its minMember 2 pods exist; the gang starts when 2 do"})
        store.create(manifest)
        while scheduled(store, "b")[0] is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert scheduled(store, "a")[0] == scheduled(store, "b")[0] == "localcluster"
    finally:
        gang.stop()


def test_a_held_pods_condition_is_written_once_while_the_reason_holds():
    change = unschedulable("why")
    first = change({"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "True"}]})
    assert first["conditions"] == [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "why",
                                    "lastProbeTime": None, "lastTransitionTime": first["conditions"][0]["lastTransitionTime"]}]
    assert change(first) is first  # nothing to write
    moved = unschedulable("another reason")(first)
    assert moved["conditions"][0]["lastTransitionTime"] == first["conditions"][0]["lastTransitionTime"]  # still False
