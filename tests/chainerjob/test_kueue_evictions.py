"""A running ChainerJob whose pod group Kueue stops (evicts, preempts, deactivates, deletes the Workload of) restarts
whole as a new attempt in a new pod group, which Kueue queues and admits again, not counted against
runPolicy.maxRestarts, as an MXJob's eviction is not counted (one rule: hooks.shared.kueue; docs/ecosystem.md,
"ChainerJob through Kueue").

Kueue v0.17.0 (pkg/controller/jobs/pod `Stop`) applies `TerminationTarget` (True, its stop reason, its message)
to each pod of the group and deletes it; `ChainerSim.evict` plays that. Every sync checks its answer is a fixed
point (helpers/mcsim.py); the stale-read case runs over the emulation's stale modes (helpers/stalewatch.py).
The real Kueue's side is tests/localcluster/test_kueue_chainer.py.
"""
from __future__ import annotations

import json

import pytest
from helpers.chainersim import JOB_KEY, STATEFULSET_KEY, ChainerSim, chainerjob
from helpers.kueue_stops import PREEMPTED, PREEMPTED_MESSAGE, kueue_stops
from helpers.stalewatch import MODES, Watch, terminal

from localcluster.metacontroller import Stale

QUEUE = "kueue.x-k8s.io/queue-name"
GROUP = "kueue.x-k8s.io/pod-group-name"
ATTEMPT_LABEL = "chainerjob.kubeflow.org/attempt"
GATE = "kueue.x-k8s.io/admission"
MASTER = "chj-master"
WORKERS = ("chj-workerset-ws-0", "chj-workerset-ws-1")
KUEUE_STOPS = kueue_stops("ns/chj")
EVICTED = f"Kueue evicted it ({PREEMPTED}: '{PREEMPTED_MESSAGE}')"


def queued(**run_policy) -> dict:
    parent = chainerjob(workers={"ws": 2}, **({"runPolicy": run_policy} if run_policy else {}))
    parent["metadata"]["labels"] = {QUEUE: "q"}
    return parent


def master_pod(attempt: int) -> str:
    return "chj-master-abcde" if not attempt else f"chj-master-abcde-{attempt}"


def pods_of(sim: ChainerSim, attempt: int) -> list[str]:
    return sorted(n for n, p in sim.objects("v1", "Pod").items()
                  if int(p["metadata"]["labels"].get(ATTEMPT_LABEL, "0")) == attempt)


def run(sim: ChainerSim, attempt: int = 0) -> None:
    """Kueue admits the attempt's group: its master's and workers' pods run, and the job says so."""
    for _ in range(2):
        sim.sync()
    for name in WORKERS:
        sim.worker_pod(name)
    sim.all_ready()
    sim.master(MASTER, active=1)
    sim.master_pod(master_pod(attempt), phase="Running")
    for _ in range(2):
        sim.sync()
    assert sim.state() == "Running", sim.status


def started(**run_policy) -> ChainerSim:
    sim = ChainerSim(queued(**run_policy), kueue_pod_groups="true")
    run(sim)
    return sim


def evict_all(sim: ChainerSim, attempt: int = 0, reason: str = PREEMPTED, *, phase: str = "Running") -> None:
    for name in pods_of(sim, attempt):
        sim.evict(name, reason, KUEUE_STOPS[reason], phase=phase)


def old_pods_go(sim: ChainerSim, attempt: int) -> None:
    """The pods of the attempts before `attempt` go with their master Job and StatefulSets (the garbage collector)."""
    for name in list(sim.objects("v1", "Pod")):
        if name not in pods_of(sim, attempt):
            sim.remove("v1", "Pod", name)


def requeued(sim: ChainerSim, attempt: int) -> None:
    """The restart's syncs: the old attempt's children go, then the new attempt's are created."""
    sim.sync()
    old_pods_go(sim, attempt)
    for _ in range(2):
        sim.sync()


