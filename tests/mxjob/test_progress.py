"""Progress reporting and stalls (runPolicy.progress, runPolicy.stallPolicy; docs/progress.md), stepped
over the Metacontroller emulation: every sync checks its answer is a fixed point (helpers/mcsim.py)."""
from __future__ import annotations

import json
from datetime import timedelta

import pytest
from helpers.mcsim import T0, Sim, mxjob
from helpers.requests import mxjob_sync_request

from hooks.mxjob.spec import SpecError, parse_mxjob
from hooks.mxjob.sync import sync_mxjob
from hooks.shared.conditions import rfc3339
from hooks.shared.errors import InvalidRequest

PROGRESS = "mx-progress"


def job(**run_policy) -> dict:
    every = {"restartPolicy": "ExitCode"}
    return mxjob(replicas={"Scheduler": {"replicas": 1, **every}, "Server": {"replicas": 1, **every},
                           "Worker": {"replicas": 2, **every}}, runPolicy=run_policy)


def running(sim: Sim) -> None:
    """Sync until every pod exists, run them all, and sync until the job is Running."""
    for _ in range(4):
        sim.sync()
    sim.run()
    sim.sync()
    sim.sync()
    assert sim.state() == "Running", sim.status


def report(sim: Sim, reporter: str = "worker-0", *, step: int, total: int | None = 100, attempt: int = 0,
           at: object = None, **metrics: object) -> None:
    """A reporter patches its entry of the progress ConfigMap, as the helper does."""
    entry = {"attempt": attempt, "step": step, "time": rfc3339(at or sim.now), "metrics": metrics}
    if total is not None:
        entry["total"] = total
    sim.change("v1", "ConfigMap", PROGRESS,
               lambda cm: cm.setdefault("data", {}).update({reporter: json.dumps(entry)}))


def running_since(sim: Sim) -> str:
    return sim.condition("Running")["lastTransitionTime"]


# --- children ----------------------------------------------------------------------------------

def test_a_job_that_asks_for_nothing_gets_no_reporting_children_and_no_progress():
    sim = Sim(job())
    running(sim)
    assert set(sim.config_maps) == {"mx-cluster"}
    assert not sim.objects("v1", "ServiceAccount") and not sim.objects("rbac.authorization.k8s.io/v1", "Role")
    pod = sim.pods["mx-worker-0"]
    assert "serviceAccountName" not in pod["spec"]  # the hook leaves it to the API server, which says "default"
    assert not [e for c in pod["spec"]["containers"] for e in c["env"] if e["name"].startswith("MXJOB_PROGRESS")]
    assert "progress" not in sim.status


def test_reporting_children_come_first_and_pods_wait_for_their_service_account():
    sim = Sim(job(progress={}))
    sim.sync()
    assert not sim.pods, "a pod created before its ServiceAccount is refused by the API server"
    assert "wait for their ServiceAccount mx-progress" in sim.condition("Created")["message"]
    assert PROGRESS in sim.config_maps and "data" not in sim.config_maps[PROGRESS]
    assert PROGRESS in sim.objects("v1", "ServiceAccount")
    [role] = sim.objects("rbac.authorization.k8s.io/v1", "Role").values()
    assert role["rules"] == [{"apiGroups": [""], "resources": ["configmaps"], "resourceNames": [PROGRESS],
                              "verbs": ["get", "patch"]}]
    [binding] = sim.objects("rbac.authorization.k8s.io/v1", "RoleBinding").values()
    assert binding["roleRef"]["name"] == PROGRESS
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": PROGRESS, "namespace": "ns"}]
    running(sim)
    for name, pod in sim.pods.items():
        assert pod["spec"]["serviceAccountName"] == PROGRESS
        env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
        assert env["MXJOB_PROGRESS_CONFIGMAP"] == PROGRESS and env["MXJOB_PROGRESS_NAMESPACE"] == "ns"
        # One reporter per replica type by default: index 0.
        assert env.get("MXJOB_PROGRESS_REPORTER") == (name.removeprefix("mx-") if name.endswith("-0") else None)
    assert "is created." in sim.condition("Created")["message"]


