"""ChainerJob suspend (spec.runPolicy.suspend; docs/chainerjob.md, "Suspend"), stepped over the
Metacontroller emulation: every sync checks its answer is a fixed point (helpers/mcsim.py)."""
from __future__ import annotations

import json

import pytest
from helpers.chainersim import JOB_KEY, STATEFULSET_KEY, ChainerSim, chainerjob, gang_controller

from hooks.chainerjob.spec import SpecError, parse_chainerjob

ATTEMPT_LABEL = "chainerjob.kubeflow.org/attempt"
SUSPENDED_SAYS = ("ChainerJob ns/chj is suspended: it has no master Job and no worker pods; it starts again, "
                  "as a new attempt, when spec.runPolicy.suspend is false.")


def running(workers: int = 2, **run_policy) -> ChainerSim:
    """A new job synced until its master runs (its workers ready first, when it has some)."""
    sim = ChainerSim(chainerjob(workers={"ws": workers} if workers else None, runPolicy=run_policy))
    run_attempt(sim)
    return sim


def run_attempt(sim: ChainerSim) -> None:
    for _ in range(2):
        sim.sync()
    if sim.children[STATEFULSET_KEY]:
        assert not sim.children[JOB_KEY], "the master waits for its workers"
        sim.all_ready()
        sim.sync()
    sim.master("chj-master", active=1)
    sim.sync()
    assert sim.state() == "Running", sim.status


def suspend(sim: ChainerSim, value: bool = True) -> None:
    sim.edit({"runPolicy": {"suspend": value}})


def record(sim: ChainerSim, attempt: int) -> dict:
    return json.loads(sim.objects("v1", "ConfigMap")[f"chj-attempt-{attempt}"]["data"]["record"])


def launched(sim: ChainerSim) -> list[str]:
    return [entry for entry in sim.created if entry.split(".")[0] in ("Job", "StatefulSet")]


# --- spec --------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["true", 1, None], ids=["string", "number", "null"])
def test_suspend_must_be_a_boolean_and_the_message_names_the_field(value):
    parent = chainerjob(runPolicy={"suspend": value})
    if value is None:
        assert parse_chainerjob(parent).suspend is False
        return
    with pytest.raises(SpecError) as err:
        parse_chainerjob(parent)
    assert err.value.problems == [f"spec.runPolicy.suspend: must be true or false, got {value!r}"]


def test_suspend_is_off_unless_asked():
    assert parse_chainerjob(chainerjob()).suspend is False
    assert parse_chainerjob(chainerjob(runPolicy={"suspend": True})).suspend is True


# --- a running job -----------------------------------------------------------------------------


@pytest.mark.parametrize("workers", [0, 2], ids=["non-distributed", "distributed"])
def test_suspending_records_an_attempt_then_deletes_the_master_job_and_the_workers(workers):
    sim = running(workers)
    master_uid = sim.children[JOB_KEY]["chj-master"]["metadata"]["uid"]
    suspend(sim)
    sim.sync()
    # The deciding sync writes the record and keeps every child; the status already says Suspended.
    assert sim.state() == "Suspended" and sim.status["attempt"] == 1
    assert record(sim, 1)["suspended"] == "spec.runPolicy.suspend"
    assert sim.children[JOB_KEY]["chj-master"]["metadata"]["uid"] == master_uid
    suspended = sim.condition("Suspended")
    assert (suspended["status"], suspended["reason"], suspended["message"]) == ("True", "ChainerJobSuspended",
                                                                                SUSPENDED_SAYS)
    assert (sim.condition("Running")["status"], sim.condition("Running")["reason"]) == ("False", "ChainerJobSuspended")
    assert "active" not in sim.status and "startTime" not in sim.status
    # The sync that sees the record leaves the master Job and the StatefulSets out: deleted.
    sim.sync()
    assert not sim.children[JOB_KEY] and not sim.children[STATEFULSET_KEY]
    mark = len(sim.created)
    for _ in range(3):
        sim.tick(60)
        sim.sync()
    assert sim.created[mark:] == [] and sim.state() == "Suspended"
    if workers:
        assert sim.status["workerSets"] == {"ws": {"replicas": 0, "readyReplicas": 0}}
        # What the workers need to launch again (ConfigMap, Service, RBAC) stays.
        assert "chj-assets" in sim.objects("v1", "ConfigMap")