def record(sim: ChainerSim, n: int) -> dict:
    return json.loads(sim.objects("v1", "ConfigMap")[f"chj-attempt-{n}"]["data"]["record"])


def restarting_message(attempt: int, cause: str = EVICTED, *, counted: int = 0, budget: int = 3) -> str:
    return (f"ChainerJob ns/chj is restarting as attempt {attempt}: {cause}; its master Job and worker StatefulSets "
            f"are deleted and created again with MXJOB_ATTEMPT={attempt}, in a new pod group that Kueue queues and "
            f"admits again; an eviction by the queue is not counted against runPolicy.maxRestarts (restarts so far: "
            f"{counted} of runPolicy.maxRestarts {budget}).")


def gate(sim: ChainerSim, name: str) -> None:
    """Kueue's pod webhook holds a new pod of a queued group at its admission gate."""
    sim.change("v1", "Pod", name, lambda p: p["spec"].update(schedulingGates=[{"name": GATE}]))
    sim.write_status("v1", "Pod", name, {"phase": "Pending", "conditions": [
        {"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"}]})


@pytest.mark.parametrize("seen_as", ["Running", "Failed"], ids=["seen-going", "seen-stopped"])
def test_an_evicted_job_restarts_whole_in_a_new_group_uncounted_with_max_restarts_0_and_completes(seen_as):
    sim = started(maxRestarts=0)
    old_master = sim.children[JOB_KEY][MASTER]["metadata"]["uid"]
    evict_all(sim, phase=seen_as)
    sim.sync()
    restarting = sim.condition("Restarting")
    assert (restarting["status"], restarting["reason"]) == ("True", "ChainerJobEvictedByQueue")
    assert restarting["message"] == restarting_message(1, budget=0)
    running = sim.condition("Running")
    assert (running["status"], running["reason"]) == ("False", "ChainerJobEvictedByQueue")
    assert sim.status["attempt"] == 1 and sim.condition("Failed") is None
    assert record(sim, 1)["queueEviction"] == {"reason": PREEMPTED, "message": PREEMPTED_MESSAGE}
    assert sim.children[JOB_KEY][MASTER]["metadata"]["uid"] == old_master, "the deciding sync deletes nothing"
    requeued(sim, 1)
    assert sim.condition("Restarting")["message"] == restarting_message(1, budget=0)
    # The new attempt's master Job and StatefulSets form a new pod group, so Kueue makes a new Workload.
    templates = [obj["spec"]["template"]["metadata"]["labels"] for key in (JOB_KEY, STATEFULSET_KEY)
                 for obj in sim.children[key].values()]
    assert len(templates) == 2 and {t[GROUP] for t in templates} == {"chj-uid-chj-1"}
    run(sim, attempt=1)
    restarted = sim.condition("Restarting")
    assert (restarted["status"], restarted["reason"]) == ("False", "ChainerJobRestarted")
    assert restarted["message"] == f"ChainerJob ns/chj: attempt 1 runs (the job was restarted after {EVICTED})."
    sim.master(MASTER, succeeded=1, finished=("Complete", "", "done"))
    sim.sync()
    assert sim.state() == "Complete" and sim.status["attempt"] == 1


