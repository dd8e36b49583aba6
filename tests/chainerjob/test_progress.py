"""ChainerJob progress reporting and stalls (spec.runPolicy.progress and stallPolicy; docs/progress.md),
stepped over the Metacontroller emulation: every sync checks its answer is a fixed point (helpers/mcsim.py)."""
from __future__ import annotations

import json

import pytest
from helpers.chainersim import JOB_KEY, STATEFULSET_KEY, ChainerSim, chainerjob
from helpers.mcsim import T0

from hooks.chainerjob.spec import SpecError, parse_chainerjob
from hooks.chainerjob.sync import CHILD_KEYS, sync_chainerjob
from hooks.shared.conditions import rfc3339

PROGRESS = "chj-progress"
RBAC = "rbac.authorization.k8s.io/v1"


def job(workers: dict | None = None, **run_policy) -> dict:
    return chainerjob(workers={"ws": 2} if workers is None else workers, runPolicy=run_policy)


def running(parent: dict) -> ChainerSim:
    """A new job, synced until it is Running."""
    sim = ChainerSim(parent)
    run_attempt(sim)
    return sim


def run_attempt(sim: ChainerSim) -> None:
    """Sync until the workers are ready and the master Job runs, and the job is Running (a new job,
    or a restarted one's new attempt)."""
    for _ in range(2):
        sim.sync()
    if sim.children[STATEFULSET_KEY]:
        sim.all_ready()
        sim.sync()
    sim.master("chj-master", active=1)
    sim.sync()
    assert sim.state() == "Running", sim.status


def report(sim: ChainerSim, reporter: str = "rank-0", *, step: int, total: int | None = 100, **metrics) -> None:
    """A rank patches its entry of the progress ConfigMap, as the helper does."""
    entry = {"attempt": 0, "step": step, "time": rfc3339(sim.now), "metrics": metrics}
    if total is not None:
        entry["total"] = total
    sim.change("v1", "ConfigMap", PROGRESS, lambda cm: cm.setdefault("data", {}).update({reporter: json.dumps(entry)}))


def env_of(template: dict) -> dict:
    return {e["name"]: e.get("value") for e in template["spec"]["containers"][0]["env"]}


def running_condition(sim: ChainerSim) -> dict:
    return sim.condition("Running")


# --- spec --------------------------------------------------------------------------------------


@pytest.mark.parametrize("run_policy,fragment", [
    ({"stallPolicy": {"timeoutSeconds": 60, "action": "RestartJob"}, "maxRestarts": -1},
     "spec.runPolicy.maxRestarts: must be an integer from 0 to 2147483647, got -1"),
    ({"stallPolicy": {"timeoutSeconds": 0}}, "spec.runPolicy.stallPolicy.timeoutSeconds: must be an integer from 1"),
    ({"progress": {"reporters": "Everyone"}}, "spec.runPolicy.progress.reporters: 'Everyone' is not one of"),
    ({"backoffLimit": 3}, "spec.runPolicy.backoffLimit: a ChainerJob's runPolicy has only progress, stallPolicy, maxRestarts"),
], ids=["negative-max-restarts", "zero-timeout", "unknown-reporters", "mxjob-field"])
def test_a_run_policy_the_kind_cannot_follow_is_refused_naming_the_field(run_policy, fragment):
    with pytest.raises(SpecError) as err:
        parse_chainerjob(job(**run_policy))
    assert any(fragment in problem for problem in err.value.problems), err.value.problems


def test_run_policy_must_be_an_object():
    with pytest.raises(SpecError, match=r"spec\.runPolicy: must be an object"):
        parse_chainerjob(chainerjob(runPolicy=[]))


@pytest.mark.parametrize("run_policy,enabled,stall", [
    ({}, False, None), ({"progress": {}}, True, None),
    ({"stallPolicy": {"timeoutSeconds": 30}}, True, ("Report", 30)),
    ({"stallPolicy": {"timeoutSeconds": 30, "action": "FailJob"}}, True, ("FailJob", 30)),
], ids=["empty", "progress", "stall-report-by-default", "stall-fail-job"])
def test_progress_is_off_unless_asked_and_a_stall_policy_turns_it_on(run_policy, enabled, stall):
    policy = parse_chainerjob(job(**run_policy)).progress
    assert policy.enabled is enabled
    assert (None if policy.stall is None else (policy.stall.action, policy.stall.timeout_seconds)) == stall


# --- children ----------------------------------------------------------------------------------


