"""How a pod ended, as both kinds quote it: hooks.shared.termination and the MXJob pod view over it.

A disrupted pod (preempted, evicted through the API, deleted by the taint manager, terminated by
the kubelet) shows only a kill by signal in its container; its DisruptionTarget condition says why,
so that reason and its message are what the Restarting and Failed conditions quote. A pod Kueue
stops carries TerminationTarget instead (its restart: tests/mxjob/test_kueue_evictions.py).
"""
from __future__ import annotations

import pytest
from helpers.mcsim import Sim, mxjob

from hooks.mxjob.observed import Slot, view_pods
from hooks.shared.termination import MAX_MESSAGE, Said, end_of, first_line, queue_eviction

DISRUPTION_REASONS = ("PreemptionByScheduler", "EvictionByEvictionAPI", "DeletionByTaintManager", "TerminationByKubelet")


def pod_status(*, disruption: tuple[str, str] | None = None, disruption_status: str = "True",
               pod_reason: str | None = None, pod_message: str | None = None,
               container: dict | None = None) -> dict:
    status: dict = {"phase": "Failed", "containerStatuses": [
        {"name": "mxnet", "restartCount": 0,
         "state": {"terminated": container or {"exitCode": 137, "reason": "Error"}}}]}
    if disruption is not None:
        status["conditions"] = [
            {"type": "Ready", "status": "False", "reason": "PodFailed"},
            {"type": "DisruptionTarget", "status": disruption_status, "reason": disruption[0], "message": disruption[1]}]
    if pod_reason is not None:
        status["reason"] = pod_reason
    if pod_message is not None:
        status["message"] = pod_message
    return status


def view(status: dict):
    pod = {"metadata": {"name": "mx-worker-0", "uid": "u1"}, "status": status}
    return view_pods({"mx-worker-0": Slot("Worker", 0)}, {"mx-worker-0": pod})["mx-worker-0"]


@pytest.mark.parametrize("reason", DISRUPTION_REASONS)
def test_a_disrupted_pod_reads_as_its_disruption_reason_and_message(reason):
    seen = view(pod_status(disruption=(reason, f"{reason} happened\nsecond line")))
    assert (seen.reason, seen.message, seen.exit_code) == (reason, f"{reason} happened", 137)


def test_the_disruption_wins_over_the_pods_own_reason_and_the_containers():
    # The kubelet's eviction under node pressure sets both: the pod says Evicted, the condition why.
    status = pod_status(disruption=("TerminationByKubelet", "The node was low on resource: memory."),
                        pod_reason="Evicted", pod_message="evicted", container={"exitCode": 137, "reason": "OOMKilled",
                                                                                 "message": "oom"})
    assert (view(status).reason, view(status).message) == ("TerminationByKubelet", "The node was low on resource: memory.")


def test_a_disruption_that_is_not_true_or_has_no_reason_is_ignored():
    assert view(pod_status(disruption=("PreemptionByScheduler", "m"), disruption_status="False")).reason == "Error"
    assert view(pod_status(disruption=("", "m"))).reason == "Error"


def test_a_disruption_without_a_message_keeps_the_next_message():
    status = pod_status(disruption=("EvictionByEvictionAPI", ""), container={"exitCode": 143, "message": "bye\n"})
    assert (view(status).reason, view(status).message) == ("EvictionByEvictionAPI", "bye")


def test_without_a_disruption_the_pod_reason_comes_before_the_containers():
    assert view(pod_status(pod_reason="Evicted", pod_message="low on memory")).reason == "Evicted"
    assert view(pod_status(pod_reason="Evicted", pod_message="low on memory")).message == "low on memory"
    assert view(pod_status(container={"exitCode": 137, "reason": "OOMKilled"})).reason == "OOMKilled"


def test_reasons_and_messages_are_bounded_first_lines():
    long = "x" * 1000
    status = pod_status(disruption=("PreemptionByScheduler" + "y" * 100, "\n\n  " + long + "\nnext"))
    reason, said = end_of(status, {})
    assert reason is not None and len(reason) == 64 and reason.endswith("…")
    # A message Kubernetes wrote (the condition's) is quoted by its first line, never as a log line.
    assert said is not None and not said.log
    assert len(said.text) == MAX_MESSAGE and said.text.startswith("xxx") and said.text.endswith("…")
    assert first_line("  \n \n", 10) is None and first_line(7, 10) is None