def test_while_the_new_group_waits_the_job_says_it_was_evicted_and_waits_for_kueue():
    """The preemptor holds the quota: every pod of attempt 1 is gated; Restarting names the eviction, Waiting Kueue."""
    sim = started()
    evict_all(sim)
    requeued(sim, 1)
    for name in WORKERS:
        sim.worker_pod(name, phase="Pending")
        gate(sim, name)
    sim.master(MASTER, active=1)  # a Job counts its gated pod as active
    sim.master_pod(master_pod(1), phase="Pending")
    gate(sim, master_pod(1))
    for _ in range(2):
        sim.sync()
    assert sim.state() == "Restarting"
    restarting = sim.condition("Restarting")
    assert (restarting["status"], restarting["reason"]) == ("True", "ChainerJobEvictedByQueue")
    assert restarting["message"] == restarting_message(1)
    waiting = sim.condition("Waiting")
    assert (waiting["status"], waiting["reason"]) == ("True", "WaitingForKueue")
    assert waiting["message"] == (
        "ChainerJob ns/chj is waiting for Kueue to admit its pod group (the master and every worker, admitted "
        f"together); it waits for Kueue: pods {master_pod(1)}, {WORKERS[0]}, {WORKERS[1]} are not admitted: "
        "LocalQueue q has not admitted them yet.")
    assert sim.condition("Running")["status"] == "False"


@pytest.mark.parametrize("reason", KUEUE_STOPS, ids=list(KUEUE_STOPS))
def test_every_reason_kueue_stops_a_group_for_is_an_uncounted_restart_naming_it(reason):
    sim = started(maxRestarts=0)
    evict_all(sim, reason=reason)
    sim.sync()
    cause = f"Kueue evicted it ({reason}: '{KUEUE_STOPS[reason]}')"
    assert sim.condition("Restarting")["message"] == restarting_message(1, cause, budget=0)
    requeued(sim, 1)
    run(sim, attempt=1)
    assert sim.status["attempt"] == 1 and sim.condition("Failed") is None


@pytest.mark.parametrize("victims", ["master", "one-worker", "all"])
def test_any_pod_of_the_group_seen_evicted_restarts_the_job(victims):
    """Kueue marks every pod of the group; a sync may see only some of them marked yet."""
    sim = started()
    names = {"master": [master_pod(0)], "one-worker": [WORKERS[1]], "all": pods_of(sim, 0)}[victims]
    for name in names:
        sim.evict(name, PREEMPTED, PREEMPTED_MESSAGE)
    sim.sync()
    assert sim.condition("Restarting")["message"] == restarting_message(1)


def test_two_evictions_in_a_row_are_two_uncounted_attempts():
    sim = started(maxRestarts=0)
    for attempt in (1, 2):
        evict_all(sim, attempt - 1)
        sim.sync()
        assert sim.condition("Restarting")["message"] == restarting_message(attempt, budget=0)
        requeued(sim, attempt)
        run(sim, attempt)
    assert sorted(n for n in sim.objects("v1", "ConfigMap") if "-attempt-" in n) == ["chj-attempt-1", "chj-attempt-2"]
    sim.master(MASTER, succeeded=1, finished=("Complete", "", "done"))
    sim.sync()
    assert sim.state() == "Complete" and sim.status["attempt"] == 2


def test_a_disruption_after_an_eviction_still_counts():
    """Only the eviction is free: a pod kube-scheduler preempts later is a counted loss, past maxRestarts 0 a failure."""
    sim = started(maxRestarts=0)
    evict_all(sim)
    sim.sync()
    requeued(sim, 1)
    run(sim, attempt=1)
    sim.disrupt(WORKERS[1], "PreemptionByScheduler", "preempted")
    sim.sync()
    failed = sim.condition("Failed")
    assert sim.state() == "Failed" and failed["message"].startswith(
        f"ChainerJob ns/chj has reached runPolicy.maxRestarts (0): pod {WORKERS[1]} was lost")


def test_an_eviction_after_a_counted_restart_says_the_count_so_far():
    sim = started(maxRestarts=2)
    sim.disrupt(WORKERS[0], "PreemptionByScheduler", "preempted")
    sim.sync()
    requeued(sim, 1)
    run(sim, attempt=1)
    evict_all(sim, 1)
    sim.sync()
    assert sim.condition("Restarting")["message"] == restarting_message(2, counted=1, budget=2)