def test_a_job_that_asks_for_nothing_gets_no_reporting_children_and_no_progress():
    sim = running(chainerjob(workers={"ws": 2}))
    assert PROGRESS not in sim.objects("v1", "ServiceAccount") and PROGRESS not in sim.objects("v1", "ConfigMap")
    for template in (sim.children[STATEFULSET_KEY]["chj-workerset-ws"]["spec"]["template"],
                     sim.children[JOB_KEY]["chj-master"]["spec"]["template"]):
        assert not [n for n in env_of(template) if n.startswith("MXJOB_PROGRESS")]
    assert "serviceAccountName" not in sim.children[STATEFULSET_KEY]["chj-workerset-ws"]["spec"]["template"]["spec"]
    assert "progress" not in sim.status and "resyncAfterSeconds" not in sim.last


def test_reporting_children_come_first_and_the_workers_wait_for_their_service_account():
    sim = ChainerSim(job(progress={}))
    sim.sync()
    assert not sim.children[STATEFULSET_KEY], "a pod created before its ServiceAccount is refused by the API server"
    waiting = sim.condition("Waiting")
    assert waiting["reason"] == "WaitingForServiceAccount" and PROGRESS in waiting["message"]
    assert PROGRESS in sim.objects("v1", "ServiceAccount") and "data" not in sim.objects("v1", "ConfigMap")[PROGRESS]
    assert sim.objects(RBAC, "Role")[PROGRESS]["rules"] == [
        {"apiGroups": [""], "resources": ["configmaps"], "resourceNames": [PROGRESS], "verbs": ["get", "patch"]}]
    # The master runs as the launcher (kubectl exec needs it), so the binding names it too.
    assert [s["name"] for s in sim.objects(RBAC, "RoleBinding")[PROGRESS]["subjects"]] == [PROGRESS, "chj-launcher"]
    sim.sync()
    sim.all_ready()
    sim.sync()
    worker = sim.children[STATEFULSET_KEY]["chj-workerset-ws"]["spec"]["template"]
    master = sim.children[JOB_KEY]["chj-master"]["spec"]["template"]
    assert worker["spec"]["serviceAccountName"] == PROGRESS
    assert master["spec"]["serviceAccountName"] == "chj-launcher"
    for template in (worker, master):
        env = env_of(template)
        assert (env["MXJOB_PROGRESS_CONFIGMAP"], env["MXJOB_PROGRESS_NAMESPACE"]) == (PROGRESS, "ns")
        # The ranks report, not the pods: rank 0 by default (the helper names it rank-0).
        assert env["MXJOB_PROGRESS_MPI_RANKS"] == "0" and "MXJOB_PROGRESS_REPORTER" not in env


def test_all_ranks_report_when_asked_and_a_template_account_is_kept():
    parent = job(progress={"reporters": "AllReplicas"})
    parent["spec"]["workerSets"]["ws"]["template"]["spec"]["serviceAccountName"] = "mine"
    sim = running(parent)
    worker = sim.children[STATEFULSET_KEY]["chj-workerset-ws"]["spec"]["template"]
    assert worker["spec"]["serviceAccountName"] == "mine"
    assert env_of(worker)["MXJOB_PROGRESS_MPI_RANKS"] == "all"


def test_a_job_without_worker_sets_runs_its_master_as_the_progress_account():
    sim = ChainerSim(chainerjob(runPolicy={"progress": {}}))
    sim.sync()
    assert not sim.children[JOB_KEY], "the master waits for its ServiceAccount"
    sim.sync()
    master = sim.children[JOB_KEY]["chj-master"]["spec"]["template"]
    assert master["spec"]["serviceAccountName"] == PROGRESS and env_of(master)["MXJOB_PROGRESS_MPI_RANKS"] == "0"
    assert [s["name"] for s in sim.objects(RBAC, "RoleBinding")[PROGRESS]["subjects"]] == [PROGRESS]


def test_progress_asked_of_a_running_job_adds_its_children_and_keeps_the_master_and_workers():
    sim = running(chainerjob(workers={"ws": 2}))
    master_uid = sim.children[JOB_KEY]["chj-master"]["metadata"]["uid"]
    sim.edit({"runPolicy": {"progress": {}}})
    sim.sync()
    assert PROGRESS in sim.objects("v1", "ServiceAccount") and PROGRESS in sim.objects("v1", "ConfigMap")
    assert sim.children[JOB_KEY]["chj-master"]["metadata"]["uid"] == master_uid
    assert sim.children[STATEFULSET_KEY]["chj-workerset-ws"]["spec"]["updateStrategy"] == {"type": "OnDelete"}
    assert sim.state() == "Running"


