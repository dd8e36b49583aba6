"""How a pod ended, as both kinds quote it: hooks.shared.termination and the MXJob pod view over it.

A disrupted pod (preempted, evicted through the API, deleted by the taint manager, terminated by
the kubelet) shows only a kill by signal in its container; its DisruptionTarget condition says why,
so that reason and its message are what the Restarting and Failed conditions quote.
"""
from __future__ import annotations

import pytest
from helpers.mcsim import Sim, mxjob

from hooks.mxjob.observed import Slot, view_pods
from hooks.shared.termination import MAX_MESSAGE, end_of, first_line

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


def test_a_preempted_worker_names_the_preemption_in_the_failed_condition():
    sim = Sim(mxjob(replicas={"Scheduler": 1, "Server": 1, "Worker": 1}))
    sim.sync()
    sim.run()
    sim.sync()
    status = pod_status(disruption=("PreemptionByScheduler", "Preempted by a pod on node node-1"),
                        container={"exitCode": 137, "reason": "Error", "finishedAt": "2024-01-01T00:00:00Z"})
    sim.write_status("v1", "Pod", "mx-worker-0", status)
    sim.sync()
    sim.sync()
    message = sim.condition("Failed")["message"]
    assert "reason PreemptionByScheduler: 'Preempted by a pod on node node-1'" in message, message


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