@pytest.mark.parametrize("how", ["suspended", "complete", "not-true", "succeeded-pod"])
def test_no_restart_when_the_job_cannot_run_on_or_nothing_was_evicted(how):
    sim = started()
    if how == "suspended":
        sim.edit({"runPolicy": {"suspend": True}})
        sim.sync()
    elif how == "complete":
        sim.master(MASTER, succeeded=1, finished=("Complete", "", "done"))
        sim.sync()
    if how == "not-true":
        sim.write_status("v1", "Pod", WORKERS[0], {"phase": "Running", "conditions": [
            {"type": "TerminationTarget", "status": "False", "reason": PREEMPTED, "message": "m"}]})
    elif how == "succeeded-pod":  # Kueue deletes a group's finished pods too when its Workload is deleted
        sim.master_pod(master_pod(0), phase="Succeeded", exit_code=0)
        sim.change("v1", "Pod", master_pod(0), lambda p: p["status"].update(conditions=[
            {"type": "TerminationTarget", "status": "True", "reason": "WorkloadDeleted", "message": "gone"}]))
    elif sim.objects("v1", "Pod"):
        evict_all(sim)
    attempt = sim.status.get("attempt")
    for _ in range(2):
        sim.sync()
    assert sim.status.get("attempt") == attempt and sim.condition("Restarting") is None
    assert not any("-attempt-" in n and n != "chj-attempt-1" for n in sim.objects("v1", "ConfigMap"))


@pytest.mark.parametrize("stale", MODES, ids=["fresh", "stale-parent", "stale-children"])
def test_an_eviction_is_one_uncounted_restart_whatever_the_syncs_read(stale: Stale | None):
    """A sync that reads the status of before the restart, or the children of the sync before (the record not
    seen yet, attempt 0's children still there), neither restarts twice nor counts the eviction."""
    sim = ChainerSim(queued(maxRestarts=0), kueue_pod_groups="true", stale=stale)
    watch = Watch(sim, "Job")
    watch.settle()
    for name in WORKERS:
        sim.worker_pod(name)
    sim.all_ready()
    sim.master(MASTER, active=1)
    sim.master_pod(master_pod(0), phase="Running")
    watch.settle()
    evict_all(sim)
    mark = len(watch.statuses)
    watch.sync()
    sim.tick(1)
    for name in pods_of(sim, 0):
        sim.remove("v1", "Pod", name)
    for _ in range(3):
        watch.sync()
    assert sim.status["attempt"] == 1 and sim.condition("Restarting")["message"] == restarting_message(1, budget=0)
    assert [s.get("attempt") for s in watch.statuses[mark:]] == [1] * (len(watch.statuses) - mark)
    watch.settle()
    sim.all_ready()
    sim.master(MASTER, active=1)
    watch.settle()
    sim.master(MASTER, succeeded=1, finished=("Complete", "", "done"))
    watch.settle()
    assert sim.state() == "Complete" and sim.status["attempt"] == 1
    assert sorted(n for n in sim.objects("v1", "ConfigMap") if "-attempt-" in n) == ["chj-attempt-1"]
    assert record(sim, 1)["queueEviction"] == {"reason": PREEMPTED, "message": PREEMPTED_MESSAGE}
    watch.check()


# --- pods Kueue let go before any sync saw them stop ------------------------------------------------
#
# Kueue lets a stopped pod go once its group is finished, a moment after it stopped it; the Job and
# StatefulSet controllers then make other pods in the same group, which Kueue's webhook gates. What tells
# a sync that first looks then is the group's Workload (Evicted True) and the master Job's failed count.

EVICTED_CONDITION = {"type": "Evicted", "status": "True", "reason": "Preempted", "message": PREEMPTED_MESSAGE,
                     "lastTransitionTime": "2026-11-21T10:00:00Z"}
ADMITTED_CONDITION = {"type": "Admitted", "status": "True", "reason": "Admitted", "message": "",
                      "lastTransitionTime": "2026-11-21T10:00:00Z"}