def test_all_replicas_report_when_asked_and_a_template_account_is_kept():
    parent = job(progress={"reporters": "AllReplicas"})
    parent["spec"]["mxReplicaSpecs"]["Worker"]["template"]["spec"]["serviceAccountName"] = "mine"
    sim = Sim(parent)
    running(sim)
    worker = sim.pods["mx-worker-1"]["spec"]
    assert worker["serviceAccountName"] == "mine"
    assert {"name": "MXJOB_PROGRESS_REPORTER", "value": "worker-1"} in worker["containers"][0]["env"]
    assert sim.pods["mx-server-0"]["spec"]["serviceAccountName"] == PROGRESS


def test_the_reporters_data_is_never_overwritten_by_the_hook():
    sim = Sim(job(progress={}))
    running(sim)
    report(sim, step=5, loss=0.5)
    before = sim.config_maps[PROGRESS]["data"]
    sim.sync()
    assert sim.config_maps[PROGRESS]["data"] == before
    assert not [c for c in sim.last["children"] if c["metadata"]["name"] == PROGRESS and "data" in c]


def test_every_reporting_child_goes_at_the_ttl():
    sim = Sim(job(progress={}, ttlSecondsAfterFinished=60))
    running(sim)
    sim.set_phase("mx-scheduler-0", "Succeeded", exit_code=0)
    for name in ("mx-server-0", "mx-worker-0", "mx-worker-1"):
        sim.set_phase(name, "Succeeded", exit_code=0)
    sim.sync()
    sim.sync()
    assert sim.state() == "Succeeded" and PROGRESS in sim.objects("v1", "ServiceAccount")
    sim.tick(61)
    sim.sync()
    assert not sim.objects("v1", "ServiceAccount") and PROGRESS not in sim.config_maps


# --- status.progress ---------------------------------------------------------------------------

def test_a_report_is_status_progress_with_the_reporters_own_time():
    sim = Sim(job(progress={}))
    running(sim)
    at = sim.now - timedelta(seconds=7)
    report(sim, step=30, total=120, at=at, loss=0.25, acc=0.9, epoch=2)
    sim.sync()
    assert sim.status["progress"] == {
        "reporter": "worker-0", "attempt": 0, "step": 30, "total": 120, "progressPercentage": 25,
        "metrics": [{"name": "acc", "value": "0.9"}, {"name": "epoch", "value": "2"},
                    {"name": "loss", "value": "0.25"}],
        "lastUpdatedTime": rfc3339(at)}
    sim.tick(100)
    sim.sync()  # time passing alone changes nothing
    assert sim.status["progress"]["lastUpdatedTime"] == rfc3339(at)


def test_several_reporters_show_the_slowest_and_each():
    sim = Sim(job(progress={"reporters": "AllReplicas"}))
    running(sim)
    report(sim, "worker-0", step=50, at=sim.now - timedelta(seconds=5))
    report(sim, "worker-1", step=40, loss=1.5)
    sim.sync()
    progress = sim.status["progress"]
    assert (progress["reporter"], progress["step"], progress["progressPercentage"]) == ("worker-1", 40, 40)
    assert progress["lastUpdatedTime"] == rfc3339(sim.now) and progress["metrics"] == [{"name": "loss", "value": "1.5"}]
    assert [r["name"] for r in progress["reporters"]] == ["worker-0", "worker-1"]


def test_an_older_progress_config_map_read_after_a_newer_status_does_not_move_a_report_back():
    sim = Sim(job(progress={}, stallPolicy={"timeoutSeconds": 60, "action": "FailJob"}))
    running(sim)
    sim.tick(50)
    report(sim, step=10)
    sim.sync()
    newer = sim.status["progress"]
    # A stale informer hands the hook the ConfigMap as it was before that report.
    sim.change("v1", "ConfigMap", PROGRESS, lambda cm: cm.pop("data"))
    sim.tick(30)  # 80 s after Running, 30 s after the report
    sim.sync()
    assert sim.state() == "Running" and sim.status["progress"] == newer


def test_a_stale_status_with_a_newer_config_map_takes_the_config_map():
    sim = Sim(job(progress={}))
    running(sim)
    report(sim, step=10)
    sim.sync()
    sim.tick(10)
    report(sim, step=20)
    sim.set_parent_status({k: v for k, v in sim.status.items() if k != "progress"})
    sim.sync()
    assert sim.status["progress"]["step"] == 20


