"""A job whose pods are held back says who holds them and why: Kueue (v0.11 and later, plain-pod groups),
in the words of the group's Workload that the customize hook relates, or the scheduler; and
status.waiting (the Waiting column) says it in a word.

What Kueue v0.17.0 writes where (its source, and a run on the local cluster): nothing on the pods but
its admission gate (the API server then says `SchedulingGated` in PodScheduled); its reason is on
the Workload named after the group, in QuotaReserved (status False, reason Pending) or, with quota
reserved and admission checks due, in Admitted.
"""
from __future__ import annotations

from typing import Any

import pytest
from helpers.mcsim import Sim, mxjob

from hooks.mxjob.names import KUEUE_POD_GROUP_LABEL
from hooks.mxjob.sync import KUEUE_ATTEMPTS_RELATED, customize_mxjob
from hooks.server.app import create_app
from hooks.shared.kueue import KUEUE_GATE, Pending, pending

QUEUED = {"kueue.x-k8s.io/queue-name": "q"}
NO_QUOTA = ("couldn't assign flavors to pod set 78f835ad: insufficient unused quota for cpu in flavor default, "
            "200m more needed")


def queued(**spec: Any) -> dict:
    job = mxjob(replicas={"Worker": 2}, **spec)
    job["metadata"]["labels"] = dict(QUEUED)
    return job


def condition(type_: str, status: str, reason: str, message: str = "") -> dict:
    return {"type": type_, "status": status, "reason": reason, "message": message,
            "lastTransitionTime": "2026-01-01T00:00:00Z"}


def workload(name: str, *conditions: dict) -> dict:
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload", "metadata": {"name": name},
            "spec": {"queueName": "q"}, "status": {"conditions": list(conditions)}}


def gate(sim: Sim) -> str | None:
    """Kueue's webhook gated every pod (the API server says SchedulingGated); the pods' group name."""
    for name in sim.pods:
        sim.change("v1", "Pod", name, lambda pod: pod["spec"].update(schedulingGates=[{"name": KUEUE_GATE}]))
        sim.write_status("v1", "Pod", name, {"phase": "Pending", "conditions": [condition(
            "PodScheduled", "False", "SchedulingGated", "Scheduling is blocked due to non-empty scheduling gates")]})
    return sim.pods["mx-worker-0"]["metadata"]["labels"].get(KUEUE_POD_GROUP_LABEL)


def test_a_queued_job_says_kueue_holds_it_back_in_its_workloads_words_until_admitted():
    sim = Sim(queued(), settings={"kueue_pod_groups": "true"})
    sim.sync()
    group = gate(sim)
    sim.sync()
    # Before Kueue says why (no Workload yet): that Kueue holds it, and which queue.
    assert sim.condition("Created")["message"] == ("MXJob ns/mx is created; it waits for Kueue: pods mx-worker-0, "
                                                   "mx-worker-1 are not admitted: LocalQueue q has not admitted them yet.")
    assert sim.status["waiting"] == "Kueue"
    assert group is not None
    sim.create(workload(group, condition("QuotaReserved", "False", "Pending", NO_QUOTA)))
    sim.sync()
    assert sim.condition("Created")["message"] == (
        f"MXJob ns/mx is created; it waits for Kueue: pods mx-worker-0, mx-worker-1 are not admitted: Workload "
        f"{group} of LocalQueue q is Pending: {NO_QUOTA}.")
    assert sim.state() == "Created" and sim.status["waiting"] == "Kueue: Pending"
    # Admitted: Kueue takes its gate off, the pods run, and the job no longer waits.
    sim.write_status("kueue.x-k8s.io/v1beta2", "Workload", group, {"conditions": [
        condition("QuotaReserved", "True", "QuotaReserved"), condition("Admitted", "True", "Admitted")]})
    for name in sim.pods:
        sim.change("v1", "Pod", name, lambda pod: pod["spec"].update(schedulingGates=[]))
    sim.run()
    sim.sync()
    assert sim.condition("Created")["message"] == "MXJob ns/mx is created."
    assert sim.state() == "Running" and "waiting" not in sim.status


