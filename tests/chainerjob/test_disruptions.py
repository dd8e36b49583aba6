"""A ChainerJob pod taken away by a disruption (its DisruptionTarget condition True: kube-scheduler's
preemption, the eviction API), stepped over the Metacontroller emulation (helpers/chainersim.py): the
whole job restarts as a new attempt naming the pod and the disruption, counted against
runPolicy.maxRestarts; past it the job fails (docs/chainerjob.md, "Disruptions")."""
from __future__ import annotations

import json

import pytest
from helpers.chainersim import JOB_KEY, STATEFULSET_KEY, ChainerSim, chainerjob, gang_controller
from helpers.stalewatch import MODES, Watch

from hooks.shared.gang import COSCHEDULING_API, KUBERNETES_API, VOLCANO_API
from localcluster.metacontroller import Stale

PREEMPTED = ("PreemptionByScheduler", "default-scheduler: preempting to accommodate a higher priority pod")
WORKER = "chj-workerset-ws-1"
MASTER_POD = "chj-master-abcde"
LOST = f"(no exit code, reason {PREEMPTED[0]}: '{PREEMPTED[1]}')"
ATTEMPT_LABEL = "chainerjob.kubeflow.org/attempt"


def started(*, controller: dict | None = None, **run_policy) -> ChainerSim:
    """A job of two workers whose master Job runs: its pods observed running."""
    sim = ChainerSim(chainerjob(workers={"ws": 2}, runPolicy=run_policy), controller=controller)
    run(sim)
    return sim


def run(sim: ChainerSim, attempt: int = 0) -> None:
    """Sync until the current attempt's workers and master run, and the job says so."""
    for _ in range(3):
        sim.sync()
    for name in ("chj-workerset-ws-0", WORKER):
        sim.worker_pod(name)
    sim.all_ready()
    for _ in range(2):
        sim.sync()
    sim.master("chj-master", active=1)
    sim.master_pod(MASTER_POD if not attempt else f"{MASTER_POD}-{attempt}", phase="Running")
    for _ in range(2):
        sim.sync()
    assert sim.state() == "Running", sim.status


def new_attempt(sim: ChainerSim) -> None:
    """The old attempt's pods go with their master Job and StatefulSets (the garbage collector)."""
    for name, pod in sim.objects("v1", "Pod").items():
        if pod["metadata"].get("labels", {}).get(ATTEMPT_LABEL) is None:
            sim.remove("v1", "Pod", name)


def restarting_message(pod: str) -> str:
    return (f"ChainerJob ns/chj is restarting as attempt 1: pod {pod} was lost {LOST}; its master Job and worker "
            "StatefulSets are deleted and created again with MXJOB_ATTEMPT=1 (restarts so far: 1 of "
            "runPolicy.maxRestarts 3).")


@pytest.mark.parametrize("seen_as", ["Running", "Failed"], ids=["seen-going", "seen-stopped"])
@pytest.mark.parametrize("victim", [WORKER, MASTER_POD], ids=["worker", "master"])
def test_a_preempted_pod_restarts_the_whole_job_as_a_new_attempt_naming_it_and_the_preemption(victim, seen_as):
    sim = started()
    old_master = sim.children[JOB_KEY]["chj-master"]["metadata"]["uid"]
    sim.disrupt(victim, *PREEMPTED, phase=seen_as)
    sim.sync()
    restarting = sim.condition("Restarting")
    assert (restarting["status"], restarting["reason"]) == ("True", "ChainerJobRestarting")
    assert restarting["message"] == restarting_message(victim)
    assert sim.condition("Running")["status"] == "False" and sim.status["attempt"] == 1
    record = json.loads(sim.objects("v1", "ConfigMap")["chj-attempt-1"]["data"]["record"])
    assert record["lost"] == f"pod {victim} was lost {LOST}"
    # The deciding sync deletes nothing; the kubelet stopping the victim changes nothing.
    assert sim.children[JOB_KEY]["chj-master"]["metadata"]["uid"] == old_master
    if seen_as == "Running":
        sim.disrupt(victim, *PREEMPTED, phase="Failed")
    sim.sync()
    assert sim.condition("Restarting")["message"] == restarting_message(victim)
    assert not sim.children[JOB_KEY] and not sim.children[STATEFULSET_KEY], "attempt 0's master Job and workers go"
    new_attempt(sim)
    run(sim, attempt=1)
    restarted = sim.condition("Restarting")
    assert (restarted["status"], restarted["reason"]) == ("False", "ChainerJobRestarted")
    assert restarted["message"] == f"ChainerJob ns/chj: attempt 1 runs (the job was restarted after pod {victim} was lost {LOST})."
    assert sim.children[JOB_KEY]["chj-master"]["metadata"]["labels"][ATTEMPT_LABEL] == "1"
    sim.master("chj-master", succeeded=1, finished=("Complete", "", "done"))
    sim.sync()
    assert sim.state() == "Complete" and sim.status["attempt"] == 1