@pytest.mark.parametrize("workers", [0, 2], ids=["non-distributed", "distributed"])
def test_resuming_runs_the_job_again_as_the_next_attempt_and_it_completes(workers):
    sim = running(workers)
    suspend(sim)
    sim.sync()
    sim.sync()
    sim.tick(60)
    suspend(sim, False)
    run_attempt(sim)
    master = sim.children[JOB_KEY]["chj-master"]
    assert master["metadata"]["labels"][ATTEMPT_LABEL] == "1"
    for sts in sim.children[STATEFULSET_KEY].values():
        assert sts["metadata"]["labels"][ATTEMPT_LABEL] == "1" and sts["spec"]["replicas"] == workers
    resumed = sim.condition("Suspended")
    assert (resumed["status"], resumed["reason"]) == ("False", "ChainerJobResumed")
    assert resumed["message"] == "ChainerJob ns/chj is resumed: it starts again as attempt 1."
    assert resumed["lastTransitionTime"] == "2026-11-21T10:01:00Z"
    # A resume is no restart: Restarting is never said.
    assert sim.condition("Restarting") is None
    sim.master("chj-master", succeeded=1, finished=("Complete", "CompletionsReached", "done"))
    sim.sync()
    assert sim.state() == "Complete" and sim.status["attempt"] == 1


def test_a_job_created_suspended_launches_nothing_until_resumed_and_then_runs_as_attempt_0():
    sim = ChainerSim(chainerjob(workers={"ws": 2}, runPolicy={"suspend": True}))
    for _ in range(3):
        sim.sync()
    assert sim.state() == "Suspended" and launched(sim) == []
    assert "attempt" not in sim.status and not any("-attempt-" in n for n in sim.objects("v1", "ConfigMap"))
    suspend(sim, False)
    run_attempt(sim)
    assert ATTEMPT_LABEL not in sim.children[JOB_KEY]["chj-master"]["metadata"]["labels"]
    assert sim.condition("Suspended")["reason"] == "ChainerJobResumed"
    assert sim.condition("Suspended")["message"] == "ChainerJob ns/chj is resumed: it starts again."


def test_suspending_a_job_that_has_not_launched_again_records_no_new_attempt():
    """Suspended, resumed, and suspended again before the new attempt launched anything: still attempt 1."""
    sim = running()
    suspend(sim)
    sim.sync()
    sim.sync()
    suspend(sim, False)
    suspend(sim)
    for _ in range(3):
        sim.sync()
    assert sim.status["attempt"] == 1 and "chj-attempt-2" not in sim.objects("v1", "ConfigMap")


def test_suspend_then_resume_twice_counts_attempts_one_by_one():
    sim = running()
    for attempt in (1, 2):
        suspend(sim)
        sim.sync()
        sim.sync()
        suspend(sim, False)
        run_attempt(sim)
        assert sim.status["attempt"] == attempt
        assert sim.children[JOB_KEY]["chj-master"]["metadata"]["labels"][ATTEMPT_LABEL] == str(attempt)


@pytest.mark.parametrize("outcome", ["Complete", "Failed"])
def test_a_finished_job_stays_finished_when_suspended(outcome):
    sim = running()
    counts = {"succeeded": 1} if outcome == "Complete" else {"failed": 1}
    sim.master("chj-master", **counts, finished=(outcome, "Reason", "done"))
    sim.sync()
    sim.sync()
    suspend(sim)
    for _ in range(3):
        sim.sync()
    assert sim.state() == outcome and sim.condition("Suspended") is None
    assert "chj-master" in sim.children[JOB_KEY], "the finished master Job is kept, as before"
    assert not any("-attempt-" in n for n in sim.objects("v1", "ConfigMap"))


def test_suspensions_are_not_counted_against_max_restarts():
    """maxRestarts 1: one suspension, then a stall may still restart the job once."""
    sim = running(stallPolicy={"timeoutSeconds": 60, "action": "RestartJob"}, maxRestarts=1)
    suspend(sim)
    sim.sync()
    sim.sync()
    sim.edit({"runPolicy": {"suspend": False, "stallPolicy": {"timeoutSeconds": 60, "action": "RestartJob"},
                            "maxRestarts": 1}})
    run_attempt(sim)
    sim.tick(60)
    sim.sync()  # the stall is said
    sim.tick(10)
    sim.sync()  # and RestartJob acts
    assert sim.state() == "Restarting" and sim.status["attempt"] == 2, sim.status
    assert sim.condition("Restarting")["message"].endswith("(restarts so far: 1 of runPolicy.maxRestarts 1).")


def test_a_suspended_job_under_a_gang_gives_its_podgroup_back():
    sim = ChainerSim(chainerjob(workers={"ws": 2}), controller=gang_controller("scheduling.volcano.sh/v1beta1"))
    for _ in range(3):
        sim.sync()
    podgroups = sim.objects("scheduling.volcano.sh/v1beta1", "PodGroup")
    assert list(podgroups) == ["chj"]
    suspend(sim)
    for _ in range(3):
        sim.sync()
    assert sim.state() == "Suspended"
    assert sim.objects("scheduling.volcano.sh/v1beta1", "PodGroup") == {}
    assert not sim.children[JOB_KEY] and not sim.children[STATEFULSET_KEY]
