"""Jobs adopted from older operators: the status they wrote must not break a sync.

mxnet-operator before v1.1 wrote `mxReplicaStatuses` (counts per replica type) and
`lastReconcileTime`; later operators wrote `replicaStatuses` with counts but no completedIndexes.
Conditions, startTime and completionTime have our shape and carry over as they are.
"""
from __future__ import annotations

import copy
import json

import pytest
from helpers.mcsim import T0, Sim, mxjob

CREATED = {"type": "Created", "status": "True", "reason": "MXJobCreated",
           "message": "MXJob mx is created.", "lastUpdateTime": "2019-03-01T10:00:00Z",
           "lastTransitionTime": "2019-03-01T10:00:00Z"}
RUNNING = {"type": "Running", "status": "True", "reason": "MXJobRunning",
           "message": "MXJob mx is running.", "lastUpdateTime": "2019-03-01T10:01:00Z",
           "lastTransitionTime": "2019-03-01T10:01:00Z"}
SUCCEEDED = {"type": "Succeeded", "status": "True", "reason": "MXJobSucceeded",
             "message": "MXJob mx is successfully completed.",
             "lastUpdateTime": "2019-03-01T11:00:00Z", "lastTransitionTime": "2019-03-01T11:00:00Z"}


def adopted(status: dict, **spec) -> Sim:
    """A job (Scheduler 1, Server 1, Worker 2) as an older operator left it: status, no pods.

    No pods: Metacontroller selects children by its controller-uid label, which the older
    operator's pods lack, so it releases them instead of showing them to the hook.
    """
    parent = mxjob(**spec)
    parent["status"] = copy.deepcopy(status)
    return Sim(parent)


def pod_names(answer: dict) -> list[str]:
    return sorted(c["metadata"]["name"] for c in answer["children"] if c["kind"] == "Pod")


def test_finished_v1alpha2_job_keeps_its_record_in_the_current_shape():
    sim = adopted({"conditions": [CREATED, RUNNING | {"status": "False"}, SUCCEEDED],
                   "mxReplicaStatuses": {"Scheduler": {"succeeded": 1}, "Worker": {"succeeded": 2},
                                         "Server": {"active": 1}},
                   "startTime": "2019-03-01T10:00:00Z", "completionTime": "2019-03-01T11:00:00Z",
                   "lastReconcileTime": "2019-03-01T11:00:05Z"})
    answer = sim.sync()
    # No pod: only the outcome, recorded in a child (hooks.shared.memory) as for a job of ours.
    assert [(c["kind"], c["metadata"]["name"]) for c in answer["children"]] == [("ConfigMap", "mx-outcome")]
    status = answer["status"]
    assert "mxReplicaStatuses" not in status and "lastReconcileTime" not in status
    assert status["conditions"] == [CREATED, RUNNING | {"status": "False"}, SUCCEEDED]
    assert (status["startTime"], status["completionTime"]) == ("2019-03-01T10:00:00Z",
                                                               "2019-03-01T11:00:00Z")
    assert status["replicaStatuses"] == {
        "Scheduler": {"active": 0, "succeeded": 1, "failed": 0, "completedIndexes": "0"},
        "Server": {"active": 0, "succeeded": 0, "failed": 0},
        "Worker": {"active": 0, "succeeded": 2, "failed": 0, "completedIndexes": "0-1"},
    }


def test_adopted_status_is_a_fixed_point_after_the_first_sync():
    sim = adopted({"conditions": [CREATED, RUNNING], "startTime": "2019-03-01T10:00:00Z",
                   "mxReplicaStatuses": {"Worker": {"succeeded": 2}, "Scheduler": {"active": 1}}})
    first = sim.sync()
    sim.tick(30)
    second = sim.sync()
    sim.tick(30)
    third = sim.sync()
    assert json.dumps(second["status"], sort_keys=True) == json.dumps(third["status"], sort_keys=True)
    assert first["status"]["replicaStatuses"]["Worker"]["completedIndexes"] == "0-1"
    assert second["status"]["startTime"] == "2019-03-01T10:00:00Z"