@pytest.mark.parametrize("api_version", [VOLCANO_API, COSCHEDULING_API, KUBERNETES_API],
                         ids=["volcano", "scheduler-plugins", "kubernetes"])
def test_under_a_gang_a_restart_says_restarting_and_never_that_the_master_waits_for_its_workers(api_version):
    """Under a gang the master never waits for ready workers (the gang starts them together), so a restart
    must not say it does: Waiting stays as the gang left it, and every sync of the restart is a fixed point
    (each `sync` checks it), where Waiting used to flip to WaitingForWorkers and back."""
    sim = started(controller=gang_controller(api_version))
    waiting = sim.condition("Waiting")
    assert (waiting["status"], waiting["reason"]) == ("False", "PodGroupCreated")
    sim.disrupt(WORKER, *PREEMPTED, phase="Failed")
    for _ in range(3):
        sim.sync()
        assert sim.condition("Waiting") == waiting
        assert sim.condition("Restarting")["status"] == "True"
    new_attempt(sim)
    run(sim, attempt=1)
    assert sim.condition("Waiting")["reason"] == "PodGroupCreated"
    assert sim.condition("Restarting")["reason"] == "ChainerJobRestarted"


@pytest.mark.parametrize("reason", ["EvictionByEvictionAPI", "DeletionByTaintManager", "TerminationByKubelet"])
def test_every_disruption_reason_restarts_the_job_and_is_named(reason):
    sim = started()
    sim.disrupt(WORKER, reason, "taken")
    sim.sync()
    assert f"pod {WORKER} was lost (no exit code, reason {reason}: 'taken')" in sim.condition("Restarting")["message"]


def test_two_pods_taken_in_one_sync_are_one_restart_naming_both():
    sim = started()
    sim.disrupt("chj-workerset-ws-0", *PREEMPTED)
    sim.disrupt(WORKER, *PREEMPTED)
    sim.sync()
    assert sim.status["attempt"] == 1
    assert f": pod chj-workerset-ws-0 was lost {LOST}; pod {WORKER} was lost {LOST}; its master" in \
        sim.condition("Restarting")["message"]


def test_a_pod_deleted_without_a_disruption_restarts_nothing():
    """kubectl delete: the StatefulSet recreates the worker, as before (docs/chainerjob.md, "A lost worker or master")."""
    sim = started()
    sim.change("v1", "Pod", WORKER, lambda p: p["spec"].update(nodeName="node-1"))
    sim.store.delete("v1", "Pod", sim.namespace, WORKER)
    sim.sync()
    assert sim.condition("Restarting") is None and "attempt" not in sim.status


def test_a_worker_preempted_before_the_master_job_exists_is_only_replaced():
    """Nothing is lost yet: the master waits for every worker to be ready, the replacement too."""
    sim = ChainerSim(chainerjob(workers={"ws": 2}))
    for _ in range(2):
        sim.sync()
    sim.worker_pod(WORKER)
    sim.disrupt(WORKER, *PREEMPTED)
    sim.sync()
    assert sim.condition("Restarting") is None and not sim.children[JOB_KEY]
    assert sim.state() == "Waiting"


def test_a_disruption_of_a_finished_job_changes_nothing():
    sim = started()
    sim.master("chj-master", succeeded=1, finished=("Complete", "", "done"))
    sim.sync()
    sim.disrupt(WORKER, *PREEMPTED)
    sim.sync()
    assert sim.state() == "Complete" and "attempt" not in sim.status


@pytest.mark.parametrize("max_restarts", [0, 1], ids=["no-restart", "one-restart"])
def test_a_pod_taken_past_max_restarts_fails_the_job_naming_it_then_stops_master_and_workers(max_restarts):
    sim = started(maxRestarts=max_restarts)
    for attempt in range(1, max_restarts + 1):
        sim.disrupt(WORKER, *PREEMPTED)
        for _ in range(2):
            sim.sync()
        new_attempt(sim)
        run(sim, attempt)
    sim.disrupt(WORKER, *PREEMPTED)
    sim.sync()
    failed = sim.condition("Failed")
    assert sim.state() == "Failed" and failed["reason"] == "ChainerJobFailed"
    assert failed["message"] == (f"ChainerJob ns/chj has reached runPolicy.maxRestarts ({max_restarts}): pod {WORKER} "
                                 f"was lost {LOST}; so its master Job is deleted and its workers scaled to 0.")
    assert sim.condition("Running")["message"] == failed["message"]
    assert sim.status.get("attempt", 0) == max_restarts
    assert f"chj-attempt-{max_restarts + 1}" not in sim.objects("v1", "ConfigMap")
    sim.sync()  # the outcome record is observed: the master Job goes, the workers are at 0
    assert not sim.children[JOB_KEY]
    assert all(s["spec"]["replicas"] == 0 for s in sim.children[STATEFULSET_KEY].values())
    assert sim.condition("Failed")["message"] == failed["message"]