# --- status ------------------------------------------------------------------------------------


def test_status_shows_the_report_and_the_hook_never_writes_the_reporters_data():
    sim = running(job(progress={}))
    report(sim, step=40, loss=0.5)
    sim.sync()
    progress = sim.status["progress"]
    assert progress == {"reporter": "rank-0", "attempt": 0, "step": 40, "total": 100, "progressPercentage": 40,
                        "metrics": [{"name": "loss", "value": "0.5"}], "lastUpdatedTime": rfc3339(sim.now)}
    assert not [c for c in sim.last["children"] if c["metadata"]["name"] == PROGRESS and "data" in c]
    sim.master("chj-master", succeeded=1, finished=("Complete", "", "done"))
    sim.sync()
    assert sim.state() == "Complete" and sim.status["progress"]["step"] == 40, "progress is kept at the end"


# --- stalls ------------------------------------------------------------------------------------


def test_report_says_the_job_may_have_stalled_and_a_report_clears_it():
    sim = running(job(stallPolicy={"timeoutSeconds": 60}))
    assert sim.last["resyncAfterSeconds"] == 60
    report(sim, step=10)
    sim.sync()
    sim.tick(61)
    sim.sync()
    cond = running_condition(sim)
    assert (cond["status"], cond["reason"]) == ("True", "ChainerJobStalled")
    assert "may have stalled: no progress report for 60 s" in cond["message"] and "rank-0 (last: step 10" in cond["message"]
    report(sim, step=11)
    sim.sync()
    assert running_condition(sim)["reason"] == "ChainerJobRunning" and sim.state() == "Running"


def test_a_job_silent_from_the_start_stalls_a_timeout_after_running():
    sim = running(job(stallPolicy={"timeoutSeconds": 60}))
    sim.tick(59)
    sim.sync()
    assert running_condition(sim)["reason"] == "ChainerJobRunning"
    assert sim.last["resyncAfterSeconds"] == pytest.approx(1)
    sim.tick(1)
    sim.sync()
    assert "no progress report within 60 s of running" in running_condition(sim)["message"]


def test_fail_job_first_warns_then_fails_the_job_deletes_the_master_and_stops_the_workers():
    sim = running(job(stallPolicy={"timeoutSeconds": 60, "action": "FailJob"}))
    sim.tick(60)
    sim.sync()
    assert "FailJob follows unless a report comes within 10 s" in running_condition(sim)["message"]
    assert sim.last["resyncAfterSeconds"] == 10 and sim.state() == "Running"
    sim.tick(10)
    sim.sync()
    assert sim.state() == "Failed"
    failed = sim.condition("Failed")
    assert failed["reason"] == "ChainerJobStalled"
    assert failed["message"].startswith("ChainerJob ns/chj stalled: no progress report within 60 s of running")
    # First the outcome record; the master Job goes on the sync that sees it (a stale parent with
    # stale ConfigMaps and the Job gone could otherwise create the master again).
    assert "chj-master" in sim.children[JOB_KEY] and "chj-outcome" in sim.objects("v1", "ConfigMap")
    sim.sync()
    assert "chj-master" not in sim.children[JOB_KEY], "the master Job (and its mpiexec) is deleted"
    assert sim.children[STATEFULSET_KEY]["chj-workerset-ws"]["spec"]["replicas"] == 0
    assert "active" not in sim.status
    sim.tick(600)
    sim.sync()
    assert sim.state() == "Failed" and "chj-master" not in sim.children[JOB_KEY], "never created again"


def test_a_report_within_the_warning_keeps_the_job_running():
    sim = running(job(stallPolicy={"timeoutSeconds": 60, "action": "FailJob"}))
    sim.tick(60)
    sim.sync()
    sim.tick(5)
    report(sim, step=1)
    sim.tick(5)
    sim.sync()
    assert sim.state() == "Running" and running_condition(sim)["reason"] == "ChainerJobRunning"
    assert "chj-master" in sim.children[JOB_KEY]


