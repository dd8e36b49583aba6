"""Scenario tests: one MXJob stepped through observed states, each answer applied as Metacontroller would.

After every step the answer must already be a fixed point: syncing again on what it produced
gives byte-identical status and children (else Metacontroller would sync in a hot loop, or the
job would need more than one sync to reach its answer). Every sync of the scene checks it
(helpers/mcsim.py); `step` also holds the last answer of a hand-off to it in full.
"""
from __future__ import annotations

import json

import pytest
from helpers.mcsim import Handoff, Sim, mxjob

from hooks.mxjob.sync import sync_mxjob
from hooks.shared.k8s import LAST_APPLIED
from hooks.shared.termination import exit_words


def new_records(sim: Sim, since: int, kind: str = "-outcome") -> bool:
    """Whether the syncs since `since` created a memory record (hooks.shared.memory) of that kind."""
    return any(c.startswith("ConfigMap/") and kind in c for c in sim.created[since:])


def step(sim: Sim) -> dict:
    """Sync and apply (each sync checks its answer is a fixed point, helpers/mcsim.py), through to
    the end of a hand-off, and check the answer it ends on is a fixed point in full.

    An answer that records the job's outcome is followed by one more sync, as the record's creation
    triggers one: only a sync that observes the record applies cleanPodPolicy. The answer after it
    is held to the full check even when it deleted pods: nothing is left to act on.
    """
    since = len(sim.created)
    answer = sim.sync()
    while new_records(sim, since):
        since = len(sim.created)
        answer = sim.sync()
    sim.assert_fixed_point(Handoff())
    return answer


def delete_then_recreate(sim: Sim, name: str) -> dict:
    """The one allowed multi-step, synced through to its end: the failure is recorded in a restart
    record (the pod stays until it is), the sync that sees the record leaves the failed pod out
    (Metacontroller deletes it), and the next gives it again: a new pod under the same name. Returns
    the last answer, a fixed point like every step's."""
    old_uid = sim.pods[name]["metadata"]["uid"]
    since = len(sim.created)
    sim.sync()
    assert new_records(sim, since, "-restart-") and sim.pods[name]["metadata"]["uid"] == old_uid
    deleted, created = len(sim.deleted), len(sim.created)
    sim.sync()
    assert name not in sim.pods and sim.deleted[deleted:] == [f"Pod/{name}"]
    answer = step(sim)
    assert sim.pods[name]["metadata"]["uid"] != old_uid and sim.created[created:] == [f"Pod/{name}"]
    return answer


def pods(sim: Sim) -> list[str]:
    return sorted(sim.pods)


def finish_ok(sim: Sim, *names: str, code: int = 0) -> None:
    """Pods end with `code` now (the kubelet's finishedAt is when the success grace counts from)."""
    for name in names:
        sim.set_phase(name, "Succeeded" if code == 0 else "Failed", exit_code=code)


def test_normal_success_goes_created_running_succeeded():
    sim = Sim(mxjob())
    step(sim)
    assert sim.state() == "Created"
    assert pods(sim) == ["mx-scheduler-0", "mx-server-0", "mx-worker-0", "mx-worker-1"]
    assert sim.status["startTime"] == "2026-11-21T10:00:00Z"
    sim.tick(5)
    sim.run()
    step(sim)
    assert sim.state() == "Running"
    assert sim.status["replicaStatuses"]["Worker"] == {"active": 2, "succeeded": 0, "failed": 0}
    sim.tick(60)
    finish_ok(sim, "mx-worker-0", "mx-worker-1", "mx-scheduler-0")
    step(sim)
    # The still-running server gets the success grace to leave on its own; the job waits, Running.
    assert sim.state() == "Running" and "completionTime" not in sim.status
    assert sim.condition("Running")["message"] == (
        "MXJob ns/mx: Scheduler 0 succeeded; waiting up to 30 s for the pods still running to end "
        "(Server 0) before the job is Succeeded.")
    assert pods(sim) == ["mx-scheduler-0", "mx-server-0", "mx-worker-0", "mx-worker-1"]
    assert sim.last["resyncAfterSeconds"] == 30
    sim.tick(30)
    step(sim)
    assert sim.state() == "Succeeded"
    assert sim.condition("Running")["status"] == "False"
    assert sim.status["completionTime"] == "2026-11-21T10:01:35Z"
    # ...then cleanPodPolicy Running (default) frees it; finished pods stay.
    assert pods(sim) == ["mx-scheduler-0", "mx-worker-0", "mx-worker-1"]
    assert "mx-server-0" not in sim.services
    assert "resyncAfterSeconds" not in sim.last
    assert sim.condition("Created")["lastTransitionTime"] == "2026-11-21T10:00:00Z"
    # The server stopped after the grace counts as succeeded, as training-operator counts it.
    assert sim.status["replicaStatuses"]["Server"] == {
        "active": 0, "succeeded": 1, "failed": 0, "completedIndexes": "0"}