def test_two_reports_in_one_second_show_the_later():
    sim = Sim(job(progress={}))
    running(sim)
    report(sim, step=10)
    sim.sync()
    report(sim, step=11)  # the same second
    sim.sync()
    assert sim.status["progress"]["step"] == 11


def test_malformed_reports_are_ignored_not_fatal():
    sim = Sim(job(progress={"reporters": "AllReplicas"}))
    running(sim)
    sim.change("v1", "ConfigMap", PROGRESS, lambda cm: cm.setdefault("data", {}).update(
        {"worker-0": "not json", "worker-1": json.dumps({"step": "x", "time": rfc3339(sim.now),
                                                         "metrics": {"nan": float("inf"), "ok": True}})}))
    sim.sync()
    assert sim.status["progress"] == {"reporter": "worker-1", "attempt": 0, "lastUpdatedTime": rfc3339(sim.now)}


# --- stalls ------------------------------------------------------------------------------------

def test_a_job_that_never_reports_stalls_timeout_after_running_and_the_hook_resyncs_at_the_deadline():
    sim = Sim(job(stallPolicy={"timeoutSeconds": 300}))
    running(sim)
    assert sim.last["resyncAfterSeconds"] == 300
    sim.tick(299)
    sim.sync()
    assert sim.condition("Running")["reason"] == "MXJobRunning"
    assert sim.last["resyncAfterSeconds"] == pytest.approx(1)
    sim.tick(1)
    sim.sync()
    running_cond = sim.condition("Running")
    assert running_cond["status"] == "True" and running_cond["reason"] == "MXJobStalled"
    assert "no progress report within 300 s of running" in running_cond["message"]
    assert sim.state() == "Running"


def test_report_says_which_reporter_is_silent_with_its_last_progress_and_clears_when_it_reports():
    sim = Sim(job(stallPolicy={"timeoutSeconds": 60}, progress={"reporters": "AllReplicas"}))
    running(sim)
    since = running_since(sim)
    report(sim, "worker-0", step=10, total=1000)
    report(sim, "worker-1", step=12, total=1000)
    sim.sync()
    sim.tick(40)
    report(sim, "worker-1", step=20, total=1000)
    sim.sync()
    assert sim.last["resyncAfterSeconds"] == pytest.approx(20)  # worker-0's deadline
    sim.tick(20)
    sim.sync()
    message = sim.condition("Running")["message"]
    assert sim.condition("Running")["reason"] == "MXJobStalled"
    assert "from worker-0 (last: step 10 of 1000, 1%, at " in message and "worker-1" not in message
    report(sim, "worker-0", step=30, total=1000)
    sim.sync()
    assert sim.condition("Running")["reason"] == "MXJobRunning"
    assert running_since(sim) == since  # Running stayed True throughout


def test_fail_job_ends_the_job_naming_the_silent_reporter():
    sim = Sim(job(stallPolicy={"timeoutSeconds": 60, "action": "FailJob"}))
    running(sim)
    report(sim, step=3, total=10, loss=2.0)
    sim.sync()
    sim.tick(60)
    sim.sync()
    # First said, then done if no report comes within CONFIRM_SECONDS (a report in flight is not silence).
    assert sim.condition("Running")["reason"] == "MXJobStalled"
    assert "action FailJob follows unless a report comes within 10 s" in sim.condition("Running")["message"]
    assert sim.last["resyncAfterSeconds"] == 10
    sim.tick(10)
    sim.sync()
    sim.sync()
    assert sim.state() == "Failed"
    message = sim.condition("Failed")["message"]
    assert message.startswith("MXJob ns/mx stalled: no progress report for 60 s")
    assert "worker-0 (last: step 3 of 10, 30%" in message and "action is FailJob" in message
    assert sim.status["progress"]["step"] == 3  # the last progress stays in status