def test_a_stalled_job_whose_master_job_is_still_observed_stays_failed():
    """Metacontroller deletes the master Job after the answer that leaves it out; a sync that still
    sees it (a lagging cache, a finalizer) must neither revive the job nor answer the Job again."""
    sim = running(job(stallPolicy={"timeoutSeconds": 60, "action": "FailJob"}))
    sim.tick(60)
    sim.sync()
    sim.tick(10)
    request = sim.request()
    answer = sync_chainerjob(request, now=sim.now)
    assert answer["status"]["conditions"][-1]["type"] == "Failed"
    # The next sync is handed the status just written and the master Job it has not seen go yet.
    request["parent"]["status"] = answer["status"]
    again = sync_chainerjob(request, now=sim.now)
    assert again["status"] == answer["status"]
    # Kept until the outcome record is observed; then left out, and never answered again.
    [outcome] = [c for c in again["children"] if c["metadata"]["name"] == "chj-outcome"]
    request["children"]["ConfigMap.v1"]["chj-outcome"] = outcome
    last = sync_chainerjob(request, now=sim.now)
    assert last["status"] == answer["status"]
    assert not [c for c in last["children"] if c["kind"] == "Job"]


def test_a_stale_parent_after_fail_job_never_creates_the_master_again():
    """The risk the outcome record closes: the master Job is gone and the sync reads the parent of
    before the failure. The ConfigMaps are read after the Job's deletion, so they show the record."""
    sim = running(job(stallPolicy={"timeoutSeconds": 60, "action": "FailJob"}))
    before = sim.request()["parent"]["status"]
    sim.tick(70)
    sim.set_parent_status(sim.status)  # the warning was written
    sim.sync()
    sim.sync()
    sim.tick(10)
    sim.sync()
    sim.sync()
    assert sim.state() == "Failed" and "chj-master" not in sim.children[JOB_KEY]
    request = sim.request()
    request["parent"]["status"] = before
    answer = sync_chainerjob(request, now=sim.now)
    assert not [c for c in answer["children"] if c["kind"] == "Job"]
    assert answer["status"]["conditions"][-1]["type"] == "Failed"


# --- RestartJob ---------------------------------------------------------------------------------


def restart_job(**run_policy) -> dict:
    return job(stallPolicy={"timeoutSeconds": 60, "action": "RestartJob"}, **run_policy)


def stall(sim: ChainerSim) -> None:
    """The job falls silent past the timeout and the confirmation: RestartJob acts on the last sync."""
    sim.tick(60)
    sim.sync()
    sim.tick(10)
    sim.sync()


def labels(obj: dict) -> dict:
    return obj["metadata"]["labels"]


def test_restart_job_records_the_attempt_then_replaces_the_master_and_workers():
    sim = running(restart_job())
    old_master = sim.children[JOB_KEY]["chj-master"]["metadata"]["uid"]
    stall(sim)
    # The deciding sync writes the record and changes nothing else.
    restarting = sim.condition("Restarting")
    assert sim.state() == "Restarting" and sim.status["attempt"] == 1
    assert (restarting["status"], restarting["reason"]) == ("True", "ChainerJobStalled")
    assert restarting["message"].startswith("ChainerJob ns/chj is restarting as attempt 1: it stalled: no progress "
                                            "report within 60 s of running")
    assert restarting["message"].endswith("(restarts so far: 1 of runPolicy.maxRestarts 3).")
    assert sim.condition("Running")["status"] == "False"
    assert json.loads(sim.objects("v1", "ConfigMap")["chj-attempt-1"]["data"]["record"])["stalled"].startswith("no progress")
    assert sim.children[JOB_KEY]["chj-master"]["metadata"]["uid"] == old_master
    # The sync that sees the record deletes attempt 0's master Job and StatefulSet.
    sim.sync()
    assert not sim.children[JOB_KEY] and not sim.children[STATEFULSET_KEY]
    # Then attempt 1's are created, labelled, their pods told the attempt.
    sim.sync()
    [statefulset] = sim.children[STATEFULSET_KEY].values()
    assert labels(statefulset)["chainerjob.kubeflow.org/attempt"] == "1"
    assert env_of(statefulset["spec"]["template"])["MXJOB_ATTEMPT"] == "1"
    assert "chainerjob.kubeflow.org/attempt" not in statefulset["spec"]["selector"]["matchLabels"]
    assert not sim.children[JOB_KEY], "the master waits for the new workers"
    sim.all_ready()
    sim.sync()
    master = sim.children[JOB_KEY]["chj-master"]
    assert master["metadata"]["uid"] != old_master and labels(master)["chainerjob.kubeflow.org/attempt"] == "1"
    assert env_of(master["spec"]["template"])["MXJOB_ATTEMPT"] == "1"
    assert sim.state() == "Restarting"
    sim.master("chj-master", active=1)
    sim.sync()
    assert sim.state() == "Running" and sim.condition("Restarting")["status"] == "False"
    assert sim.condition("Restarting")["reason"] == "ChainerJobRestarted"
    assert sim.status["attempt"] == 1 and "chj-attempt-1" in sim.objects("v1", "ConfigMap")
    # Its pod succeeded, the Job not Complete yet (nothing active meanwhile): still not restarting.
    sim.master("chj-master", succeeded=1)
    sim.sync()
    assert sim.condition("Restarting")["status"] == "False"
    sim.master("chj-master", succeeded=1, finished=("Complete", "", "done"))
    sim.sync()
    assert sim.state() == "Complete" and sim.condition("Restarting")["status"] == "False"