@pytest.mark.parametrize("policy", ["Running", "All"])
def test_pods_that_finish_within_the_success_grace_count_as_succeeded(policy):
    sim = Sim(mxjob(runPolicy={"cleanPodPolicy": policy}))
    step(sim)
    sim.run()
    step(sim)
    finish_ok(sim, "mx-scheduler-0")
    step(sim)
    assert sim.state() == "Running"
    still_running = ["mx-server-0", "mx-worker-0", "mx-worker-1"]
    assert [p for p in still_running if p in sim.pods] == still_running  # kept, not SIGTERMed
    assert sim.status["replicaStatuses"]["Worker"]["active"] == 2
    sim.tick(2)
    finish_ok(sim, "mx-worker-0", "mx-worker-1")
    answer = step(sim)
    assert sim.state() == "Running"
    assert sim.status["replicaStatuses"]["Worker"] == {
        "active": 0, "succeeded": 2, "failed": 0, "completedIndexes": "0-1"}
    assert answer["resyncAfterSeconds"] == 28  # the end of the grace, for the server still running
    sim.tick(1)
    finish_ok(sim, "mx-server-0")
    step(sim)  # every pod ended with 0 within the grace: Succeeded at once
    assert sim.state() == "Succeeded" and sim.status["completionTime"] == "2026-11-21T10:00:03Z"
    expected = ["mx-scheduler-0", "mx-server-0", "mx-worker-0", "mx-worker-1"] if policy == "Running" else []
    assert pods(sim) == expected and sorted(sim.services) == expected
    assert sim.status["replicaStatuses"]["Worker"]["succeeded"] == 2


@pytest.mark.parametrize("code", [1, 2, 139])
def test_a_worker_failing_within_the_success_grace_fails_the_job(code):
    # mxnet-operator#38: "worker-0 errored, yet the MXJob was Succeeded".
    sim = Sim(mxjob())
    step(sim)
    sim.run()
    step(sim)
    finish_ok(sim, "mx-scheduler-0")
    step(sim)
    assert sim.state() == "Running"
    sim.tick(3)
    finish_ok(sim, "mx-worker-1", code=code)
    step(sim)
    assert sim.state() == "Failed" and sim.condition("Succeeded") is None
    assert sim.condition("Failed")["message"] == (
        f"MXJob ns/mx failed: Worker 1 (pod mx-worker-1) failed with {exit_words(code)} after "
        f"Scheduler 0 succeeded; restartPolicy Never does not retry.")
    assert sim.status["replicaStatuses"]["Worker"]["failed"] == 1


@pytest.mark.parametrize("code", [130, 137, 143])
def test_a_signal_exit_within_the_success_grace_is_teardown_not_failure(code):
    sim = Sim(mxjob(replicas={"Scheduler": 1, "Server": 1, "Worker": 1}))
    step(sim)
    sim.run()
    step(sim)
    finish_ok(sim, "mx-scheduler-0")
    step(sim)
    finish_ok(sim, "mx-server-0", code=code)
    finish_ok(sim, "mx-worker-0")
    step(sim)
    assert sim.state() == "Succeeded"


def test_success_policy_all_workers_keeps_its_meaning_with_the_grace():
    sim = Sim(mxjob(successPolicy="AllWorkers"))
    step(sim)
    sim.run()
    step(sim)
    finish_ok(sim, "mx-scheduler-0", "mx-worker-0")
    step(sim)
    assert sim.state() == "Running" and "waiting" not in sim.condition("Running")["message"]
    finish_ok(sim, "mx-worker-1")
    step(sim)
    assert sim.state() == "Running"
    assert "all 2 Worker replicas succeeded; waiting" in sim.condition("Running")["message"]
    sim.tick(30)
    step(sim)
    assert sim.state() == "Succeeded" and pods(sim) == ["mx-scheduler-0", "mx-worker-0", "mx-worker-1"]


def test_failure_paths_clean_up_at_once_without_a_grace():
    sim = Sim(mxjob())
    step(sim)
    sim.run()
    step(sim)
    sim.set_phase("mx-worker-0", "Failed", exit_code=1)
    answer = step(sim)
    assert sim.state() == "Failed"
    assert pods(sim) == ["mx-worker-0"] and "resyncAfterSeconds" not in answer


def test_the_ttl_counts_from_the_end_of_the_success_grace():
    sim = Sim(mxjob(runPolicy={"ttlSecondsAfterFinished": 10}))
    step(sim)
    sim.run()
    step(sim)
    finish_ok(sim, "mx-scheduler-0")
    assert step(sim)["resyncAfterSeconds"] == 30
    sim.tick(30)
    assert step(sim)["resyncAfterSeconds"] == 10
    sim.tick(10)
    step(sim)
    assert pods(sim) == [] and sim.status["cleanedUpTime"] == "2026-11-21T10:00:40Z"


def test_worker_permanent_failure_under_never_fails_the_job():
    sim = Sim(mxjob())
    step(sim)
    sim.run()
    step(sim)
    sim.tick(10)
    sim.set_phase("mx-worker-1", "Failed", exit_code=1)
    step(sim)
    assert sim.state() == "Failed"
    failed = sim.condition("Failed")
    assert failed["reason"] == "MXJobFailed"
    assert "Worker 1" in failed["message"] and "exit code 1" in failed["message"]
    assert "completionTime" in sim.status
    assert pods(sim) == ["mx-worker-1"]  # the failed pod is kept for its logs