def test_restart_job_restarts_the_whole_job_and_the_new_attempt_gets_its_own_clock():
    sim = Sim(job(stallPolicy={"timeoutSeconds": 60, "action": "RestartJob"}))
    running(sim)
    report(sim, step=7)
    sim.sync()
    sim.tick(60)
    sim.sync()  # the stall is said
    sim.tick(10)
    sim.sync()  # and acted on: attempt 1 is recorded
    assert sim.state() == "Restarting"
    restarting = sim.condition("Restarting")
    assert restarting["reason"] == "MXJobStalled"
    assert "attempt 1: it stalled: no progress report for 60 s" in restarting["message"]
    assert sim.status["attempt"] == 1 and sim.status["restartCount"] == 1
    [record] = sim.config_maps["mx-attempt-1"]["data"].values()
    # The new attempt's stall clock starts here, in a child a stale parent cannot hide.
    assert json.loads(record) == {"stalled": restarting["message"].split("it stalled: ")[1].split("; every pod")[0],
                                  "time": rfc3339(sim.now)}
    for _ in range(4):
        sim.sync()
    assert all(p["metadata"]["labels"].get("training.kubeflow.org/job-attempt") == "1" for p in sim.pods.values())
    sim.run()
    sim.sync()
    sim.sync()
    assert sim.state() == "Running"
    assert "progress" not in sim.status, "attempt 0's reports say nothing of attempt 1"
    sim.tick(59)
    sim.sync()
    assert sim.state() == "Running" and sim.condition("Running")["reason"] == "MXJobRunning"
    report(sim, step=1, attempt=1)
    sim.sync()
    assert sim.status["progress"]["attempt"] == 1


def test_a_stale_parent_right_after_a_stall_restart_does_not_stall_the_new_attempt():
    sim = Sim(job(stallPolicy={"timeoutSeconds": 60, "action": "RestartJob"}))
    running(sim)
    stale_running = sim.status
    sim.tick(60)
    sim.sync()
    sim.tick(10)
    sim.sync()
    for _ in range(4):
        sim.sync()
    sim.run()
    sim.sync()
    sim.sync()
    assert sim.state() == "Running" and sim.status["attempt"] == 1
    # A stale cache hands the hook the parent as it was before the restart: Running since long
    # ago, attempt 0. The attempt record (a child) keeps the new attempt's start.
    sim.set_parent_status(stale_running)
    sim.tick(10)
    sim.sync()
    assert sim.status["attempt"] == 1 and "mx-attempt-2" not in sim.config_maps


def test_restart_job_stops_at_max_restarts():
    sim = Sim(job(stallPolicy={"timeoutSeconds": 60, "action": "RestartJob"}, failurePolicy={"maxRestarts": 0}))
    running(sim)
    sim.tick(60)
    sim.sync()
    sim.tick(10)
    sim.sync()
    sim.sync()
    assert sim.state() == "Failed"
    assert "stalled: no progress report within 60 s of running" in sim.condition("Failed")["message"]
    assert "failurePolicy.maxRestarts (0)" in sim.condition("Failed")["message"]


def test_a_finished_reporter_is_not_silent():
    sim = Sim(job(stallPolicy={"timeoutSeconds": 60}, progress={"reporters": "AllReplicas"}))
    running(sim)
    report(sim, "worker-0", step=100, total=100)
    report(sim, "worker-1", step=90, total=100)
    sim.sync()
    sim.set_phase("mx-worker-0", "Succeeded", exit_code=0)
    sim.tick(50)
    report(sim, "worker-1", step=95, total=100)
    sim.sync()
    sim.tick(20)
    sim.sync()
    assert sim.condition("Running")["reason"] == "MXJobRunning"


def test_a_report_that_comes_after_the_stall_is_said_cancels_the_action():
    sim = Sim(job(stallPolicy={"timeoutSeconds": 60, "action": "RestartJob"}))
    running(sim)
    sim.tick(60)
    sim.sync()
    assert sim.condition("Running")["reason"] == "MXJobStalled"
    sim.tick(5)
    report(sim, step=1)
    sim.sync()
    sim.tick(10)
    sim.sync()
    assert sim.state() == "Running" and sim.condition("Running")["reason"] == "MXJobRunning"
    assert "attempt" not in sim.status


def test_a_suspended_job_does_not_stall():
    sim = Sim(job(stallPolicy={"timeoutSeconds": 60, "action": "FailJob"}))
    running(sim)
    sim.edit({"runPolicy": {"stallPolicy": {"timeoutSeconds": 60, "action": "FailJob"}, "suspend": True}})
    sim.sync()
    sim.tick(600)
    sim.sync()
    assert sim.state() == "Suspended"