def test_reports_count_for_their_attempt_and_the_clock_restarts_with_it():
    sim = running(restart_job())
    stall(sim)
    run_attempt(sim)
    sim.tick(59)
    sim.sync()
    assert sim.condition("Running")["reason"] == "ChainerJobRunning", "a new attempt gets a whole timeout"
    entry = {"attempt": 1, "step": 3, "time": rfc3339(sim.now)}
    sim.change("v1", "ConfigMap", PROGRESS, lambda cm: cm.setdefault("data", {}).update({"rank-0": json.dumps(entry)}))
    sim.sync()
    assert sim.status["progress"]["attempt"] == 1 and sim.status["progress"]["step"] == 3


@pytest.mark.parametrize("max_restarts", [0, 1], ids=["no-restart", "one-restart"])
def test_a_stall_past_max_restarts_fails_the_job(max_restarts):
    sim = running(restart_job(maxRestarts=max_restarts))
    for _ in range(max_restarts):
        stall(sim)
        run_attempt(sim)
    stall(sim)
    failed = sim.condition("Failed")
    assert sim.state() == "Failed" and failed["reason"] == "ChainerJobStalled"
    assert f"it has reached runPolicy.maxRestarts ({max_restarts})" in failed["message"]
    assert sim.status.get("attempt", 0) == max_restarts
    assert f"chj-attempt-{max_restarts + 1}" not in sim.objects("v1", "ConfigMap")


def test_a_stale_parent_after_the_restart_neither_counts_it_again_nor_brings_attempt_0_back():
    sim = running(restart_job())
    stall(sim)
    sim.sync()  # the record is seen: attempt 0's children are deleted
    request = sim.request()
    # The parent of before the restart (Running, no attempt), the children of now.
    request["parent"]["status"] = {k: v for k, v in sim.status.items() if k != "attempt"}
    request["parent"]["status"]["conditions"] = [c for c in sim.status["conditions"] if c["type"] != "Restarting"]
    answer = sync_chainerjob(request, now=sim.now)
    assert answer["status"]["attempt"] == 1
    names = sorted(c["metadata"]["name"] for c in answer["children"] if c["kind"] == "ConfigMap")
    assert "chj-attempt-2" not in names and "chj-attempt-1" in names
    made = [c for c in answer["children"] if c["kind"] in ("Job", "StatefulSet")]
    assert all(labels(c)["chainerjob.kubeflow.org/attempt"] == "1" for c in made), made


def test_stale_children_after_the_restart_answer_its_record_again_and_delete_nothing():
    """The status says attempt 1 began; the ConfigMaps do not show its record yet (an informer lag,
    or its create failed): the record is answered again, no second restart, attempt 0's children kept."""
    sim = running(restart_job())
    request_before = sim.request()
    stall(sim)
    request = request_before
    request["parent"]["status"] = sim.status
    answer = sync_chainerjob(request, now=sim.now)
    records = [c["metadata"]["name"] for c in answer["children"] if "-attempt-" in c["metadata"]["name"]]
    assert records == ["chj-attempt-1"] and answer["status"]["attempt"] == 1
    kinds = sorted(c["kind"] for c in answer["children"] if c["kind"] in ("Job", "StatefulSet"))
    assert kinds == ["Job", "StatefulSet"], "attempt 0's children stay until the record is observed"
    assert answer["status"]["conditions"] == sim.status["conditions"]


def test_the_first_sync_of_a_job_with_progress_answers_every_child_rule():
    parent = job(progress={})
    answer = sync_chainerjob({"parent": parent, "children": {k: {} for k in CHILD_KEYS}}, now=T0)
    kinds = sorted(c["kind"] for c in answer["children"])
    assert kinds == ["ConfigMap", "ConfigMap", "Role", "Role", "RoleBinding", "RoleBinding", "Service",
                     "ServiceAccount", "ServiceAccount"]