def test_retryable_exit_under_exitcode_restarts_the_pod_with_failure_policy_restart_pod():
    spec = {"replicas": 2, "restartPolicy": "ExitCode"}
    sim = Sim(mxjob(replicas={"Scheduler": 1, "Server": 1, "Worker": spec},
                    runPolicy={"backoffLimit": 3, "failurePolicy": {"rules": [{"action": "RestartPod"}]}}))
    step(sim)
    sim.run()
    step(sim)
    sim.set_phase("mx-worker-0", "Failed", exit_code=137)
    delete_then_recreate(sim, "mx-worker-0")  # left out (Metacontroller deletes it), then created anew
    assert sim.state() == "Restarting"
    assert "pod mx-worker-0 ended with exit code 137, killed by SIGKILL" in sim.condition("Restarting")["message"]
    assert sim.condition("Running")["status"] == "False"
    sim.run("mx-worker-0")
    step(sim)
    assert sim.state() == "Running"
    assert sim.status["restartCount"] == 1
    finish_ok(sim, "mx-worker-0", "mx-worker-1", "mx-scheduler-0", "mx-server-0")
    step(sim)
    assert sim.state() == "Succeeded"


def test_permanent_code_under_exitcode_fails_at_once():
    sim = Sim(mxjob(replicas={"Scheduler": 1, "Server": 1,
                              "Worker": {"replicas": 1, "restartPolicy": "ExitCode"}}))
    step(sim)
    sim.run()
    step(sim)
    sim.set_phase("mx-worker-0", "Failed", exit_code=2)
    step(sim)
    assert sim.state() == "Failed"
    assert "permanent" in sim.condition("Failed")["message"]
    assert sim.condition("Restarting") is None
    assert "completionTime" in sim.status


def test_backoff_limit_reached_by_recreations():
    sim = Sim(mxjob(replicas={"Worker": {"replicas": 1, "restartPolicy": "ExitCode"}},
                    runPolicy={"backoffLimit": 1}))
    step(sim)
    for attempt in range(2):
        sim.run()
        step(sim)
        sim.set_phase("mx-worker-0", "Failed", exit_code=143)
        if attempt == 0:
            delete_then_recreate(sim, "mx-worker-0")
            assert sim.state() == "Restarting"
        else:
            step(sim)
    assert sim.state() == "Failed"
    assert "backoff limit" in sim.condition("Failed")["message"]
    assert sim.condition("Failed")["message"].endswith(
        "; pod mx-worker-0 was lost (exit code 143, killed by SIGTERM).")
    assert sim.status["restartCount"] == 2


def test_stale_cache_counts_the_same_failed_pod_once():
    sim = Sim(mxjob(replicas={"Worker": {"replicas": 1, "restartPolicy": "ExitCode"}},
                    runPolicy={"backoffLimit": 5}))
    step(sim)
    sim.run()
    step(sim)
    sim.set_phase("mx-worker-0", "Failed", exit_code=137)
    stale = sim.request()
    delete_then_recreate(sim, "mx-worker-0")
    # Metacontroller's cache may show the deleted pod again; that must not count twice.
    stale["parent"]["status"] = sim.status
    answer = sync_mxjob(stale, now=sim.now)
    assert answer["status"]["restartCount"] == 1
    assert answer["status"]["restartHistory"] == sim.status["restartHistory"]
    # The same record again (create-once: nothing new), not a second one.
    assert [c["metadata"]["name"] for c in answer["children"] if "-restart-" in c["metadata"]["name"]] == [
        "mx-worker-0-restart-1"]


def test_in_place_container_restarts_count_toward_backoff_limit():
    sim = Sim(mxjob(replicas={"Worker": {"replicas": 1, "restartPolicy": "OnFailure"}},
                    runPolicy={"backoffLimit": 2}))
    step(sim)
    sim.set_phase("mx-worker-0", "Running", restarts=2)
    step(sim)
    assert sim.state() == "Running"
    sim.set_phase("mx-worker-0", "Running", restarts=3, last_exit_code=1)
    step(sim)
    assert sim.state() == "Failed"
    assert "backoff limit" in sim.condition("Failed")["message"]
    # The pod restarted in place is the loss named, with its previous run's exit code.
    assert sim.condition("Failed")["message"].endswith("backoffLimit 2; pod mx-worker-0 was lost (exit code 1).")
    assert pods(sim) == []  # cleanPodPolicy Running frees the running pod


def test_evicted_pod_under_onfailure_is_recreated_not_a_failure():
    sim = Sim(mxjob(replicas={"Worker": {"replicas": 1, "restartPolicy": "OnFailure"}}))
    step(sim)
    sim.run()
    step(sim)
    sim.set_phase("mx-worker-0", "Failed")
    delete_then_recreate(sim, "mx-worker-0")
    assert sim.state() == "Restarting"
    assert "pod mx-worker-0 ended with no exit code and is recreated" in sim.condition("Restarting")["message"]


def test_deadline_fires_on_time_without_another_event():
    sim = Sim(mxjob(runPolicy={"activeDeadlineSeconds": 100}))
    answer = step(sim)
    assert answer["resyncAfterSeconds"] == 100
    sim.run()
    sim.tick(40)
    answer = step(sim)
    assert answer["resyncAfterSeconds"] == 60
    sim.tick(60)  # nothing else happened: only the requested resync arrives
    step(sim)
    assert sim.state() == "Failed"
    assert "activeDeadlineSeconds" in sim.condition("Failed")["message"]
    assert sim.status["completionTime"] == "2026-11-21T10:01:40Z"
    assert pods(sim) == []