# --- the spec ----------------------------------------------------------------------------------

@pytest.mark.parametrize(("run_policy", "problem"), [
    ({"progress": "yes"}, "spec.runPolicy.progress: must be an object"),
    ({"progress": {"reporters": "Some"}}, "spec.runPolicy.progress.reporters: 'Some' is not one of FirstReplica, AllReplicas"),
    ({"stallPolicy": {}}, "spec.runPolicy.stallPolicy.timeoutSeconds: required"),
    ({"stallPolicy": {"timeoutSeconds": 0}}, "spec.runPolicy.stallPolicy.timeoutSeconds: must be an integer from 1"),
    ({"stallPolicy": {"timeoutSeconds": 60, "action": "Reboot"}},
     "spec.runPolicy.stallPolicy.action: 'Reboot' is not one of Report, RestartJob, FailJob"),
    ({"stallPolicy": []}, "spec.runPolicy.stallPolicy: must be an object"),
])
def test_policy_problems_name_the_field(run_policy, problem):
    with pytest.raises(SpecError) as err:
        parse_mxjob(job(**run_policy))
    assert any(p.startswith(problem) for p in err.value.problems), err.value.problems


def test_stall_policy_turns_reporting_on_and_defaults_to_report():
    policy = parse_mxjob(job(stallPolicy={"timeoutSeconds": 5})).run_policy.progress
    assert policy.enabled and policy.stall is not None and policy.stall.action == "Report"
    assert not parse_mxjob(job()).run_policy.progress.enabled


def without_access_rules(parent: dict) -> dict:
    """A request from a CompositeController installed before progress reporting (no ServiceAccount,
    Role or RoleBinding rule)."""
    request = mxjob_sync_request(parent)
    for key in ("ServiceAccount.v1", "Role.rbac.authorization.k8s.io/v1", "RoleBinding.rbac.authorization.k8s.io/v1"):
        del request["children"][key]
    return request


def test_a_controller_without_the_new_rules_serves_jobs_that_do_not_report_and_refuses_those_that_do():
    assert sync_mxjob(without_access_rules(job()), now=T0)["children"]
    with pytest.raises(InvalidRequest, match=r"children\[ServiceAccount.v1\]: required for runPolicy.progress"):
        sync_mxjob(without_access_rules(job(progress={})), now=T0)


# --- costs (docs/progress.md, "Costs") ----------------------------------------------------------

def test_a_report_costs_one_status_write_and_two_syncs():
    """Per report: the reporter's patch (its own write), then one sync that writes the status, whose
    write triggers one more sync that writes nothing (the fixed point, checked by Sim.sync)."""
    sim = Sim(job(progress={}, stallPolicy={"timeoutSeconds": 600}))
    running(sim)
    writes: list[tuple[str, str]] = []
    sim.store.watch(lambda event, obj: writes.append((event, f"{obj['kind']}/{obj['metadata']['name']}")))
    for n in range(1, 4):
        sim.tick(30)
        report(sim, step=n)
        assert writes == [("MODIFIED", f"ConfigMap/{PROGRESS}")]  # the reporter's patch
        writes.clear()
        sim.sync()
        assert writes == [("MODIFIED", "MXJob/mx")], "one status write"
        writes.clear()
        sim.sync()  # the sync the status write triggers
        assert writes == [], "the next sync writes nothing"


def test_progress_asked_of_a_running_job_adds_its_children_and_keeps_every_pod():
    sim = Sim(job())
    running(sim)
    before = {name: pod["metadata"]["uid"] for name, pod in sim.pods.items()}
    sim.edit({"runPolicy": {"progress": {}}})
    sim.sync()
    sim.sync()
    assert {name: pod["metadata"]["uid"] for name, pod in sim.pods.items()} == before, "no pod replaced"
    assert all(pod["status"]["phase"] == "Running" for pod in sim.pods.values())
    assert PROGRESS in sim.config_maps and PROGRESS in sim.objects("v1", "ServiceAccount")
    assert PROGRESS in sim.objects("rbac.authorization.k8s.io/v1", "RoleBinding")
    assert sim.state() == "Running" and "wait for their ServiceAccount" not in sim.condition("Created")["message"]
