"""A ChainerJob through Kueue's plain-pod groups (MXJOB_KUEUE_POD_GROUPS=true; docs/ecosystem.md, "Kueue"),
stepped over the Metacontroller emulation: every sync checks its answer is a fixed point (helpers/mcsim.py).
The real Kueue's side is tests/localcluster/test_kueue_chainer.py."""
from __future__ import annotations

import pytest
from helpers.chainersim import JOB_KEY, STATEFULSET_KEY, ChainerSim, chainerjob

from hooks.chainerjob.related import customize_chainerjob
from hooks.chainerjob.sync import CONFIG_MAP_KEY, sync_chainerjob
from hooks.server.app import create_app

QUEUE = "kueue.x-k8s.io/queue-name"
GROUP = "kueue.x-k8s.io/pod-group-name"
TOTAL = "kueue.x-k8s.io/pod-group-total-count"
RETRIABLE = "kueue.x-k8s.io/retriable-in-group"
PRIORITY = "kueue.x-k8s.io/priority-class"


def queued(workers: int = 2, **labels: str) -> dict:
    parent = chainerjob(workers={"ws": workers} if workers else None)
    parent["metadata"]["labels"] = {QUEUE: "q", "team": "a", **labels}
    return parent


def templates(sim: ChainerSim) -> list[dict]:
    return [obj["spec"]["template"]["metadata"] for key in (JOB_KEY, STATEFULSET_KEY) for obj in sim.children[key].values()]


@pytest.mark.parametrize("workers", [0, 2], ids=["non-distributed", "distributed"])
def test_the_master_and_every_worker_form_one_pod_group_and_are_made_together(workers):
    sim = ChainerSim(queued(workers, **{PRIORITY: "high"}), kueue_pod_groups="true")
    sim.sync()
    # Kueue admits a group only once all of it exists: the master is not held back for ready workers.
    assert sim.names(JOB_KEY) == ["chj-master"]
    assert len(sim.children[STATEFULSET_KEY]) == (1 if workers else 0)
    for meta in templates(sim):
        assert {k: meta["labels"][k] for k in (QUEUE, GROUP, PRIORITY)} == {QUEUE: "q", GROUP: "chj-uid-chj-0", PRIORITY: "high"}
        assert (meta["annotations"][TOTAL], meta["annotations"][RETRIABLE]) == (str(1 + workers), "false")
    # Kueue's labels stay off the owners: its batch/job or statefulset integration would queue one alone.
    for key in (JOB_KEY, STATEFULSET_KEY):
        for obj in sim.children[key].values():
            assert QUEUE not in obj["metadata"]["labels"] and PRIORITY not in obj["metadata"]["labels"]
            assert obj["metadata"]["labels"]["team"] == "a"


def test_the_rsh_agent_waits_for_its_targets_since_the_master_may_start_first():
    sim = ChainerSim(queued(), kueue_pod_groups="true")
    sim.sync()
    agent = sim.children[CONFIG_MAP_KEY]["chj-assets"]["data"]["kubexeb.sh"]
    assert "is not running after" in agent


@pytest.mark.parametrize("setting,labels", [("false", {QUEUE: "q"}), ("true", {})], ids=["setting-off", "no-queue-label"])
def test_without_the_setting_or_the_queue_label_nothing_changes(setting, labels):
    parent = chainerjob(workers={"ws": 2})
    parent["metadata"]["labels"] = labels
    sim = ChainerSim(parent, kueue_pod_groups=setting)
    sim.sync()
    sim.sync()
    assert not sim.children[JOB_KEY], "the master waits for ready workers, as without Kueue"
    assert all(GROUP not in meta["labels"] for meta in templates(sim))
    # The job's labels reach its StatefulSets as before (the queue label too, when the setting is off).
    assert all(sts["metadata"]["labels"].get(QUEUE) == labels.get(QUEUE) for sts in sim.children[STATEFULSET_KEY].values())


def gated_pod(name: str, role: str, group: str = "chj-uid-chj-0") -> dict:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "ns", "labels": {
                "chainerjob.kubeflow.org/name": "chj", "chainerjob.kubeflow.org/role": role, QUEUE: "q", GROUP: group}},
            "spec": {"schedulingGates": [{"name": "kueue.x-k8s.io/admission"}], "containers": [{"name": "chainer"}]},
            "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
                                                           "reason": "SchedulingGated"}]}}


PENDING_WORKLOAD = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
                    "metadata": {"name": "chj-uid-chj-0", "namespace": "ns"},
                    "status": {"conditions": [{"type": "QuotaReserved", "status": "False", "reason": "Pending",
                                               "message": "couldn't assign flavors to pod set 05e6f314: insufficient "
                                                          "unused quota for cpu in flavor f, 200m more needed"}]}}