def test_suspend_then_resume():
    sim = Sim(mxjob())
    step(sim)
    sim.run()
    step(sim)
    started = sim.status["startTime"]
    sim.tick(30)
    sim.edit({"runPolicy": {"suspend": True}})
    step(sim)
    assert sim.state() == "Suspended"
    assert pods(sim) == [] and sim.services == {}
    # The cluster map (the job may get pods again) and when it was suspended (no child is left to say so).
    assert sorted(sim.config_maps) == ["mx-cluster", "mx-suspension"]
    assert json.loads(sim.config_maps["mx-suspension"]["data"]["record"]) == {"suspendedAt": "2026-11-21T10:00:30Z"}
    assert sim.condition("Running")["status"] == "False"
    assert sim.status["startTime"] == started
    sim.tick(30)
    sim.edit({"runPolicy": {"suspend": False}})
    step(sim)
    assert sorted(sim.config_maps) == ["mx-cluster"]
    assert sim.condition("Suspended") == {**sim.condition("Suspended"), "status": "False",
                                          "reason": "MXJobResumed"}
    assert sim.status["startTime"] == "2026-11-21T10:01:00Z"
    assert len(sim.pods) == 4
    sim.run()
    step(sim)
    assert sim.state() == "Running"
    finish_ok(sim, "mx-scheduler-0")
    step(sim)
    sim.tick(30)  # the others' grace
    step(sim)
    assert sim.state() == "Succeeded"


def test_job_created_suspended_has_no_start_time():
    sim = Sim(mxjob(runPolicy={"suspend": True}))
    step(sim)
    assert sim.state() == "Suspended"
    assert "startTime" not in sim.status
    assert sim.pods == {}


def test_ttl_deletes_every_child_after_finishing():
    sim = Sim(mxjob(replicas={"Worker": 1}, runPolicy={"ttlSecondsAfterFinished": 300,
                                                        "cleanPodPolicy": "None"}))
    step(sim)
    sim.run()
    step(sim)
    sim.tick(10)
    finish_ok(sim, "mx-worker-0")
    answer = step(sim)
    assert sim.state() == "Succeeded"
    assert pods(sim) == ["mx-worker-0"]
    assert answer["resyncAfterSeconds"] == 300
    assert list(sim.config_maps) == ["mx-cluster", "mx-outcome"]
    sim.tick(300)
    step(sim)
    # The outcome record stays: it is what keeps the job from running again.
    assert sim.pods == {} and sim.services == {} and list(sim.config_maps) == ["mx-outcome"]
    assert sim.status["cleanedUpTime"] == "2026-11-21T10:05:10Z"
    assert sim.state() == "Succeeded"


def test_mxtune_succeeds_when_the_tuner_succeeds():
    sim = Sim(mxjob(jobMode="MXTune", replicas={"TunerTracker": 1, "TunerServer": 2, "Tuner": 1}))
    step(sim)
    sim.run()
    step(sim)
    assert sim.state() == "Running"
    finish_ok(sim, "mx-tuner-0")
    step(sim)
    sim.tick(30)  # the others' grace
    step(sim)
    assert sim.state() == "Succeeded"
    assert "Tuner 0" in sim.condition("Succeeded")["message"]


def test_worker_only_job_runs_and_succeeds_when_all_workers_succeed():
    sim = Sim(mxjob(replicas={"Worker": 2}))
    step(sim)
    sim.run()
    step(sim)
    assert sim.state() == "Running"
    finish_ok(sim, "mx-worker-0")
    step(sim)
    assert sim.state() == "Running"
    finish_ok(sim, "mx-worker-1")
    step(sim)
    assert sim.state() == "Succeeded"


def test_succeeded_worker_whose_pod_disappears_is_not_rerun():
    sim = Sim(mxjob())
    step(sim)
    sim.run()
    step(sim)
    finish_ok(sim, "mx-worker-0")
    step(sim)
    assert sim.status["replicaStatuses"]["Worker"]["completedIndexes"] == "0"
    sim.gc("mx-worker-0")
    created = len(sim.created)
    step(sim)
    assert "mx-worker-0" not in sim.pods
    assert len(sim.created) == created
    assert sim.status["replicaStatuses"]["Worker"]["succeeded"] == 1


def test_deleted_running_pod_is_recreated():
    sim = Sim(mxjob())
    step(sim)
    sim.run()
    step(sim)
    sim.gc("mx-server-0")
    step(sim)
    assert sim.pods["mx-server-0"]["status"]["phase"] == "Pending"
    assert sim.state() == "Running"


def test_finished_job_never_creates_a_pod():
    sim = Sim(mxjob(replicas={"Worker": 1}, runPolicy={"cleanPodPolicy": "All"}))
    step(sim)
    sim.run()
    step(sim)
    finish_ok(sim, "mx-worker-0")
    step(sim)
    assert sim.pods == {}
    created = len(sim.created)
    for _ in range(3):
        sim.tick(100)
        step(sim)
    assert len(sim.created) == created