@pytest.mark.parametrize("stale", MODES, ids=["fresh", "stale-parent", "stale-children"])
def test_a_preemption_is_one_restart_whatever_the_syncs_read(stale: Stale | None):
    """A sync that reads the status of before the restart, or the children of the sync before (the record
    not seen yet, attempt 0's children still there), neither restarts twice nor forgets the restart."""
    sim = ChainerSim(chainerjob(workers={"ws": 2}), stale=stale)
    watch = Watch(sim, "Job")
    watch.settle()
    for name in ("chj-workerset-ws-0", WORKER):
        sim.worker_pod(name)
    sim.all_ready()
    watch.settle()
    sim.master("chj-master", active=1)
    sim.master_pod(MASTER_POD, phase="Running")
    watch.settle()
    sim.disrupt(WORKER, *PREEMPTED)
    mark = len(watch.statuses)
    watch.sync()
    # The victim is gone at once (no sync sees it again) and the StatefulSet makes its successor.
    sim.tick(1)
    sim.remove("v1", "Pod", WORKER)
    sim.worker_pod(WORKER, phase="Pending")
    for _ in range(3):
        watch.sync()
    assert sim.status["attempt"] == 1 and sim.condition("Restarting")["message"] == restarting_message(WORKER)
    # Every status written since says the restart (none forgets it, as a stale read could make it).
    assert [s.get("attempt") for s in watch.statuses[mark:]] == [1] * (len(watch.statuses) - mark)
    new_attempt(sim)
    watch.settle()
    sim.all_ready()
    watch.settle()
    sim.master("chj-master", active=1)
    watch.settle()
    sim.master("chj-master", succeeded=1, finished=("Complete", "", "done"))
    watch.settle()
    assert sim.state() == "Complete" and sim.status["attempt"] == 1
    assert sorted(n for n in sim.objects("v1", "ConfigMap") if "-attempt-" in n) == ["chj-attempt-1"]
    assert [e for e in sim.created if e.startswith("Job")] == ["Job.batch/v1/chj-master"] * 2
    watch.check()


def test_while_the_new_masters_pod_waits_for_room_restarting_says_why():
    """The preemptor holds the room: the new attempt's master pod is Pending, and the scheduler's reason is said."""
    sim = started()
    sim.disrupt(MASTER_POD, *PREEMPTED)
    for _ in range(2):
        sim.sync()
    new_attempt(sim)
    for _ in range(2):
        sim.sync()
    for name in ("chj-workerset-ws-0", WORKER):
        sim.worker_pod(name)
    sim.all_ready()
    sim.sync()
    assert "chj-master" in sim.children[JOB_KEY]
    sim.master_pod("chj-master-fghij", phase="Pending")
    held = "0/1 nodes are available: 1 Insufficient cpu. preemption: 0/1 nodes are available"
    sim.change("v1", "Pod", "chj-master-fghij", lambda p: p["metadata"]["labels"].update({ATTEMPT_LABEL: "1"}))
    sim.write_status("v1", "Pod", "chj-master-fghij", {"phase": "Pending", "conditions": [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": held}]})
    sim.sync()
    restarting = sim.condition("Restarting")
    assert restarting["status"] == "True" and sim.state() == "Restarting"
    assert restarting["message"] == restarting_message(MASTER_POD).removesuffix(".") + (
        f"; it waits for the scheduler: pod chj-master-fghij is not scheduled: {held}.")
    sim.master("chj-master", active=1)
    sim.sync()
    assert sim.state() == "Running" and sim.condition("Restarting")["status"] == "False"


def test_the_reports_of_the_attempt_a_preemption_ends_are_not_shown_from_the_deciding_sync_on():
    """As for a stall restart: the new attempt's reports count (none yet), so the sync after says the same."""
    sim = started(progress={})
    entry = {"attempt": 0, "step": 7, "time": "2026-11-21T10:00:00Z"}
    sim.change("v1", "ConfigMap", "chj-progress",
               lambda cm: cm.setdefault("data", {}).update({"rank-0": json.dumps(entry)}))
    sim.sync()
    assert sim.status["progress"]["step"] == 7
    sim.disrupt(WORKER, *PREEMPTED)
    sim.sync()
    assert sim.status["attempt"] == 1 and "progress" not in sim.status