def test_without_kueue_pod_groups_the_customize_hook_relates_nothing_and_a_gate_is_the_schedulers_word():
    sim = Sim(queued())
    sim.sync()
    gate(sim)
    sim.sync()
    assert sim.condition("Created")["message"] == (
        "MXJob ns/mx is created; it waits for the scheduler: pods mx-worker-0, mx-worker-1 are not scheduled: "
        "Scheduling is blocked due to non-empty scheduling gates.")
    assert sim.status["waiting"] == "Scheduler: SchedulingGated"


def test_a_pod_that_does_not_fit_shows_the_schedulers_reason_in_the_waiting_column():
    sim = Sim(mxjob(replicas={"Worker": 1}))
    sim.sync()
    sim.write_status("v1", "Pod", "mx-worker-0", {"phase": "Pending", "conditions": [
        condition("PodScheduled", "False", "Unschedulable", "0/1 nodes are available: 1 Insufficient cpu.")]})
    sim.sync()
    assert sim.status["waiting"] == "Scheduler: Unschedulable"


def parent(labels: dict | None = None, status: Any = None) -> dict:
    job = mxjob()
    job["metadata"]["labels"] = labels or {}
    if status is not None:
        job["status"] = status
    return job


@pytest.mark.parametrize(("job", "setting", "first"), [
    pytest.param(parent(QUEUED), "true", 0, id="queued-new"),
    pytest.param(parent(QUEUED, {"attempt": 3}), "true", 3, id="queued-attempt-3"),
    pytest.param(parent(QUEUED, {"attempt": "x"}), "true", 0, id="queued-bad-attempt"),
    pytest.param(parent(QUEUED), "false", None, id="pod-groups-off"),
    pytest.param(parent(), "true", None, id="not-queued"),
])
def test_customize_relates_the_workloads_of_a_queued_jobs_groups_from_its_attempt_on(job, setting, first):
    answer = customize_mxjob({"controller": {}, "parent": job}, kueue_pod_groups=setting)
    if first is None:
        assert answer == {"relatedResources": []}
        return
    names = [f"mx-uid-mx-{n}" for n in range(first, first + KUEUE_ATTEMPTS_RELATED)]
    assert answer == {"relatedResources": [{"apiVersion": "kueue.x-k8s.io/v1beta2", "resource": "workloads",
                                            "names": names}]}


def test_customize_refuses_a_bad_setting():
    with pytest.raises(ValueError, match="MXJOB_KUEUE_POD_GROUPS"):
        customize_mxjob({"parent": parent(QUEUED)}, kueue_pod_groups="yes")


@pytest.mark.parametrize(("conditions", "expected"), [
    pytest.param([], None, id="nothing-said-yet"),
    pytest.param([condition("QuotaReserved", "False", "Pending", NO_QUOTA)], Pending("Pending", NO_QUOTA), id="no-quota"),
    pytest.param([condition("QuotaReserved", "False", "Inadmissible", "LocalQueue q doesn't exist")],
                 Pending("Inadmissible", "LocalQueue q doesn't exist"), id="inadmissible"),
    pytest.param([condition("QuotaReserved", "True", "QuotaReserved"),
                  condition("Admitted", "False", "NoChecks", "The workload has not all checks ready\nmore")],
                 Pending("NoChecks", "The workload has not all checks ready"), id="checks-due"),
    pytest.param([condition("QuotaReserved", "True", "QuotaReserved"), condition("Admitted", "True", "Admitted")],
                 None, id="admitted"),
])
def test_pending_reads_why_kueue_holds_a_workload_back(conditions, expected):
    assert pending(workload("w", *conditions)) == expected


@pytest.mark.parametrize("bad", [None, "w", {"status": "x"}, {"status": {"conditions": "x"}}], ids=repr)
def test_pending_of_a_workload_of_another_shape_is_none(bad):
    assert pending(bad) is None


@pytest.mark.parametrize(("setting", "status", "rules"), [
    pytest.param("true", 200, 1, id="pod-groups"),
    pytest.param("false", 200, 0, id="off"),
    pytest.param("yes", 500, None, id="bad-setting"),
])
def test_the_customize_route_takes_the_servers_kueue_setting(monkeypatch, setting, status, rules):
    monkeypatch.setenv("MXJOB_KUEUE_POD_GROUPS", setting)
    reply = create_app().test_client().post("/mxjob/customize", json={"controller": {}, "parent": parent(QUEUED)})
    assert reply.status_code == status
    if rules is not None:
        assert len(reply.get_json()["relatedResources"]) == rules