def with_workload(sim: ChainerSim, *conditions: dict) -> str:
    """The Workload of the job's attempt-0 group, saying `conditions`; its name."""
    name = sim.objects("v1", "Pod")[WORKERS[0]]["metadata"]["labels"][GROUP]
    sim.create({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload", "metadata": {"name": name, "namespace": "ns"},
                "status": {"conditions": list(conditions)}})
    return name


def replaced_unseen(sim: ChainerSim, *, failed: int) -> None:
    """The pods are gone, unseen; the Job controller counted `failed` and made another master pod, the
    StatefulSet controller the workers again: Kueue's webhook gates them all."""
    for name in list(sim.objects("v1", "Pod")):
        sim.remove("v1", "Pod", name)
    sim.master(MASTER, active=1, failed=failed)
    sim.master_pod("chj-master-fghij", phase="Pending")
    gate(sim, "chj-master-fghij")
    for name in WORKERS:
        sim.worker_pod(name, phase="Pending")
        gate(sim, name)


def test_pods_kueue_let_go_before_a_sync_saw_them_stop_restart_the_job_as_if_seen():
    seen, unseen = started(maxRestarts=0), started(maxRestarts=0)
    for sim in (seen, unseen):
        with_workload(sim, EVICTED_CONDITION)
    evict_all(seen)
    seen.sync()
    replaced_unseen(unseen, failed=1)
    unseen.sync()
    for sim in (seen, unseen):
        restarting = sim.condition("Restarting")
        assert (restarting["status"], restarting["reason"]) == ("True", "ChainerJobEvictedByQueue"), sim.status
        assert restarting["message"] == restarting_message(1, budget=0)
        assert record(sim, 1)["queueEviction"] == {"reason": PREEMPTED, "message": PREEMPTED_MESSAGE}
    requeued(unseen, 1)
    templates = [obj["spec"]["template"]["metadata"]["labels"] for key in (JOB_KEY, STATEFULSET_KEY)
                 for obj in unseen.children[key].values()]
    assert {t[GROUP] for t in templates} == {"chj-uid-chj-1"}
    run(unseen, attempt=1)
    assert unseen.status["attempt"] == 1 and unseen.condition("Failed") is None


def test_a_group_kueue_evicted_before_it_ran_waits_as_it_is():
    """Kueue stops no gated pod: the master Job counts no failure, and the group is admitted again as it is."""
    sim = ChainerSim(queued(), kueue_pod_groups="true")
    for _ in range(2):
        sim.sync()
    sim.master(MASTER, active=1)
    sim.master_pod(master_pod(0), phase="Pending")
    gate(sim, master_pod(0))
    for name in WORKERS:
        sim.worker_pod(name, phase="Pending")
        gate(sim, name)
    with_workload(sim, EVICTED_CONDITION)
    for _ in range(2):
        sim.sync()
    assert sim.status.get("attempt", 0) == 0 and sim.condition("Restarting") is None
    assert sim.condition("Waiting")["reason"] == "WaitingForKueue"


def test_a_master_pod_retried_by_its_job_while_the_workload_is_admitted_is_no_eviction():
    sim = started()
    with_workload(sim, ADMITTED_CONDITION)
    replaced_unseen(sim, failed=1)
    sim.sync()
    assert sim.status.get("attempt", 0) == 0 and sim.condition("Restarting") is None


BACKOFF = ("Failed", "BackoffLimitExceeded", "Job has reached the specified backoff limit")