def test_invalid_edit_on_running_job_keeps_children_and_reports():
    sim = Sim(mxjob())
    step(sim)
    sim.run()
    step(sim)
    before = {n: p["metadata"]["uid"] for n, p in sim.pods.items()}
    status_before = dict(sim.status)
    sim.edit({"mxReplicaSpecs": {"Worker": {"replicas": -1}}})
    answer = step(sim)
    assert {n: p["metadata"]["uid"] for n, p in sim.pods.items()} == before
    assert len(sim.services) == 4
    assert "spec.mxReplicaSpecs.Worker.replicas" in sim.status["specError"]
    assert sim.status["conditions"] == status_before["conditions"]
    assert len(answer["children"]) == 9
    kept = next(c for c in answer["children"] if c["kind"] == "ConfigMap")
    assert json.loads(sim.config_maps["mx-cluster"]["metadata"]["annotations"][LAST_APPLIED]) == kept


def test_a_running_job_gets_one_cluster_config_map_that_is_never_rewritten():
    sim = Sim(mxjob())
    first = step(sim)
    assert [c["kind"] for c in first["children"]].count("ConfigMap") == 1
    sim.run()
    step(sim)
    assert sim.created.count("ConfigMap/mx-cluster") == 1
    assert not any(d.startswith("ConfigMap/") for d in sim.deleted)


def test_an_edited_cluster_config_map_is_reported_not_acted_on():
    sim = Sim(mxjob())
    step(sim)
    sim.run()
    step(sim)
    sim.change("v1", "ConfigMap", "mx-cluster", lambda cm: cm["data"].update(cluster='{"worker":[]}'))
    answer = step(sim)
    assert "changed after the job's pods were created" in sim.status["specError"]
    assert sorted(c["metadata"]["name"] for c in answer["children"] if c["kind"] == "Pod") == pods(sim)
    assert len(sim.pods) == 4


def test_invalid_new_job_fails_validation_without_children():
    parent = mxjob(replicas={"Worker": {"replicas": 1, "template": {"spec": {"containers": [
        {"name": "main", "image": "x"}]}}}})
    sim = Sim(parent)
    answer = step(sim)
    assert answer["children"] == []
    failed = sim.condition("Failed")
    assert failed["reason"] == "MXJobFailedValidation"
    assert 'no container named "mxnet"' in failed["message"]
    assert sim.state() == "Failed"
    assert "completionTime" in sim.status


@pytest.mark.parametrize("policy,kept", [
    ("All", []),
    ("Running", ["mx-worker-0"]),
    ("None", ["mx-scheduler-0", "mx-server-0", "mx-worker-0", "mx-worker-1"]),
], ids=["all-deletes-every-pod", "running-keeps-finished-pods", "none-keeps-everything"])
def test_clean_pod_policy_on_failure(policy, kept):
    sim = Sim(mxjob(cleanPodPolicy=policy))  # the mxnet-operator inline layout
    step(sim)
    sim.run()
    step(sim)
    sim.set_phase("mx-worker-0", "Failed", exit_code=1)
    step(sim)
    assert sim.state() == "Failed"
    assert pods(sim) == kept
    assert sorted(sim.services) == kept
    # The cluster map goes with the last pod: nothing can read it any more.
    assert list(sim.config_maps) == (["mx-cluster"] if kept else []) + ["mx-outcome"]


def test_workers_that_finish_after_the_scheduler_are_counted():
    sim = Sim(mxjob(cleanPodPolicy="None"))
    step(sim)
    sim.run()
    step(sim)
    finish_ok(sim, "mx-scheduler-0")
    step(sim)
    assert sim.state() == "Running"
    finish_ok(sim, "mx-worker-0", "mx-worker-1")
    step(sim)
    sim.tick(30)
    step(sim)
    assert sim.state() == "Succeeded"
    assert sim.status["replicaStatuses"]["Worker"] == {
        "active": 0, "succeeded": 2, "failed": 0, "completedIndexes": "0-1"}
    # Frozen from here on: the server, still running under cleanPodPolicy None, counted as succeeded.
    frozen = sim.status["replicaStatuses"]
    assert frozen["Server"] == {"active": 0, "succeeded": 1, "failed": 0, "completedIndexes": "0"}
    finish_ok(sim, "mx-server-0", code=1)
    step(sim)
    assert sim.status["replicaStatuses"] == frozen and sim.state() == "Succeeded"


@pytest.mark.parametrize("workers", [1, 3], ids=["fewer-workers", "more-workers"])
def test_replica_edit_that_got_past_admission_changes_nothing(workers):
    sim = Sim(mxjob())
    step(sim)
    sim.run()
    step(sim)
    before = {n: p["metadata"]["uid"] for n, p in sim.pods.items()}
    sim.edit({"mxReplicaSpecs": {**sim.parent["spec"]["mxReplicaSpecs"],
                                 "Worker": {**sim.parent["spec"]["mxReplicaSpecs"]["Worker"],
                                            "replicas": workers}}})
    step(sim)
    assert {n: p["metadata"]["uid"] for n, p in sim.pods.items()} == before
    assert "changed after the job's pods were created" in sim.status["specError"]
    assert sim.state() == "Running"