def test_malformed_conditions_read_as_none():
    assert end_of({"conditions": "nope"}, None) == (None, None)
    assert end_of({"conditions": [None, 3, {"type": "DisruptionTarget", "status": "True", "reason": 5}]}, None) == (None, None)


PREEMPTED = ("PreemptionByScheduler", "default-scheduler: preempting to accommodate a higher priority pod")


def preempt(sim: Sim, name: str, *, phase: str = "Running") -> None:
    """What kube-scheduler does to a victim: DisruptionTarget on it, then its deletion; the kubelet
    then stops it (phase Failed, the container killed by SIGTERM) before it is gone."""
    state = {"running": {}} if phase == "Running" else {"terminated": {"exitCode": 143, "reason": "Error"}}
    sim.write_status("v1", "Pod", name, {"phase": phase, "conditions": [
        {"type": "DisruptionTarget", "status": "True", "reason": PREEMPTED[0], "message": PREEMPTED[1]}],
        "containerStatuses": [{"name": "mxnet", "restartCount": 0, "state": state}]})
    if not sim.pods[name]["metadata"].get("deletionTimestamp"):
        sim.terminating(name)


@pytest.mark.parametrize("policy", ["Never", "ExitCode", "OnFailure"])
def test_a_preempted_worker_of_a_failed_pod_restarts_the_distributed_job_whatever_its_policy(policy):
    """A disruption is not the pod's failure: even under Never it is retried (counted, docs/lifecycle.md)."""
    sim = Sim(mxjob(replicas={"Scheduler": 1, "Server": 1, "Worker": {"replicas": 1, "restartPolicy": policy}}))
    sim.sync()
    sim.run()
    sim.sync()
    status = pod_status(disruption=("PreemptionByScheduler", "Preempted by a pod on node node-1"),
                        container={"exitCode": 137, "reason": "Error", "finishedAt": "2024-01-01T00:00:00Z"})
    sim.write_status("v1", "Pod", "mx-worker-0", status)
    sim.sync()
    assert sim.condition("Failed") is None
    message = sim.condition("Restarting")["message"]
    assert "is restarting as attempt 1: pod mx-worker-0 was lost (exit code 137, killed by SIGKILL, reason " \
        "PreemptionByScheduler: 'Preempted by a pod on node node-1')" in message, message


@pytest.mark.parametrize("seen_as", ["running", "stopped"])
def test_a_worker_preempted_while_it_goes_restarts_the_job_as_a_new_attempt_naming_the_preemption(seen_as):
    """The victim is terminating: lost as it goes, the same whether the sync sees it still running or stopped."""
    sim = Sim(mxjob(replicas={"Scheduler": 1, "Server": 1, "Worker": 2}))
    sim.sync()
    sim.run()
    sim.sync()
    preempt(sim, "mx-worker-1", phase="Running" if seen_as == "running" else "Failed")
    sim.sync()
    restarting = sim.condition("Restarting")
    assert restarting is not None and restarting["status"] == "True"
    assert restarting["message"] == (
        "MXJob ns/mx is restarting as attempt 1: pod mx-worker-1 was lost (no exit code, reason "
        f"PreemptionByScheduler: '{PREEMPTED[1]}'); every pod that has not succeeded is deleted and created again "
        "with MXJOB_ATTEMPT=1 (restarts so far: 1).")
    if seen_as == "running":  # the kubelet stops it: nothing changes
        preempt(sim, "mx-worker-1", phase="Failed")
        sim.sync()
        assert sim.condition("Restarting")["message"] == restarting["message"]
    for _ in range(3):  # the old attempt goes (the victim with it), the new one comes
        for name, pod in sim.pods.items():
            if pod["metadata"].get("deletionTimestamp"):
                sim.gc(name)
        sim.sync()
    assert {p["metadata"]["labels"].get("training.kubeflow.org/job-attempt") for p in sim.pods.values()} == {"1"}
    assert sim.status["restartCount"] == 1


def test_a_preempted_worker_of_a_worker_only_job_under_never_is_recreated_alone_naming_the_preemption():
    sim = Sim(mxjob(replicas={"Worker": 2}))
    sim.sync()
    sim.run()
    sim.sync()
    preempt(sim, "mx-worker-0")
    sim.sync()
    assert sim.condition("Failed") is None
    message = sim.condition("Restarting")["message"]
    assert message == ("MXJob ns/mx is restarting: pod mx-worker-0 ended with no exit code, reason PreemptionByScheduler: "
                       f"'{PREEMPTED[1]}' and is recreated (restarts so far: 1).")
    assert sim.status.get("attempt", 0) == 0  # the pod alone, not the job