@pytest.mark.parametrize("workload,said", [
    (None, "LocalQueue q has not admitted them yet"),
    (PENDING_WORKLOAD, "Workload chj-uid-chj-0 of LocalQueue q is Pending: couldn't assign flavors to pod set 05e6f314: "
                       "insufficient unused quota for cpu in flavor f, 200m more needed"),
], ids=["workload-not-related", "workload-pending"])
def test_while_kueue_holds_the_group_the_job_waits_in_kueues_words_and_is_not_running(workload, said):
    sim = ChainerSim(queued(), kueue_pod_groups="true")
    sim.sync()
    sim.master("chj-master", active=1)  # a Job counts its Pending pod as active
    request = sim.request()
    pods = {n: gated_pod(n, role) for n, role in (("chj-master-abcde", "master"), ("chj-workerset-ws-0", "workerset"),
                                                  ("chj-workerset-ws-1", "workerset"))}
    request["related"] = {"Pod.v1": pods}
    if workload is not None:
        request["related"]["Workload.kueue.x-k8s.io/v1beta2"] = {"chj-uid-chj-0": workload}
    status = sync_chainerjob(request, now=sim.now, kueue_pod_groups="true")["status"]
    waiting = next(c for c in status["conditions"] if c["type"] == "Waiting")
    assert (waiting["status"], waiting["reason"]) == ("True", "WaitingForKueue")
    assert waiting["message"] == ("ChainerJob ns/chj is waiting for Kueue to admit its pod group (the master and every "
                                  "worker, admitted together); it waits for Kueue: pods chj-master-abcde, "
                                  f"chj-workerset-ws-0, chj-workerset-ws-1 are not admitted: {said}.")
    assert status["conditions"][-1]["type"] == "Waiting"
    assert not any(c["type"] == "Running" for c in status["conditions"])


def test_once_admitted_waiting_goes_false_and_the_master_runs():
    sim = ChainerSim(queued(), kueue_pod_groups="true")
    sim.sync()
    sim.master("chj-master", active=1)
    names = ("chj-master-abcde", "chj-workerset-ws-0", "chj-workerset-ws-1")
    for name in names:
        sim.store.create(gated_pod(name, "master" if "master" in name else "workerset"))
    sim.sync()
    assert sim.state() == "Waiting"
    for name in names:  # Kueue admits the group: the gates go, the pods run
        pod = sim.store.get("v1", "Pod", "ns", name)
        sim.store.delete("v1", "Pod", "ns", name)
        pod["spec"].pop("schedulingGates")
        pod["status"] = {"phase": "Running"}
        pod["metadata"] = {k: v for k, v in pod["metadata"].items() if k in ("name", "namespace", "labels")}
        sim.store.create(pod)
    sim.all_ready()
    sim.sync()
    waiting = sim.condition("Waiting")
    assert (waiting["status"], waiting["reason"]) == ("False", "KueueAdmitted")
    assert sim.state() == "Running"


@pytest.mark.parametrize("setting,labels,workloads", [
    ("true", {QUEUE: "q"}, [f"chj-uid-chj-{n}" for n in range(2, 10)]),
    ("false", {QUEUE: "q"}, None),
    ("true", {}, None),
], ids=["queued", "setting-off", "not-queued"])
def test_the_customize_hook_relates_the_groups_workloads_only_of_a_queued_job(setting, labels, workloads):
    parent = chainerjob()
    parent["metadata"]["labels"] = labels
    parent["status"] = {"attempt": 2}
    rules = customize_chainerjob({"parent": parent}, kueue_pod_groups=setting)["relatedResources"]
    assert rules[0]["resource"] == "pods"
    assert [r.get("names") for r in rules[1:]] == ([workloads] if workloads else [])


def test_a_restarted_or_resumed_job_forms_a_new_group_for_its_new_attempt():
    sim = ChainerSim(queued(), kueue_pod_groups="true")
    sim.sync()
    sim.all_ready()
    sim.master("chj-master", active=1)
    sim.sync()
    sim.edit({"runPolicy": {"suspend": True}})
    sim.sync()
    sim.sync()
    assert not sim.children[JOB_KEY] and not sim.children[STATEFULSET_KEY]
    sim.edit({"runPolicy": {"suspend": False}})
    sim.sync()
    assert {meta["labels"][GROUP] for meta in templates(sim)} == {"chj-uid-chj-1"}
    assert sim.names(JOB_KEY) == ["chj-master"]


@pytest.mark.parametrize(("setting", "status", "rules"), [
    pytest.param("true", 200, 2, id="pod-groups"),
    pytest.param("false", 200, 1, id="off"),
    pytest.param("yes", 500, None, id="bad-setting"),
])
@pytest.mark.parametrize("route", ["/chainerjob/customize", "/chainerjob/sync"])
def test_the_chainerjob_routes_take_the_servers_kueue_setting(monkeypatch, route, setting, status, rules):
    """One setting for both kinds: the installation's Kueue (docs/hooks-server.md)."""
    monkeypatch.setenv("MXJOB_KUEUE_POD_GROUPS", setting)
    request = ChainerSim(queued()).request() if route.endswith("sync") else {"controller": {}, "parent": queued()}
    reply = create_app().test_client().post(route, json=request)
    assert reply.status_code == status, reply.get_data(as_text=True)
    if rules is not None and route.endswith("customize"):
        assert len(reply.get_json()["relatedResources"]) == rules