@pytest.mark.parametrize("seen", ["pods-stopping", "workload-only"])
def test_a_master_job_that_failed_on_the_pod_kueue_stopped_is_an_eviction_not_a_failure(seen):
    """spec.master.backoffLimit 0: the Job controller fails the master Job on the pod Kueue stopped before
    a sync sees the eviction. The queue took the pod; the job restarts uncounted and completes."""
    sim = started(maxRestarts=0)
    with_workload(sim, EVICTED_CONDITION)
    if seen == "pods-stopping":
        evict_all(sim, phase="Failed")
    else:
        for name in list(sim.objects("v1", "Pod")):
            sim.remove("v1", "Pod", name)
    sim.master(MASTER, failed=1, finished=BACKOFF)
    sim.sync()
    restarting = sim.condition("Restarting")
    assert (restarting["status"], restarting["reason"]) == ("True", "ChainerJobEvictedByQueue"), sim.status
    assert restarting["message"] == restarting_message(1, budget=0)
    assert sim.condition("Failed") is None and "chj-outcome" not in sim.objects("v1", "ConfigMap")
    requeued(sim, 1)
    run(sim, attempt=1)
    sim.master(MASTER, succeeded=1, finished=("Complete", "", "done"))
    sim.sync()
    assert sim.state() == "Complete" and sim.status["attempt"] == 1


def test_a_master_that_failed_on_its_own_stays_failed_when_kueue_stops_the_rest_later():
    sim = started(maxRestarts=0)
    sim.master_pod(master_pod(0), phase="Failed", exit_code=1, reason="Error")
    sim.master(MASTER, failed=1, finished=BACKOFF)
    for _ in range(2):
        sim.sync()
    assert sim.state() == "Failed"
    with_workload(sim, EVICTED_CONDITION)
    for name in WORKERS:
        if name in sim.objects("v1", "Pod"):
            sim.evict(name, PREEMPTED, PREEMPTED_MESSAGE)
    for _ in range(2):
        sim.sync()
    assert sim.state() == "Failed" and sim.status.get("attempt", 0) == 0


@pytest.mark.parametrize("failed", [False, True], ids=["master-retried", "master-failed"])
@pytest.mark.parametrize("stale", MODES, ids=["fresh", "stale-parent", "stale-children"])
def test_pods_gone_unseen_are_one_uncounted_restart_whatever_the_syncs_read(stale: Stale | None, failed: bool):
    """Read off the Workload, with the master Job retrying its pod or Failed on it (backoffLimit 0): a sync
    reading a stale status or stale children neither restarts twice, counts the eviction nor ends the job."""
    sim = ChainerSim(queued(maxRestarts=0), kueue_pod_groups="true", stale=stale)
    watch = Watch(sim, "Job")
    watch.settle()
    for name in WORKERS:
        sim.worker_pod(name)
    sim.all_ready()
    sim.master(MASTER, active=1)
    sim.master_pod(master_pod(0), phase="Running")
    watch.settle()
    with_workload(sim, EVICTED_CONDITION)
    mark = len(watch.statuses)
    if failed:
        for name in pods_of(sim, 0):
            sim.remove("v1", "Pod", name)
        sim.master(MASTER, failed=1, finished=BACKOFF)
    else:
        replaced_unseen(sim, failed=1)
    for _ in range(3):
        watch.sync()
        sim.tick(1)
    old_pods_go(sim, 1)
    watch.settle()
    assert sim.status["attempt"] == 1 and sim.condition("Restarting")["message"] == restarting_message(1, budget=0)
    # Stale children show the master Job's count one sync late; once the restart is written it stays.
    seen = [s.get("attempt") for s in watch.statuses[mark:]]
    assert set(seen[:seen.index(1)]) <= {None} and set(seen[seen.index(1):]) == {1}, seen
    assert not any(terminal(s) for s in watch.statuses) and "chj-outcome" not in sim.objects("v1", "ConfigMap")
    sim.all_ready()
    sim.master(MASTER, active=1)
    watch.settle()
    sim.master(MASTER, succeeded=1, finished=("Complete", "", "done"))
    watch.settle()
    assert sim.state() == "Complete" and sim.status["attempt"] == 1
    assert sorted(n for n in sim.objects("v1", "ConfigMap") if "-attempt-" in n) == ["chj-attempt-1"]
    watch.check()