@pytest.mark.parametrize("policy", ["All", "Running", "None"])
def test_replica_counts_are_frozen_at_the_end_through_cleanup_and_ttl(policy):
    # Argo's conditions (written for training-operator) read status.replicaStatuses.Worker.failed
    # after the job has ended: cleanup and the TTL must not zero them.
    sim = Sim(mxjob(runPolicy={"cleanPodPolicy": policy, "ttlSecondsAfterFinished": 60}))
    step(sim)
    sim.run()
    step(sim)
    finish_ok(sim, "mx-worker-1", code=1)
    step(sim)
    assert sim.state() == "Failed"
    frozen = sim.status["replicaStatuses"]
    # Pods the policy stops are no longer active; under None they keep running, and count.
    assert frozen["Worker"] == {"active": 1 if policy == "None" else 0, "succeeded": 0, "failed": 1}
    sim.tick(60)
    step(sim)
    assert sim.pods == {} and sim.status["cleanedUpTime"]
    assert sim.status["replicaStatuses"] == frozen


def test_a_retryable_exit_within_the_success_grace_is_neither_recreated_nor_counted():
    sim = Sim(mxjob(replicas={"Scheduler": 1, "Server": 1, "Worker": {"replicas": 2, "restartPolicy": "ExitCode"}}))
    step(sim)
    sim.run()
    step(sim)
    finish_ok(sim, "mx-scheduler-0", "mx-worker-0")
    step(sim)
    finish_ok(sim, "mx-worker-1", code=137)
    created = len(sim.created)
    step(sim)
    assert sim.state() == "Running" and "restartCount" not in sim.status  # still waiting for the server
    sim.tick(30)
    step(sim)
    assert sim.state() == "Succeeded" and "restartCount" not in sim.status
    assert [c for c in sim.created[created:] if c.startswith("Pod/") or "-restart-" in c] == []


@pytest.mark.parametrize("text", ["not json", "[1]", '{"conditions": "x"}'])
def test_an_unreadable_outcome_record_still_means_finished(text):
    # Only the hook writes it, so a damaged record is a damaged object: the job has an outcome it
    # cannot read, and a rerun would be the worse mistake.
    sim = Sim(mxjob(replicas={"Worker": 1}))
    step(sim)
    sim.run()
    step(sim)
    created = len(sim.created)
    sim.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "mx-outcome"}, "data": {"record": text}})
    sim.gc("mx-worker-0")
    step(sim)
    assert sim.state() == "Failed"
    assert "outcome record that cannot be read" in sim.condition("Failed")["message"]
    assert len([c for c in sim.created[created:] if c.startswith("Pod/")]) == 0


# --- whole-job restarts (runPolicy.failurePolicy, docs/lifecycle.md "Restarts") -------------------


def attempt_of(pod: dict) -> str:
    env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
    return env["MXJOB_ATTEMPT"]


def dist_job(policy: str = "ExitCode", **run_policy) -> dict:
    every = {"restartPolicy": policy}
    return mxjob(replicas={"Scheduler": {"replicas": 1, **every}, "Server": {"replicas": 1, **every},
                           "Worker": {"replicas": 2, **every}}, runPolicy={"backoffLimit": 3, **run_policy})


def restart_whole_job(sim: Sim, attempt: int) -> None:
    """The three syncs of a whole-job restart, as delete_then_recreate's: the attempt's record is
    created (no pod goes yet), the sync that sees it leaves every pod out that has not succeeded
    (Metacontroller deletes them), and the next creates them all again for the new attempt (a
    fixed point)."""
    uids = {n: p["metadata"]["uid"] for n, p in sim.pods.items()}
    since = len(sim.created)
    sim.sync()
    assert new_records(sim, since, f"-attempt-{attempt}") and sim.state() == "Restarting"
    assert {n: p["metadata"]["uid"] for n, p in sim.pods.items()} == uids
    sim.sync()
    assert sim.state() == "Restarting"
    kept = {n for n, p in sim.pods.items() if p.get("status", {}).get("phase") == "Succeeded"}
    assert set(sim.pods) == kept
    step(sim)
    assert all(sim.pods[n]["metadata"]["uid"] != uids[n] for n in sim.pods if n not in kept)
    for name, pod in sim.pods.items():
        if name not in kept:
            assert attempt_of(pod) == str(attempt)
            assert pod["metadata"]["labels"]["training.kubeflow.org/job-attempt"] == str(attempt)


def test_a_lost_worker_restarts_the_whole_distributed_job_then_it_succeeds():
    sim = Sim(dist_job())
    step(sim)
    assert all(attempt_of(p) == "0" for p in sim.pods.values())
    sim.run()
    step(sim)
    sim.tick(10)
    sim.set_phase("mx-worker-1", "Failed", exit_code=137, reason="Error")
    restart_whole_job(sim, 1)
    message = sim.condition("Restarting")["message"]
    assert "attempt 1" in message and "pod mx-worker-1 was lost (exit code 137, killed by SIGKILL, reason Error)" in message
    assert sim.status["attempt"] == 1 and sim.status["restartCount"] == 1
    sim.run()
    step(sim)
    assert sim.state() == "Running" and sim.condition("Restarting")["status"] == "False"
    finish_ok(sim, "mx-worker-0", "mx-worker-1", "mx-scheduler-0", "mx-server-0")
    step(sim)
    assert sim.state() == "Succeeded" and sim.status["attempt"] == 1 and sim.status["restartCount"] == 1


