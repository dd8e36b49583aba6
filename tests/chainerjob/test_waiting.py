"""A ChainerJob whose master or worker pods the scheduler cannot place says which and why, as an MXJob does.

The worker pods are the StatefulSets', the master's the master Job's: neither is a child, so the
customize hook relates every pod with the job's name label, and the job reads the pods'
PodScheduled conditions (hooks.chainerjob.related.not_scheduled).
"""
from __future__ import annotations

from typing import Any

import pytest
from helpers.chainersim import ChainerSim, chainerjob

from hooks.chainerjob.related import not_scheduled

NO_ROOM = "0/1 nodes are available: 1 Insufficient cpu."
WORKERS = ["chj-workerset-ws-0", "chj-workerset-ws-1", "chj-workerset-ws-2", "chj-workerset-ws-3"]


def pod(name: str, role: str, *, phase: str = "Pending", scheduled: dict | None = None, job: str = "chj",
        deleting: bool = False) -> dict:
    conditions = [{"type": "PodScheduled", **(scheduled if scheduled is not None else
                                                {"status": "False", "reason": "Unschedulable", "message": NO_ROOM})}]
    meta: dict[str, Any] = {"name": name, "labels": {"chainerjob.kubeflow.org/name": job,
                                                      "chainerjob.kubeflow.org/role": role}}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": meta, "status": {"phase": phase, "conditions": conditions}}


def worker(ordinal: int, **kwargs: Any) -> tuple[str, dict]:
    name = f"chj-workerset-ws-{ordinal}"
    return name, pod(name, "workerset", **kwargs)


@pytest.mark.parametrize(("pods", "expected"), [
    pytest.param({}, "", id="no-pods"),
    pytest.param(dict([worker(1)]), f"pod chj-workerset-ws-1 is not scheduled: {NO_ROOM.rstrip('.')}", id="one-worker"),
    pytest.param(dict([worker(3), worker(2), worker(1), worker(0), ("chj-master-x", pod("chj-master-x", "master"))]),
                 "pods chj-master-x, chj-workerset-ws-0, chj-workerset-ws-1 are not scheduled: 0/1 nodes are available: "
                 "1 Insufficient cpu; and 2 more", id="master-first-then-workers-in-order"),
    pytest.param(dict([worker(0, scheduled={"status": "True"}), worker(1, phase="Running"), worker(2, deleting=True),
                       ("other-master", pod("other-master", "master", job="other"))]), "", id="placed-running-leaving-others"),
    pytest.param(dict([worker(0, scheduled={"status": "False", "reason": "SchedulingGated"}), worker(1)]),
                 f"pod chj-workerset-ws-0 is not scheduled: SchedulingGated; pod chj-workerset-ws-1 is not scheduled: "
                 f"{NO_ROOM.rstrip('.')}", id="two-reasons"),
])
def test_not_scheduled_names_the_jobs_pending_pods_and_the_schedulers_reason(pods, expected):
    # The clause a condition quotes: who holds the pods back (the scheduler here; Kueue: tests/chainerjob/test_kueue.py).
    assert not_scheduled("chj", WORKERS, pods) == (f"it waits for the scheduler: {expected}" if expected else "")


@pytest.mark.parametrize(("attempt", "expected"), [(0, "chj-workerset-ws-0"), (1, "chj-workerset-ws-1")],
                         ids=["attempt-0-unlabelled", "attempt-1-labelled"])
def test_not_scheduled_names_only_the_pods_of_the_current_attempt(attempt, expected):
    # After a whole-job restart the new attempt's worker pods have the earlier's names; an earlier
    # pod the garbage collector has not marked yet is not the new attempt's.
    old_name, old = worker(0)
    new_name, new = worker(1)
    new["metadata"]["labels"]["chainerjob.kubeflow.org/attempt"] = "1"
    assert not_scheduled("chj", WORKERS, {old_name: old, new_name: new}, attempt) == \
        f"it waits for the scheduler: pod {expected} is not scheduled: {NO_ROOM.rstrip('.')}"


def unschedulable(sim: ChainerSim, name: str) -> None:
    """A worker pod of the StatefulSet that the scheduler cannot place."""
    sim.store.create({"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": name, "namespace": sim.namespace,
        "labels": {"chainerjob.kubeflow.org/name": sim.name, "chainerjob.kubeflow.org/role": "workerset",
                   "chainerjob.kubeflow.org/workersetname": "ws"}}, "spec": {"containers": [{"name": "chainer"}]}})
    sim.store.update_status("v1", "Pod", sim.namespace, name, pod(name, "workerset")["status"])


def test_a_worker_that_does_not_fit_is_said_while_the_master_waits_for_its_workers():
    sim = ChainerSim(chainerjob(workers={"ws": 2}))
    sim.sync()
    sim.ready("chj-workerset-ws", 1)
    unschedulable(sim, "chj-workerset-ws-1")
    sim.sync()
    assert sim.condition("Waiting")["message"] == (
        "ChainerJob ns/chj is waiting for its workers: 1 of 2 ready (ws 1/2); the master starts when all are "
        f"ready; it waits for the scheduler: pod chj-workerset-ws-1 is not scheduled: {NO_ROOM}")
    sim.store.remove("v1", "Pod", sim.namespace, "chj-workerset-ws-1")
    sim.sync()
    assert sim.condition("Waiting")["message"].endswith("the master starts when all are ready.")


def test_a_master_pod_that_does_not_fit_is_said_while_the_master_job_counts_it_active():
    sim = ChainerSim(chainerjob(workers={"ws": 1}))
    sim.sync()
    sim.all_ready()
    sim.sync()
    sim.master("chj-master", active=1)  # the Job controller counts a Pending pod as active
    sim.master_pod("chj-master-abcde", phase="Pending")
    sim.store.update_status("v1", "Pod", sim.namespace, "chj-master-abcde", pod("chj-master-abcde", "master")["status"])
    sim.sync()
    assert sim.condition("Running")["message"] == (
        "ChainerJob ns/chj: the master is running with 1 workers; it waits for the scheduler: pod chj-master-abcde "
        f"is not scheduled: {NO_ROOM}")
