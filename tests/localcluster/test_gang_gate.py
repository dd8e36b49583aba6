"""The local cluster's gang stand-in, on the store alone: which pods it places, who waits, with which
message, and when not; the gang's decision (`decide`) and kube-scheduler's resource fit (fit.py) as tables."""
from __future__ import annotations

import time

import pytest
from helpers.objectstore import ObjectBag
from kubernetes.utils import parse_quantity

from localcluster.controlplane import fit
from localcluster.controlplane.gang import GangScheduler, decide, stand_in_for, unschedulable
from localcluster.store import StoreError

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


def members(n: int, cpu: str | None = None, *, bound: int = 0, scheduler: str = "volcano") -> list[dict]:
    """`n` pods of group g asking for `cpu` each, the first `bound` of them bound to the node."""
    pods = []
    for i in range(n):
        manifest = pod(f"g-{i}", volcano="g")
        manifest["spec"]["schedulerName"] = scheduler
        if cpu:
            manifest["spec"]["containers"][0]["resources"] = {"requests": {"cpu": cpu}}
        if i < bound:
            manifest["spec"]["nodeName"] = "localcluster"
            manifest["status"] = {"phase": "Running"}
        pods.append(manifest)
    return pods


def node(cpu: str = "2", memory: str = "4Gi", pods: str = "110", **extra: str) -> dict:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "localcluster"},
            "status": {"allocatable": {"cpu": cpu, "memory": memory, "pods": pods, **extra}}}