@pytest.mark.parametrize("lost", ["mx-scheduler-0", "mx-server-0", "mx-worker-0"])
def test_any_lost_pod_under_onfailure_restarts_the_whole_job_counted_once(lost):
    sim = Sim(dist_job("OnFailure"))
    step(sim)
    sim.run()
    step(sim)
    # The kubelet restarted the container in place: ps-lite would never admit it again.
    sim.set_phase(lost, "Running", restarts=1, last_exit_code=137, reason="Error")
    restart_whole_job(sim, 1)
    assert (f"pod {lost} was lost (exit code 137, killed by SIGKILL, reason Error)"
            in sim.condition("Restarting")["message"])
    sim.run()
    step(sim)
    assert sim.state() == "Running" and sim.status["restartCount"] == 1


def test_a_peer_that_fails_while_the_job_restarts_does_not_fail_it():
    sim = Sim(dist_job())
    step(sim)
    sim.run()
    step(sim)
    sim.set_phase("mx-server-0", "Failed", exit_code=137)
    sim.sync()  # attempt 1 recorded
    sim.set_phase("mx-worker-0", "Failed", exit_code=1)  # a peer of the lost server gives up
    sim.sync()
    assert sim.state() == "Restarting" and "mx-worker-0" not in sim.pods
    step(sim)
    assert sim.state() == "Restarting" and all(attempt_of(p) == "1" for p in sim.pods.values())


def test_a_stale_parent_cannot_make_the_hook_forget_the_attempt():
    sim = Sim(dist_job())
    step(sim)
    sim.run()
    step(sim)
    before = sim.parent["status"]
    sim.set_phase("mx-worker-1", "Failed", exit_code=143)
    sim.sync()
    sim.set_parent_status(before)  # the status of before the restart, with the record observed
    sim.sync()
    assert sim.status["attempt"] == 1 and sim.status["restartCount"] == 1
    assert sim.pods == {}
    step(sim)
    assert sorted(sim.pods) == ["mx-scheduler-0", "mx-server-0", "mx-worker-0", "mx-worker-1"]
    assert all(attempt_of(p) == "1" for p in sim.pods.values())


def test_backoff_limit_counts_each_whole_job_restart_once():
    sim = Sim(dist_job(backoffLimit=1))
    step(sim)
    sim.run()
    step(sim)
    sim.set_phase("mx-worker-0", "Failed", exit_code=137)
    restart_whole_job(sim, 1)
    sim.run()
    step(sim)
    sim.set_phase("mx-scheduler-0", "Failed", exit_code=137)
    step(sim)
    assert sim.state() == "Failed"
    assert sim.condition("Failed")["message"] == (
        "MXJob ns/mx has reached the specified backoff limit: 2 restarts, backoffLimit 1; "
        "pod mx-scheduler-0 was lost (exit code 137, killed by SIGKILL).")
    assert sim.status["attempt"] == 1


def test_max_restarts_is_a_budget_of_its_own():
    sim = Sim(dist_job(failurePolicy={"maxRestarts": 0}))
    step(sim)
    sim.run()
    step(sim)
    sim.set_phase("mx-worker-1", "Failed", exit_code=137, reason="OOMKilled", message="out of memory\nmore")
    step(sim)
    assert sim.state() == "Failed"
    assert sim.condition("Failed")["message"] == (
        "MXJob ns/mx has reached failurePolicy.maxRestarts (0): pod mx-worker-1 was lost "
        "(exit code 137, killed by SIGKILL, reason OOMKilled: 'out of memory').")


def test_rules_pick_the_action_by_replica_type_and_exit_code():
    rules = [{"action": "FailJob", "onExitCodes": [138]},
             {"action": "RestartPod", "onReplicaTypes": ["Worker"]}]
    sim = Sim(dist_job(failurePolicy={"rules": rules}))
    step(sim)
    sim.run()
    step(sim)
    sim.set_phase("mx-worker-1", "Failed", exit_code=137)
    delete_then_recreate(sim, "mx-worker-1")  # RestartPod: only that pod
    assert "attempt" not in sim.status
    sim.run()
    step(sim)
    sim.set_phase("mx-server-0", "Failed", exit_code=138)
    step(sim)
    assert sim.state() == "Failed"
    assert "failurePolicy says FailJob" in sim.condition("Failed")["message"]


def test_a_single_process_job_keeps_pod_level_restarts():
    sim = Sim(mxjob(replicas={"Worker": {"replicas": 1, "restartPolicy": "ExitCode"}}))
    step(sim)
    sim.run()
    step(sim)
    sim.set_phase("mx-worker-0", "Failed", exit_code=137)
    delete_then_recreate(sim, "mx-worker-0")
    assert "attempt" not in sim.status and attempt_of(sim.pods["mx-worker-0"]) == "0"


def test_a_succeeded_index_is_not_rerun_by_a_whole_job_restart():
    sim = Sim(dist_job())
    step(sim)
    sim.run()
    step(sim)
    finish_ok(sim, "mx-worker-0")
    sim.set_phase("mx-worker-1", "Failed", exit_code=137)
    restart_whole_job(sim, 1)
    assert sim.pods["mx-worker-0"]["status"]["phase"] == "Succeeded"
    assert attempt_of(sim.pods["mx-worker-0"]) == "0"


def test_a_distributed_job_under_restart_pod_says_it_may_be_stalled():
    sim = Sim(dist_job(failurePolicy={"rules": [{"action": "RestartPod"}]}))
    step(sim)
    sim.run()
    step(sim)
    assert sim.condition("Running")["reason"] == "MXJobRunning"
    sim.set_phase("mx-server-0", "Failed", exit_code=137)
    delete_then_recreate(sim, "mx-server-0")
    sim.run("mx-server-0")
    step(sim)
    running = sim.condition("Running")
    assert (running["status"], running["reason"]) == ("True", "MXJobStalled")
    assert running["message"].startswith("MXJob ns/mx may make no progress: pod mx-server-0 restarted while")


