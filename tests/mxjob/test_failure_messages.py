"""Every Failed and Restarting message names the deciding pod and how it ended, and keeps saying it.

Whichever limit decided (a pod's own policy, a failure rule, backoffLimit, failurePolicy.maxRestarts,
activeDeadlineSeconds), the message names the lost pod, its exit code (a kill by a signal named),
its reason (OOMKilled, Evicted, PreemptionByScheduler, ...) and the line it said (hooks.shared.
termination); the outcome record keeps the message after cleanPodPolicy and the TTL take the pods.
The reproducers in tests/fuzz_repro/ba76303 are sync requests on which the backoff-limit message
once named nothing. Then the two edge cases of several losses in one sync (docs/lifecycle.md).
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers.mcsim import Sim, mxjob, running

from hooks.server.app import create_app

REPRO = Path(__file__).resolve().parents[1] / "fuzz_repro" / "ba76303"
DISRUPTED = "'EvictionByEvictionAPI: the pod was disrupted'"


def post(body: bytes) -> dict:
    response = create_app().test_client().post("/sync", data=body, content_type="application/json")
    assert response.status_code == 200, response.get_data(as_text=True)
    return response.get_json()


def failed_message(answer: dict) -> str:
    failed = next(c for c in answer["status"]["conditions"] if c["type"] == "Failed")
    assert failed["status"] == "True"
    return failed["message"]


@pytest.mark.parametrize(("name", "message"), [
    ("01-backoff-limit-preempted-pod-failed-message-names-no-pod",
     "MXJob default/p has reached the specified backoff limit: 1 restarts, backoffLimit 0; pod p-worker-1 was lost "
     "(no exit code, reason PreemptionByScheduler: 'PreemptionByScheduler: the pod was disrupted')."),
    ("01m-minimal-backoff-limit-evicted-pod-not-named",
     "MXJob default/odi has reached the specified backoff limit: 1 restarts, backoffLimit 0; pod odi-worker-0 was "
     "lost (no exit code, reason Evicted)."),
    ("02-whole-job-restart-over-backoff-limit-names-no-pod",
     "MXJob default/d has reached the specified backoff limit: 1 restarts, backoffLimit 0; pod d-server-0 was lost "
     f"(no exit code, reason EvictionByEvictionAPI: {DISRUPTED})."),
    ("02a-control-same-loss-over-maxrestarts-names-pod-and-cause",
     "MXJob default/d has reached failurePolicy.maxRestarts (0): pod d-server-0 was lost (no exit code, reason "
     f"EvictionByEvictionAPI: {DISRUPTED})."),
    ("03-backoff-limit-oomkilled-pod-message-without-reason",
     "MXJob default/o has reached the specified backoff limit: 1 restarts, backoffLimit 0; pod o-worker-1 was lost "
     "(exit code 137, killed by SIGKILL, reason OOMKilled: 'Killed while allocating 2 GiB')."),
    ("03a-control-never-policy-names-code-reason-and-line",
     "MXJob default/o failed: Worker 1 (pod o-worker-1) failed with exit code 137, killed by SIGKILL, reason "
     "OOMKilled: 'Killed while allocating 2 GiB'; restartPolicy Never does not retry."),
], ids=lambda v: v[:2] if v[0].isdigit() else "")
def test_the_failed_message_names_the_lost_pod_and_how_it_ended(name, message):
    answer = post((REPRO / f"{name}.json").read_bytes())
    assert failed_message(answer) == message
    # The outcome record written with it keeps the same message.
    outcome = next(c for c in answer["children"] if c["metadata"]["name"].endswith("-outcome"))
    assert message in json.loads(outcome["data"]["record"])["conditions"][-1]["message"]


def test_the_message_stays_after_cleanup_deleted_the_pods():
    # 01e is the sync after 01: the outcome record observed, cleanPodPolicy All deletes both pods.
    # Its record is the one the deciding sync now writes (the stored one was written before this fix).
    first = post((REPRO / "01-backoff-limit-preempted-pod-failed-message-names-no-pod.json").read_bytes())
    outcome = next(c for c in first["children"] if c["metadata"]["name"] == "p-outcome")
    after = json.loads((REPRO / "01e-after-cleanup-nothing-says-why.json").read_text())
    after["children"]["ConfigMap.v1"]["p-outcome"]["data"] = outcome["data"]
    answer = post(json.dumps(after).encode())
    assert not [c for c in answer["children"] if c["kind"] == "Pod"]
    assert failed_message(answer) == failed_message(first)
    assert "pod p-worker-1 was lost (no exit code, reason PreemptionByScheduler" in failed_message(answer)


# --- scenarios over the Metacontroller emulation (each step checks the fixed point) ----------------

def dist(policy: str = "ExitCode", **run_policy) -> dict:
    return mxjob(replicas={"Scheduler": {"replicas": 1, "restartPolicy": policy},
                           "Server": {"replicas": 1, "restartPolicy": policy},
                           "Worker": {"replicas": 2, "restartPolicy": policy}}, runPolicy=run_policy)


def workers(policy: str = "OnFailure", **run_policy) -> dict:
    return mxjob(replicas={"Worker": {"replicas": 2, "restartPolicy": policy}}, runPolicy=run_policy)


def settle(sim: Sim, syncs: int = 4) -> None:
    for _ in range(syncs):
        sim.sync()


def test_a_failed_job_keeps_its_message_through_cleanup_and_the_ttl():
    sim = running(workers("OnFailure", backoffLimit=0, cleanPodPolicy="All", ttlSecondsAfterFinished=60))
    sim.set_phase("mx-worker-1", "Failed", exit_code=1, reason="Error",
                  message="step 9\nERROR: checkpoint /data/ckpt is not writable\n")
    sim.tick(1)
    settle(sim)
    said = ("MXJob ns/mx has reached the specified backoff limit: 1 restarts, backoffLimit 0; pod mx-worker-1 was "
            "lost (exit code 1, reason Error: 'ERROR: checkpoint /data/ckpt is not writable').")
    assert sim.condition("Failed")["message"] == said
    assert not sim.pods  # cleanPodPolicy All
    sim.tick(61)
    settle(sim)
    assert "cleanedUpTime" in sim.status and list(sim.config_maps) == ["mx-outcome"]
    assert sim.condition("Failed")["message"] == said


def test_the_deadline_names_the_pod_lost_before_it():
    sim = running(dist(activeDeadlineSeconds=60))
    sim.set_phase("mx-server-0", "Running", restarts=0)
    sim.set_phase("mx-worker-1", "Failed", exit_code=137, reason="OOMKilled", message="epoch 3\n")
    sim.tick(1)
    settle(sim)
    assert sim.condition("Restarting")["status"] == "True"
    sim.tick(60)
    settle(sim)
    message = sim.condition("Failed")["message"]
    assert message == ("MXJob ns/mx was active longer than activeDeadlineSeconds (60 s) and is stopped; pods lost "
                       "before: pod mx-worker-1 was lost (exit code 137, killed by SIGKILL, reason OOMKilled, "
                       "last log line: 'epoch 3').")


def test_a_deadline_without_a_loss_says_so():
    sim = running(dist(activeDeadlineSeconds=60))
    sim.tick(61)
    settle(sim)
    assert sim.condition("Failed")["message"].endswith("and is stopped; no pod was lost.")


def test_a_failure_rule_names_the_pod_and_the_rule():
    sim = running(workers("OnFailure", failurePolicy={"rules": [{"action": "FailJob", "onExitCodes": [3]}]}))
    sim.set_phase("mx-worker-0", "Failed", exit_code=3, reason="Error",
                  message='Traceback (most recent call last):\n  File "t.py", line 1\nKeyError: \'lr\'\n')
    sim.tick(1)
    settle(sim)
    assert sim.condition("Failed")["message"] == (
        "MXJob ns/mx failed: Worker 0 (pod mx-worker-0) failed with exit code 3, reason Error: \"KeyError: 'lr'\"; "
        "runPolicy.failurePolicy says FailJob.")


# --- several losses in one sync (docs/lifecycle.md, "Several losses in one sync") -----------------

def test_a_permanent_error_beside_a_retried_loss_fails_the_job_and_names_both():
    # Before: the worker's exit 1 was taken as collateral of the server's loss, the whole job
    # restarted, and a successful second attempt ended Succeeded with the error swallowed.
    sim = running(dist("ExitCode"))
    sim.set_phase("mx-server-0", "Failed", exit_code=137, reason="Error", message="epoch 4\n")
    sim.set_phase("mx-worker-0", "Failed", exit_code=1, reason="Error", message="ERROR: bad shard 7\n")
    sim.tick(1)
    settle(sim)
    assert sim.state() == "Failed" and "attempt" not in sim.status
    assert sim.condition("Failed")["message"] == (
        "MXJob ns/mx failed: Worker 0 (pod mx-worker-0) failed with exit code 1, reason Error: 'ERROR: bad shard 7'; "
        "a permanent error under restartPolicy ExitCode; also lost now: pod mx-server-0 (exit code 137, killed by "
        "SIGKILL, reason Error, last log line: 'epoch 4').")


def test_a_peer_failing_after_the_restart_was_decided_is_still_part_of_it():
    sim = running(dist("ExitCode"))
    sim.set_phase("mx-scheduler-0", "Failed", exit_code=137)
    sim.sync()  # attempt 1 decided, its record created
    sim.set_phase("mx-worker-0", "Failed", exit_code=134)  # ps-lite aborts once its scheduler is gone
    settle(sim)
    assert sim.status["attempt"] == 1 and sim.state() in ("Restarting", "Running")


def test_two_independent_losses_count_two_restarts_and_are_both_named():
    sim = running(workers("OnFailure", backoffLimit=5))
    sim.set_phase("mx-worker-0", "Failed", exit_code=137, reason="OOMKilled")
    sim.set_phase("mx-worker-1", "Failed", pod_reason="Evicted")
    sim.tick(1)
    sim.sync()
    assert sim.status["restartCount"] == 2  # as two syncs would count them: each pod is recreated
    assert sim.condition("Restarting")["message"] == (
        "MXJob ns/mx is restarting: pod mx-worker-0 ended with exit code 137, killed by SIGKILL, reason OOMKilled "
        "and is recreated; pod mx-worker-1 ended with no exit code, reason Evicted and is recreated "
        "(restarts so far: 2 of backoffLimit 5).")


def test_two_losses_of_a_distributed_job_are_one_restart_that_names_both_after_the_pods_are_gone():
    sim = running(dist("ExitCode", backoffLimit=5))
    sim.set_phase("mx-worker-0", "Failed", exit_code=137, reason="Error")
    sim.set_phase("mx-worker-1", "Failed", exit_code=143, reason="Error", message="ERROR: lost the server\n")
    sim.tick(1)
    sim.sync()
    said = ("pod mx-worker-0 was lost (exit code 137, killed by SIGKILL, reason Error), and pod mx-worker-1 "
            "(exit code 143, killed by SIGTERM, reason Error: 'ERROR: lost the server')")
    assert sim.status["restartCount"] == 1 and sim.status["attempt"] == 1
    assert said in sim.condition("Restarting")["message"]
    settle(sim)  # the old attempt's pods go, the new ones are created: the message is the attempt record's
    assert sim.pods and all(pod["metadata"]["labels"].get("training.kubeflow.org/job-attempt") == "1"
                            for pod in sim.pods.values())
    assert said in sim.condition("Restarting")["message"]


def test_a_backoff_limit_reached_by_two_losses_names_both():
    sim = running(workers("OnFailure", backoffLimit=1))
    sim.set_phase("mx-worker-0", "Failed", exit_code=2, reason="Error", message="ERROR: a\n")
    sim.set_phase("mx-worker-1", "Failed", exit_code=2, reason="Error", message="ERROR: b\n")
    sim.tick(1)
    sim.sync()
    assert sim.condition("Failed")["message"] == (
        "MXJob ns/mx has reached the specified backoff limit: 2 restarts, backoffLimit 1; "
        "pod mx-worker-0 was lost (exit code 2, reason Error: 'ERROR: a'); "
        "pod mx-worker-1 was lost (exit code 2, reason Error: 'ERROR: b').")


def test_a_message_names_at_most_three_pods():
    sim = running(mxjob(replicas={"Worker": {"replicas": 5, "restartPolicy": "OnFailure"}}, runPolicy={"backoffLimit": 2}))
    for n in range(5):
        sim.set_phase(f"mx-worker-{n}", "Failed", exit_code=1, reason="Error")
    sim.tick(1)
    sim.sync()
    message = sim.condition("Failed")["message"]
    assert message.count("was lost") == 3 and message.endswith("; and 2 more.")