def other(cpu: str, phase: str = "Running", node_name: str = "localcluster") -> dict:
    """Another job's pod, bound and asking for `cpu`."""
    return {"metadata": {"name": "x", "namespace": "other"}, "status": {"phase": phase},
            "spec": {"nodeName": node_name, "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]}}


GANG_DOES_NOT_FIT = ("pod group g: the gang does not fit: 0/1 nodes are unavailable: 1 Insufficient cpu. Its 2 unbound "
                     "pods ask for cpu 3 together, node localcluster has cpu 2 free; none is bound until 2 of them fit")


@pytest.mark.parametrize(("gang", "min_member", "the_node", "on_node", "bind", "why"), [
    pytest.param(members(2), None, node(), [], (), "pod group g: waiting for the PodGroup to be created", id="no-podgroup"),
    pytest.param(members(1), 2, node(), [], (),
                 "pod group g: 1 of its minMember 2 pods exist; the gang starts when 2 do", id="too-few-pods"),
    pytest.param(members(2, "1500m"), 2, None, [], (),
                 "pod group g: 0/0 nodes are available: no Node is registered yet.", id="no-node"),
    pytest.param(members(2), 2, node(), [], ("g-0", "g-1"), None, id="complete-no-requests"),
    pytest.param(members(2, "1"), 2, node(), [], ("g-0", "g-1"), None, id="fits-exactly"),
    pytest.param(members(2, "1500m"), 2, node(), [], (), GANG_DOES_NOT_FIT, id="each-fits-alone-not-together"),
    pytest.param(members(2, "1"), 2, node(), [other("1")], (),
                 "pod group g: the gang does not fit: 0/1 nodes are unavailable: 1 Insufficient cpu. Its 2 unbound "
                 "pods ask for cpu 2 together, node localcluster has cpu 1 free; none is bound until 2 of them fit",
                 id="another-pod-holds-the-room"),
    pytest.param(members(2, "1"), 2, node(), [other("1", phase="Succeeded")], ("g-0", "g-1"), None,
                 id="a-finished-pod-holds-nothing"),
    pytest.param(members(2, "1"), 2, node(), [other("1", node_name="elsewhere")], ("g-0", "g-1"), None,
                 id="a-pod-on-another-node-holds-nothing"),
    pytest.param(members(2), 2, node(pods="1"), [], (),
                 "pod group g: the gang does not fit: 0/1 nodes are unavailable: 1 Too many pods. Its 2 unbound "
                 "pods ask for pods 2 together, node localcluster has pods 1 free; none is bound until 2 of them fit",
                 id="too-many-pods"),
    pytest.param(members(3, "1", bound=2), 3, node(cpu="3"), [], ("g-2",), None, id="a-replacement-joins-its-running-gang"),
    pytest.param(members(3, "1", bound=2), 3, node(cpu="2"), [], (),
                 "pod group g: the gang does not fit: 0/1 nodes are unavailable: 1 Insufficient cpu. Its 1 unbound "
                 "pod asks for cpu 1 together, node localcluster has cpu 0 free; none is bound until 1 of them fit",
                 id="a-replacement-that-does-not-fit"),
    pytest.param(members(3, "1"), 2, node(), [], ("g-0", "g-1"),
                 "pod group g: 0/1 nodes are unavailable: 1 Insufficient cpu.", id="min-member-fits-the-rest-waits"),
    pytest.param(members(2, "1"), 2, node(cpu="0"), [], (),
                 "pod group g: the gang does not fit: 0/1 nodes are unavailable: 1 Insufficient cpu. Its 2 unbound "
                 "pods ask for cpu 2 together, node localcluster has cpu 0 free; none is bound until 2 of them fit",
                 id="no-room-at-all"),
    pytest.param(members(2, "1", scheduler="default-scheduler"), 2, node(), [], (), None,
                 id="kube-schedulers-pods-are-not-its-own"),
])
def test_decide(gang, min_member, the_node, on_node, bind, why):
    placement = decide(gang, group="g", min_member=min_member, node=the_node, pods=gang + on_node)
    assert placement.bind == bind
    waiting = [p["metadata"]["name"] for p in gang if p["metadata"]["name"] not in bind
               and p["spec"]["schedulerName"] != "default-scheduler" and not p["spec"].get("nodeName")]
    assert placement.held == dict.fromkeys(waiting, why)


@pytest.mark.parametrize(("resources", "bind", "why"), [
    pytest.param({"cpu": "2"}, ("solo",), None, id="fits"),
    pytest.param({"cpu": "3"}, (), "0/1 nodes are unavailable: 1 Insufficient cpu.", id="cpu"),
    pytest.param({"cpu": "3", "memory": "5Gi"}, (), "0/1 nodes are unavailable: 1 Insufficient cpu, 1 Insufficient memory.",
                 id="cpu-and-memory"),
    pytest.param({"nvidia.com/gpu": "1"}, (), "0/1 nodes are unavailable: 1 Insufficient nvidia.com/gpu.",
                 id="a-gpu-the-node-lacks"),
])
def test_a_pod_outside_any_gang_is_bound_once_it_fits(resources, bind, why):
    solo = pod("solo")
    solo["spec"]["schedulerName"] = "volcano"
    solo["spec"]["containers"][0]["resources"] = {"requests": resources}
    placement = decide([solo], group=None, min_member=None, node=node(), pods=[solo])
    assert (placement.bind, placement.held) == (bind, {} if why is None else {"solo": why})


def test_a_gang_fits_its_gpus():
    gang = members(2)
    for manifest in gang:
        manifest["spec"]["containers"][0]["resources"] = {"requests": {"nvidia.com/gpu": "2"}}
    assert decide(gang, group="g", min_member=2, node=node(**{"nvidia.com/gpu": "4"}), pods=gang).bind == ("g-0", "g-1")
    held = decide(gang, group="g", min_member=2, node=node(**{"nvidia.com/gpu": "3"}), pods=gang).held
    assert "1 Insufficient nvidia.com/gpu. Its 2 unbound pods ask for nvidia.com/gpu 4" in held["g-0"]


def spec_of(containers=(), init=(), **spec) -> dict:
    def c(requests, **more):
        return {"name": "c", "resources": {"requests": requests}, **more}
    return {"spec": {"containers": [c(r) for r in containers],
                     "initContainers": [c(r, **more) for r, more in init], **spec}}


@pytest.mark.parametrize(("pod_spec", "expected"), [
    pytest.param(spec_of([{"cpu": "500m"}, {"cpu": "1", "memory": "1Gi"}]), {"cpu": "1.5", "memory": "1Gi"},
                 id="containers-add-up"),
    pytest.param(spec_of([{"cpu": "1"}], [({"cpu": "2"}, {}), ({"cpu": "500m", "memory": "2Gi"}, {})]),
                 {"cpu": "2", "memory": "2Gi"}, id="largest-init-container-where-more"),
    pytest.param(spec_of([{"cpu": "1"}], [({"cpu": "500m"}, {"restartPolicy": "Always"}), ({"cpu": "1"}, {})]),
                 {"cpu": "1.5"}, id="a-sidecar-adds-to-the-containers-and-to-later-init-containers"),
    pytest.param(spec_of([{"cpu": "1"}], [({"cpu": "2"}, {}), ({"cpu": "500m"}, {"restartPolicy": "Always"})]),
                 {"cpu": "2"}, id="an-init-container-before-the-sidecar-runs-alone"),
    pytest.param(spec_of([{"cpu": "1"}], overhead={"cpu": "250m", "memory": "120Mi"}), {"cpu": "1.25", "memory": "120Mi"},
                 id="overhead"),
    pytest.param(spec_of([{"cpu": "1", "nvidia.com/gpu": "1"}], resources={"requests": {"cpu": "3", "nvidia.com/gpu": "4"}}),
                 {"cpu": "3", "nvidia.com/gpu": "1"}, id="pod-level-requests-replace-cpu-and-memory-only"),
    pytest.param(spec_of(), {}, id="nothing"),
])
def test_pod_requests_as_kube_scheduler_counts_them(pod_spec, expected):
    assert fit.pod_requests(pod_spec) == {name: parse_quantity(value) for name, value in expected.items()}


@pytest.mark.parametrize(("resource", "value", "shown"), [
    pytest.param("cpu", "1500m", "1500m", id="millicores"),
    pytest.param("cpu", "3", "3", id="cores"),
    pytest.param("memory", "4Gi", "4Gi", id="gibibytes"),
    pytest.param("memory", "1000", "1000", id="bytes"),
    pytest.param("nvidia.com/gpu", "1024", "1024", id="a-count-has-no-unit"),
])
def test_quantities_are_shown_as_written(resource, value, shown):
    assert fit.show(resource, parse_quantity(value)) == shown


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
    store.create(podgroup(COSCHEDULING, "g", 1))  # of the other API: not this gang's
    store.create({**pod("other", volcano="h"), "spec": {**pod("x")["spec"], "schedulerName": "volcano"}})  # another gang's
    gang = GangScheduler(store, read_node=node)
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
        assert scheduled(store, "other")[0] is None
    finally:
        gang.stop()


def test_a_round_reads_the_node_once_and_counts_what_it_bound_before_the_next_gang():
    store, reads = ObjectBag(), []

    def read_node() -> dict:
        reads.append(1)
        return node(cpu="2")
    for group in ("g1", "g2", "g3"):  # 1 cpu each: two of them fit a 2-cpu node
        store.create(podgroup(VOLCANO, group, 2))
        for i in range(2):
            manifest = pod(f"{group}-{i}", volcano=group)
            manifest["spec"]["schedulerName"] = "volcano"
            manifest["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "500m"}}
            store.create(manifest)
    gang = GangScheduler(store, read_node=read_node)
    gang.observe()
    gang.schedule_once()
    assert len(reads) == 1
    bound = {name: scheduled(store, name)[0] for name in ("g1-0", "g1-1", "g2-0", "g2-1", "g3-0", "g3-1")}
    assert bound == {"g1-0": "localcluster", "g1-1": "localcluster", "g2-0": "localcluster", "g2-1": "localcluster",
                     "g3-0": None, "g3-1": None}
    assert "the gang does not fit" in scheduled(store, "g3-0")[1]["message"]


def test_a_round_without_the_node_binds_nothing_and_the_next_round_reads_it_again():
    store, answers = ObjectBag(), [StoreError(503, "ServiceUnavailable", "the API server is restarting"), node()]

    def read_node() -> dict:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer
    store.create(podgroup(VOLCANO, "g", 1))
    store.create(members(1)[0])
    gang = GangScheduler(store, read_node=read_node)
    gang.observe()
    gang.schedule_once()
    assert scheduled(store, "g-0")[0] is None
    gang.schedule_once()
    assert scheduled(store, "g-0")[0] == "localcluster"
    assert answers == []


def test_a_held_pods_condition_is_written_once_while_the_reason_holds():
    change = unschedulable("why")
    first = change({"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "True"}]})
    assert first["conditions"] == [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "why",
                                    "lastProbeTime": None, "lastTransitionTime": first["conditions"][0]["lastTransitionTime"]}]
    assert change(first) is first  # nothing to write
    moved = unschedulable("another reason")(first)
    assert moved["conditions"][0]["lastTransitionTime"] == first["conditions"][0]["lastTransitionTime"]  # still False