def test_a_pod_deleted_by_someone_else_without_a_disruption_is_not_lost():
    sim = Sim(mxjob(replicas={"Scheduler": 1, "Server": 1, "Worker": 1}))
    sim.sync()
    sim.run()
    sim.sync()
    sim.terminating("mx-worker-0")
    sim.set_phase("mx-worker-0", "Failed", exit_code=143)  # the kubelet's terminal phase before it is gone
    sim.sync()
    assert sim.condition("Restarting") is None and sim.condition("Failed") is None
    assert sim.status.get("restartCount", 0) == 0


def test_an_evicted_worker_names_the_eviction_in_the_restarting_condition():
    sim = Sim(mxjob(replicas={"Worker": {"replicas": 1, "restartPolicy": "ExitCode"}}))
    sim.sync()
    sim.run()
    sim.sync()
    status = pod_status(disruption=("EvictionByEvictionAPI", "Eviction API: evicting"),
                        container={"exitCode": 143, "reason": "Error", "finishedAt": "2024-01-01T00:00:00Z"})
    sim.write_status("v1", "Pod", "mx-worker-0", status)
    sim.sync()
    message = sim.condition("Restarting")["message"]
    assert ("pod mx-worker-0 ended with exit code 143, killed by SIGTERM, reason EvictionByEvictionAPI: "
            "'Eviction API: evicting' and is recreated") in message, message


def test_the_servers_decoder_keeps_the_disruption_for_the_view():
    import json

    from hooks.mxjob.sync import OBSERVED_FIELDS
    from hooks.server.wire import RequestDecoder

    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "mx-worker-0", "uid": "u1"},
           "status": pod_status(disruption=("PreemptionByScheduler", "Preempted"))}
    body = json.dumps({"parent": {}, "children": {"Pod.v1": {"mx-worker-0": pod}}}).encode()
    decoded = RequestDecoder(OBSERVED_FIELDS).decode(body)["children"]["Pod.v1"]["mx-worker-0"]
    assert view(dict(decoded["status"])).reason == "PreemptionByScheduler"


KUEUE_STOP = {"type": "TerminationTarget", "status": "True", "reason": "WorkloadEvictedDueToPreempted",
              "message": "Preempted to accommodate a workload (UID: 7f3c) due to prioritization in the ClusterQueue\nmore"}


@pytest.mark.parametrize("also_disrupted", [False, True], ids=["kueue-alone", "with-a-disruption"])
def test_a_pod_kueue_stops_reads_as_kueues_reason_and_message(also_disrupted):
    """Kueue's TerminationTarget says why the pod ended, before a DisruptionTarget (Kueue's stop came first)."""
    status = pod_status(disruption=("TerminationByKubelet", "m") if also_disrupted else None)
    status["conditions"] = [*status.get("conditions", []), KUEUE_STOP]
    assert end_of(status, None) == ("WorkloadEvictedDueToPreempted", Said(
        "Preempted to accommodate a workload (UID: 7f3c) due to prioritization in the ClusterQueue"))
    assert view(status).evicted


@pytest.mark.parametrize("condition", [{**KUEUE_STOP, "status": "False"}, {**KUEUE_STOP, "reason": ""}],
                         ids=["not-true", "no-reason"])
def test_a_termination_target_not_true_or_without_a_reason_is_no_eviction(condition):
    status = {**pod_status(), "conditions": [condition]}
    assert queue_eviction(status) is None
    assert not view(status).evicted and view(status).reason == "Error"


@pytest.mark.parametrize("phase,terminating,evicted", [("Running", False, False), ("Running", True, True),
                                                       ("Failed", False, True), ("Succeeded", True, False)],
                         ids=["running-not-deleted", "running-deleted", "failed", "succeeded-deleted"])
def test_a_pod_is_evicted_by_the_queue_once_deleted_or_failed_but_never_once_succeeded(phase, terminating, evicted):
    pod = {"metadata": {"name": "mx-worker-0", "uid": "u1",
                        **({"deletionTimestamp": "2026-01-01T00:00:00Z"} if terminating else {})},
           "status": {"phase": phase, "conditions": [KUEUE_STOP]}}
    seen = view_pods({"mx-worker-0": Slot("Worker", 0)}, {"mx-worker-0": pod})["mx-worker-0"]
    assert seen.evicted == evicted
    assert seen.phase == ("Failed" if evicted else phase)