def test_a_peer_that_aborts_after_the_restart_was_decided_is_part_of_the_same_restart():
    sim = Sim(dist_job())
    step(sim)
    sim.run()
    step(sim)
    sim.set_phase("mx-scheduler-0", "Failed", exit_code=137)
    sim.sync()  # attempt 1 decided (status.attempt 1) ...
    sim.remove("v1", "ConfigMap", "mx-attempt-1")  # ... and the next sync's children lack its record
    sim.set_phase("mx-worker-0", "Failed", exit_code=134)  # ps-lite's check failed: SIGABRT
    sim.sync()
    assert sim.state() == "Restarting", sim.condition("Failed")
    assert "pod mx-scheduler-0 was lost (exit code 137, killed by SIGKILL)" in sim.condition("Restarting")["message"]


def test_a_pod_level_restart_says_the_reason_and_message_too():
    sim = Sim(mxjob(replicas={"Worker": {"replicas": 1, "restartPolicy": "ExitCode"}}))
    step(sim)
    sim.run()
    step(sim)
    sim.set_phase("mx-worker-0", "Failed", exit_code=137, reason="OOMKilled", message="killed at step 40\nmore")
    delete_then_recreate(sim, "mx-worker-0")
    assert ("pod mx-worker-0 ended with exit code 137, killed by SIGKILL, reason OOMKilled: 'killed at step 40' "
            "and is recreated" in sim.condition("Restarting")["message"])


def test_an_evicted_pod_names_its_reason():
    sim = Sim(mxjob(replicas={"Scheduler": 1, "Server": 1, "Worker": 1}))
    step(sim)
    sim.run()
    step(sim)
    sim.set_phase("mx-worker-0", "Failed", pod_reason="Evicted")
    step(sim)
    assert "failed with no exit code, reason Evicted; restartPolicy Never" in sim.condition("Failed")["message"]


NO_ROOM = ("0/1 nodes are available: 1 Insufficient cpu. preemption: 0/1 nodes are available: 1 No preemption "
           "victims found for incoming pod.")


def unschedulable(sim: Sim, name: str, message: str = NO_ROOM, reason: str = "Unschedulable") -> None:
    """The scheduler cannot place a pod: it stays Pending, PodScheduled False with the scheduler's words."""
    sim.write_status("v1", "Pod", name, {"phase": "Pending", "conditions": [
        {"type": "PodScheduled", "status": "False", "reason": reason, "message": message}]})


WAITS = ("it waits for the scheduler: pod mx-worker-0 is not scheduled: 0/1 nodes are available: 1 Insufficient "
         "cpu. preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod.")


@pytest.mark.parametrize(("running", "state"), [
    pytest.param((), "Created", id="nothing-runs-yet"),
    pytest.param(("mx-scheduler-0", "mx-server-0", "mx-worker-1"), "Running", id="the-deciding-scheduler-runs"),
])
def test_a_job_whose_pod_does_not_fit_says_it_waits_for_the_scheduler_and_why(running, state):
    sim = Sim(mxjob())
    step(sim)
    if running:
        sim.run(*running)
    unschedulable(sim, "mx-worker-0")
    step(sim)
    assert sim.state() == state
    assert sim.condition(state)["message"] == f"MXJob ns/mx is {state.lower()}; {WAITS}"
    sim.run()  # placed at last: the wait is over, and the message says so
    step(sim)
    assert sim.condition("Created")["message"] == "MXJob ns/mx is created."
    assert sim.condition("Running")["message"] == "MXJob ns/mx is running."


def test_pods_waiting_for_the_same_reason_are_named_together_and_a_gate_is_a_reason():
    sim = Sim(mxjob())
    step(sim)
    for name in ("mx-scheduler-0", "mx-server-0", "mx-worker-0"):
        unschedulable(sim, name, "Scheduling is blocked due to non-empty scheduling gates", reason="SchedulingGated")
    unschedulable(sim, "mx-worker-1")
    step(sim)
    assert sim.condition("Created")["message"] == (
        "MXJob ns/mx is created; it waits for the scheduler: pods mx-scheduler-0, mx-server-0, mx-worker-0 are "
        "not scheduled: Scheduling is blocked due to non-empty scheduling gates; and 1 more.")


def test_the_deadline_that_ends_a_job_waiting_for_room_names_the_pods_not_scheduled():
    sim = Sim(mxjob(runPolicy={"activeDeadlineSeconds": 60}))
    step(sim)
    sim.run("mx-scheduler-0", "mx-server-0", "mx-worker-1")
    unschedulable(sim, "mx-worker-0")
    step(sim)
    sim.tick(60)
    step(sim)
    assert sim.state() == "Failed"
    assert sim.condition("Failed")["message"] == (
        "MXJob ns/mx was active longer than activeDeadlineSeconds (60 s) and is stopped; no pod was lost; pod "
        "mx-worker-0 is not scheduled: 0/1 nodes are available: 1 Insufficient cpu. preemption: 0/1 nodes are "
        "available: 1 No preemption victims found for incoming pod.")