# (status as an older operator wrote it, the Worker pods the first sync asks for)
WORKER_CASES = {
    "v1alpha2-every-worker-succeeded": ({"mxReplicaStatuses": {"Worker": {"succeeded": 2}}}, []),
    "v1alpha2-some-workers-succeeded": ({"mxReplicaStatuses": {"Worker": {"succeeded": 1, "active": 1}}},
                                        ["mx-worker-0", "mx-worker-1"]),
    "v1alpha2-lower-case-key": ({"mxReplicaStatuses": {"worker": {"succeeded": 2}}}, []),
    "v1.1-counts-without-indexes": ({"replicaStatuses": {"Worker": {"succeeded": 2}}}, []),
    "ours-wins-over-the-old-name": ({"replicaStatuses": {"Worker": {"succeeded": 1, "completedIndexes": "1"}},
                                     "mxReplicaStatuses": {"Worker": {"succeeded": 2}}}, ["mx-worker-0"]),
    "junk-count": ({"mxReplicaStatuses": {"Worker": {"succeeded": "2"}}}, ["mx-worker-0", "mx-worker-1"]),
    "junk-bool-count": ({"mxReplicaStatuses": {"Worker": {"succeeded": True}}}, ["mx-worker-0", "mx-worker-1"]),
    "junk-entry": ({"mxReplicaStatuses": {"Worker": "done"}}, ["mx-worker-0", "mx-worker-1"]),
    "junk-map": ({"mxReplicaStatuses": ["Worker"]}, ["mx-worker-0", "mx-worker-1"]),
}


@pytest.mark.parametrize("status, workers", WORKER_CASES.values(), ids=WORKER_CASES.keys())
def test_a_worker_index_reruns_unless_the_old_status_proves_it_succeeded(status, workers):
    sim = adopted({"conditions": [CREATED, RUNNING], "startTime": "2019-03-01T10:00:00Z", **status})
    answer = sim.sync()
    assert [n for n in pod_names(answer) if "-worker-" in n] == workers
    assert {"mx-scheduler-0", "mx-server-0"} <= set(pod_names(answer))
    assert "mxReplicaStatuses" not in answer["status"]


def test_adopted_job_whose_every_worker_succeeded_finishes_when_the_scheduler_does():
    sim = adopted({"conditions": [CREATED, RUNNING], "startTime": "2019-03-01T10:00:00Z",
                   "mxReplicaStatuses": {"Worker": {"succeeded": 2}}}, successPolicy="AllWorkers")
    answer = sim.sync()
    assert sim.state() == "Succeeded"
    assert answer["status"]["completionTime"] == "2026-11-21T10:00:00Z" == T0.strftime("%Y-%m-%dT%H:%M:%SZ")


@pytest.mark.parametrize(("field", "entry", "warned"), [
    ("replicaStatuses", None, "status.replicaStatuses.Worker is not an object; it was ignored"),
    ("replicaStatuses", {"succeeded": -1}, "status.replicaStatuses.Worker.succeeded is not a non-negative int32"),
    ("mxReplicaStatuses", {"succeeded": "2"}, "status.mxReplicaStatuses.worker.succeeded is not a non-negative"),
], ids=["entry-null", "succeeded-negative", "succeeded-a-string-under-the-key-as-written"])
def test_a_replica_count_not_in_the_shape_written_is_ignored_with_a_warning(field, entry, warned):
    key = "worker" if field == "mxReplicaStatuses" else "Worker"
    sim = adopted({"conditions": [CREATED, RUNNING], "startTime": "2019-03-01T10:00:00Z", field: {key: entry}})
    answer = sim.sync()
    assert any(w.startswith(warned) for w in answer["status"]["statusWarnings"]), answer["status"]["statusWarnings"]
    assert {"mx-worker-0", "mx-worker-1"} <= set(pod_names(answer))  # nothing counts as completed
    assert sim.sync()["status"] == answer["status"]  # and it is a fixed point
