"""An MXJob whose pods Kueue stops (evicts, preempts, finds not admitted, deletes the Workload of) restarts
whole as a new attempt, not counted against backoffLimit nor failurePolicy.maxRestarts (docs/lifecycle.md,
"Evictions by the queue").

Kueue v0.17.0 (pkg/controller/jobs/pod `Stop`) applies `TerminationTarget` (True, the stop reason, the
event message) to the status of each pod of a group it stops that is neither terminated nor gated (every
pod, finished ones too, when the Workload is deleted), then deletes it; its finalizer holds the pod
Terminating until the kubelet writes a terminal phase. `evict` plays that; every sync of the scene checks
the status is a fixed point (helpers/mcsim.py), and the stale-read cases run over the emulation's stale
modes (tests/helpers/stalewatch.py's `Watch`).
"""
from __future__ import annotations

import json

import pytest
from helpers.kueue_stops import PREEMPTED, PREEMPTED_MESSAGE, kueue_stops
from helpers.mcsim import Sim, mxjob, running
from helpers.stalewatch import MODES, STALE_MODES, Watch, essence

from hooks.shared.kueue import GroupEviction, group_eviction
from localcluster.metacontroller import Stale

KUEUE_STOPS = kueue_stops("ns/mx")
ATTEMPT_LABEL = "training.kubeflow.org/job-attempt"
DISTRIBUTED = {"Scheduler": 1, "Server": 1, "Worker": 2}
SHAPES = {
    "distributed": DISTRIBUTED,
    "worker-only": {"Worker": 2},
    "one-worker-never": {"Worker": {"replicas": 1, "restartPolicy": "Never"}},
}
NO_BUDGET = {"backoffLimit": 0, "failurePolicy": {"maxRestarts": 0}}


def evict(sim: Sim, *names: str, reason: str = PREEMPTED, message: str | None = None, phase: str | None = None) -> None:
    """What Kueue does to each pod of a group it stops (all the job's pods when none is named): the
    TerminationTarget condition on its status, then its deletion. `phase`: the phase the kubelet has
    written by the time a sync sees it (Failed once it stopped the container); the pod's own by default."""
    for name in names or list(sim.pods):
        status = dict(sim.pods[name].get("status") or {})
        if phase is not None:
            status["phase"] = phase
            if phase == "Failed":
                status["containerStatuses"] = [{"name": "mxnet", "restartCount": 0,
                                                "state": {"terminated": {"exitCode": 143, "reason": "Error"}}}]
        status["conditions"] = [{"type": "TerminationTarget", "status": "True", "reason": reason,
                                 "message": KUEUE_STOPS.get(reason, "") if message is None else message}]
        sim.write_status("v1", "Pod", name, status)
        if not sim.pods[name]["metadata"].get("deletionTimestamp"):
            sim.terminating(name)


def gone(sim: Sim) -> None:
    """Pods being deleted go (the kubelet wrote their terminal phase, Kueue let its finalizer go)."""
    for name, pod in sim.pods.items():
        if pod["metadata"].get("deletionTimestamp"):
            sim.gc(name)


def next_attempt(sim: Sim, syncs: int = 3) -> None:
    """The old attempt's pods go and the new attempt's are created (docs/lifecycle.md, "Restarts")."""
    for _ in range(syncs):
        gone(sim)
        sim.sync()


def attempts(sim: Sim) -> set[str | None]:
    return {p["metadata"]["labels"].get(ATTEMPT_LABEL) for p in sim.pods.values()}


def record(sim: Sim, n: int) -> dict:
    return json.loads(sim.config_maps[f"mx-attempt-{n}"]["data"]["record"])


def succeed(sim: Sim) -> None:
    sim.run()
    sim.sync()
    for name in sim.pods:
        sim.set_phase(name, "Succeeded", exit_code=0)
    sim.sync()
    sim.sync()


def restarting(sim: Sim) -> dict:
    cond = sim.condition("Restarting")
    assert cond is not None and cond["status"] == "True", sim.status
    return cond


@pytest.mark.parametrize("shape", SHAPES, ids=list(SHAPES))
def test_an_evicted_job_restarts_whole_without_spending_backoff_limit_0_or_max_restarts_0_and_succeeds(shape):
    sim = running(mxjob(replicas=SHAPES[shape], runPolicy=NO_BUDGET))
    evict(sim)
    sim.sync()
    cond = restarting(sim)
    first = sorted(sim.pods)[0] if shape != "distributed" else "mx-scheduler-0"
    assert cond["reason"] == "MXJobEvictedByQueue"
    assert cond["message"] == (
        f"MXJob ns/mx is restarting as attempt 1: Kueue evicted it ({PREEMPTED}: '{PREEMPTED_MESSAGE}'); every pod "
        "that has not succeeded is deleted and created again with MXJOB_ATTEMPT=1, in a new pod group that Kueue "
        "queues and admits again; an eviction by the queue is not counted against backoffLimit or "
        "failurePolicy.maxRestarts (restarts so far: 0 of backoffLimit 0).")
    assert sim.condition("Running")["reason"] == "MXJobEvictedByQueue"  # type: ignore[index]
    assert record(sim, 1)["queueEviction"] == {"reason": PREEMPTED, "message": PREEMPTED_MESSAGE}
    assert record(sim, 1)["lostPod"] == first
    next_attempt(sim)
    replicas = [n if isinstance(n, int) else n["replicas"] for n in SHAPES[shape].values()]
    assert attempts(sim) == {"1"} and len(sim.pods) == sum(replicas)
    assert restarting(sim)["reason"] == "MXJobEvictedByQueue"  # until the new attempt runs
    sim.run()
    sim.sync()
    again = sim.condition("Restarting")
    assert (again["status"], again["reason"]) == ("False", "MXJobRunning")  # type: ignore[index]
    assert again["message"] == ("MXJob ns/mx: every pod of attempt 1 is running (the job was restarted after Kueue "  # type: ignore[index]
                                f"evicted it ({PREEMPTED}: '{PREEMPTED_MESSAGE}')).")
    succeed(sim)
    assert sim.state() == "Succeeded"
    assert (sim.status.get("restartCount", 0), sim.status["attempt"]) == (0, 1)


@pytest.mark.parametrize("seen_as", ["running", "stopped", "failed-not-yet-deleted"])
def test_the_eviction_reads_the_same_whether_the_pod_still_runs_has_stopped_or_is_failed(seen_as):
    """Kueue's condition comes before the deletion; the kubelet writes Failed as it stops the pod."""
    sim = running(mxjob(replicas=DISTRIBUTED))
    if seen_as == "failed-not-yet-deleted":
        status = {"phase": "Failed", "conditions": [{"type": "TerminationTarget", "status": "True",
                                                     "reason": PREEMPTED, "message": PREEMPTED_MESSAGE}],
                  "containerStatuses": [{"name": "mxnet", "restartCount": 0,
                                         "state": {"terminated": {"exitCode": 143, "reason": "Error"}}}]}
        sim.write_status("v1", "Pod", "mx-worker-1", status)
    else:
        evict(sim, "mx-worker-1", phase="Failed" if seen_as == "stopped" else None)
    sim.sync()
    message = restarting(sim)["message"]
    assert message.startswith(f"MXJob ns/mx is restarting as attempt 1: Kueue evicted it ({PREEMPTED}: ")
    assert record(sim, 1)["lostPod"] == "mx-worker-1"
    if seen_as == "running":  # the kubelet stops it: nothing changes
        evict(sim, "mx-worker-1", phase="Failed")
        sim.sync()
        assert restarting(sim)["message"] == message
    assert sim.status.get("restartCount", 0) == 0


@pytest.mark.parametrize("reason", KUEUE_STOPS, ids=list(KUEUE_STOPS))
def test_every_reason_kueue_stops_a_group_for_is_an_uncounted_whole_job_restart_naming_it(reason):
    """Decided (docs/lifecycle.md): each is Kueue taking the job's pods for its own bookkeeping, not a
    failure of the job; the new attempt forms a new group, whose Workload Kueue builds from its pods."""
    sim = running(mxjob(replicas={"Worker": 1}, runPolicy=NO_BUDGET))
    evict(sim, reason=reason)
    sim.sync()
    assert f"Kueue evicted it ({reason}: '{KUEUE_STOPS[reason]}')" in restarting(sim)["message"]
    next_attempt(sim)
    sim.run()
    sim.sync()
    assert (sim.state(), sim.status.get("restartCount", 0), sim.status["attempt"]) == ("Running", 0, 1)


def test_a_workload_deleted_takes_the_succeeded_pods_too_and_their_indexes_are_not_rerun():
    """Kueue deletes every pod of a group whose Workload is deleted, finished ones included; a pod that
    Succeeded stays a success (its condition is not a loss)."""
    sim = running(mxjob(replicas={"Worker": 2}))
    sim.set_phase("mx-worker-0", "Succeeded", exit_code=0)
    sim.sync()
    evict(sim, reason="WorkloadDeleted")
    sim.sync()
    assert record(sim, 1)["lostPod"] == "mx-worker-1"
    next_attempt(sim)
    assert sorted(sim.pods) == ["mx-worker-1"] and attempts(sim) == {"1"}
    sim.run()
    sim.set_phase("mx-worker-1", "Succeeded", exit_code=0)
    sim.sync()
    sim.sync()
    assert sim.state() == "Succeeded"
    assert sim.status["replicaStatuses"]["Worker"]["succeeded"] == 2


def test_two_evictions_in_a_row_are_two_uncounted_attempts():
    sim = running(mxjob(replicas=DISTRIBUTED, runPolicy=NO_BUDGET))
    for n in (1, 2):
        evict(sim)
        sim.sync()
        assert restarting(sim)["message"].startswith(f"MXJob ns/mx is restarting as attempt {n}: Kueue evicted it")
        next_attempt(sim)
        assert attempts(sim) == {str(n)}
        sim.run()
        sim.sync()
    succeed(sim)
    assert (sim.state(), sim.status.get("restartCount", 0), sim.status["attempt"]) == ("Succeeded", 0, 2)


def exitcode_job(**run_policy) -> dict:
    return mxjob(replicas={t: {"replicas": n, "restartPolicy": "ExitCode"} for t, n in DISTRIBUTED.items()},
                 runPolicy=run_policy)


@pytest.mark.parametrize("budget", [{"backoffLimit": 1}, {"failurePolicy": {"maxRestarts": 1}}],
                         ids=["backoffLimit-1", "maxRestarts-1"])
def test_a_real_failure_after_an_eviction_still_counts(budget):
    sim = running(exitcode_job(**budget))
    evict(sim)
    sim.sync()
    next_attempt(sim)
    sim.run()
    sim.sync()
    sim.set_phase("mx-worker-0", "Failed", exit_code=137, reason="Error")  # killed: a counted restart
    sim.sync()
    cond = restarting(sim)
    assert cond["reason"] == "MXJobRestarting"
    assert "is restarting as attempt 2: pod mx-worker-0 was lost (exit code 137" in cond["message"]
    assert sim.status["restartCount"] == 1
    next_attempt(sim)
    sim.run()
    sim.sync()
    sim.set_phase("mx-worker-1", "Failed", exit_code=137, reason="Error")  # the second one is over the budget
    sim.sync()
    assert sim.state() == "Failed"
    said = "backoff limit" if "backoffLimit" in budget else "failurePolicy.maxRestarts (1)"
    assert said in sim.condition("Failed")["message"]  # type: ignore[index]


def test_the_container_restarts_of_the_pods_an_eviction_replaces_stay_counted():
    """restartCount never drops: an in-place restart before the eviction is still one restart after it."""
    sim = running(mxjob(replicas={"Worker": {"replicas": 1, "restartPolicy": "OnFailure"}}))
    sim.set_phase("mx-worker-0", "Running", restarts=2)
    sim.sync()
    assert sim.status["restartCount"] == 2
    evict(sim)
    sim.sync()
    assert sim.status["restartCount"] == 2 and record(sim, 1)["containerRestarts"] == 2
    next_attempt(sim)
    sim.set_phase("mx-worker-0", "Running", restarts=1)
    sim.sync()
    assert sim.status["restartCount"] == 3


def test_failure_rules_do_not_apply_to_an_eviction():
    """A FailJob rule for a pod lost without an exit code speaks of pods that fail, not of the queue."""
    sim = running(mxjob(replicas={"Worker": 1}, runPolicy={"failurePolicy": {"rules": [{"action": "FailJob"}]}}))
    evict(sim)
    sim.sync()
    assert restarting(sim)["reason"] == "MXJobEvictedByQueue" and sim.condition("Failed") is None


@pytest.mark.parametrize("how", ["suspended", "succeeded"])
def test_a_suspended_or_finished_job_is_not_restarted_by_an_eviction(how):
    sim = running(mxjob(replicas={"Worker": 2}, runPolicy={"cleanPodPolicy": "None"}))
    if how == "suspended":
        sim.edit({"runPolicy": {"suspend": True}})
    else:
        for name in sim.pods:
            sim.set_phase(name, "Succeeded", exit_code=0)
        sim.sync()
        sim.sync()
        sim.run("mx-worker-1")  # one runs on (say the user's sidecar kept it up)
    evict(sim, "mx-worker-1")
    sim.sync()
    sim.sync()
    assert sim.state() == ("Suspended" if how == "suspended" else "Succeeded")
    assert sim.status.get("attempt", 0) == 0 and not any("-attempt-" in n for n in sim.config_maps)


def test_a_termination_target_that_is_not_true_is_no_eviction():
    sim = running(mxjob(replicas={"Worker": 1}))
    status = dict(sim.pods["mx-worker-0"]["status"])
    status["conditions"] = [{"type": "TerminationTarget", "status": "False", "reason": PREEMPTED, "message": "m"}]
    sim.write_status("v1", "Pod", "mx-worker-0", status)
    sim.sync()
    assert sim.state() == "Running" and sim.status.get("attempt", 0) == 0


# --- stale reads ---------------------------------------------------------------------------------


def _evicted_run(stale: Stale | None, evictions: int = 1) -> tuple[Sim, Watch]:
    """A distributed job evicted `evictions` times, a second passing between the syncs, settled after
    each; then the last attempt runs and the job settles."""
    sim = Sim(mxjob(replicas=DISTRIBUTED, runPolicy=NO_BUDGET), stale=stale)
    watch = Watch(sim, "Pod")
    watch.settle()
    sim.run()
    watch.settle()
    for _ in range(evictions):
        evict(sim)
        for _ in range(4):  # the restart decided, the old pods deleted (and gone), the new ones created
            watch.sync()
            gone(sim)
            sim.tick(1)
        watch.settle()
        sim.run()
        watch.settle()
    return sim, watch


@pytest.mark.parametrize("evictions", [1, 2], ids=["one-eviction", "two-evictions"])
@pytest.mark.parametrize("stale", MODES, ids=lambda m: f"stale-{m}")
def test_an_eviction_under_stale_reads_is_one_uncounted_restart(stale, evictions):
    sim, watch = _evicted_run(stale, evictions)
    fresh, _ = _evicted_run(None, evictions)
    assert sim.state() == "Running"
    assert (sim.status.get("restartCount", 0), sim.status["attempt"]) == (0, evictions)
    assert essence(sim.status) == essence(fresh.status)
    assert attempts(sim) == {str(evictions)} and len(sim.pods) == 4
    assert sorted(n for n in sim.config_maps if "-attempt-" in n) == [f"mx-attempt-{n}" for n in range(1, evictions + 1)]
    watch.check()


@pytest.mark.parametrize("stale", STALE_MODES)
def test_the_restarting_condition_of_an_eviction_stays_stamped_under_stale_reads(stale):
    """Stamped with the time its record keeps, so a sync reading the status of before it writes the same bytes."""
    sim = Sim(mxjob(replicas=DISTRIBUTED), stale=stale)
    watch = Watch(sim, "Pod")
    watch.settle()
    sim.run()
    watch.settle()
    evict(sim)
    watch.sync()
    watch.sync()  # a stale view of the children sees the eviction one sync late
    decided = record(sim, 1)["time"] if "mx-attempt-1" in sim.config_maps else None
    seen = []
    for _ in range(4):
        sim.tick(1)
        watch.sync()
        seen.append((sim.condition("Restarting") or {}).get("lastTransitionTime"))
    assert decided is not None and set(seen) == {decided}
    watch.check()


@pytest.mark.parametrize("seen", ["same-sync", "after-the-decision"])
def test_a_pod_that_fails_on_its_own_beside_an_eviction_is_judged_as_in_several_losses_in_one_sync(seen):
    """Kueue does not stop a pod that had ended: an error seen with the eviction came first and fails the
    job; one seen after the restart was decided is a peer giving up, part of the restart."""
    sim = running(mxjob(replicas={"Scheduler": 1, "Server": 1, "Worker": {"replicas": 2, "restartPolicy": "Never"}}))
    evict(sim, "mx-scheduler-0", "mx-server-0", "mx-worker-1")
    if seen == "after-the-decision":
        sim.sync()
    sim.set_phase("mx-worker-0", "Failed", exit_code=1, reason="Error")
    sim.sync()
    if seen == "same-sync":
        assert sim.state() == "Failed"
        assert "Worker 0 (pod mx-worker-0) failed with exit code 1" in sim.condition("Failed")["message"]  # type: ignore[index]
    else:
        assert restarting(sim)["reason"] == "MXJobEvictedByQueue" and sim.status.get("restartCount", 0) == 0


# --- pods Kueue let go before any sync saw them stop ------------------------------------------------
#
# Kueue finishes a group marked not retriable once none of its pods runs, and then lets their finalizer
# go: a stopped pod is gone a moment after it stopped, and a sync may first look after that. What is left
# is the group's Workload, which the customize hook relates: Evicted True, in Kueue's words.

WORKLOADS = "kueue.x-k8s.io/v1beta2"
GROUP_LABEL = "kueue.x-k8s.io/pod-group-name"
EVICTED = {"type": "Evicted", "status": "True", "reason": "Preempted", "message": PREEMPTED_MESSAGE,
           "lastTransitionTime": "2026-11-21T10:00:00Z"}


def queued_running(replicas: dict, **spec) -> Sim:
    """A queued job whose pods form Kueue pod groups, running, with its group's Workload admitted."""
    job = mxjob(replicas=replicas, **spec)
    job["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "q"}
    sim = Sim(job, settings={"kueue_pod_groups": "true"})
    sim.sync()
    sim.create({"apiVersion": WORKLOADS, "kind": "Workload", "metadata": {"name": group(sim), "namespace": "ns"},
                "status": {"conditions": [{"type": "Admitted", "status": "True", "reason": "Admitted", "message": "",
                                           "lastTransitionTime": "2026-11-21T10:00:00Z"}]}})
    sim.run()
    sim.sync()
    return sim


def group(sim: Sim) -> str:
    [name] = {p["metadata"]["labels"][GROUP_LABEL] for p in sim.pods.values()}
    return name


def workload_says(sim: Sim, name: str, *conditions: dict) -> None:
    sim.write_status(WORKLOADS, "Workload", name, {"conditions": list(conditions)})


@pytest.mark.parametrize("shape", ["distributed", "worker-only"])
def test_pods_kueue_let_go_before_any_sync_saw_them_stop_restart_the_job_as_if_seen(shape):
    sim = queued_running(SHAPES[shape], runPolicy=NO_BUDGET)
    seen = queued_running(SHAPES[shape], runPolicy=NO_BUDGET)
    first = group(sim)
    for scene in (sim, seen):
        workload_says(scene, first, EVICTED)
    evict(seen)  # seen as Kueue stops them ...
    seen.sync()
    for name in list(sim.pods):  # ... or only after they were gone
        sim.terminating(name)
        sim.gc(name)
    sim.sync()
    assert not sim.pods  # not created again in the group Kueue evicted
    assert restarting(sim)["reason"] == "MXJobEvictedByQueue"
    assert restarting(sim)["message"] == restarting(seen)["message"]
    assert record(sim, 1)["queueEviction"] == {"reason": PREEMPTED, "message": PREEMPTED_MESSAGE}
    next_attempt(sim)
    assert attempts(sim) == {"1"} and group(sim) == first[:-1] + "1"
    sim.run()
    sim.sync()
    assert (sim.state(), sim.status.get("restartCount", 0), sim.status["attempt"]) == ("Running", 0, 1)


def test_a_pod_gone_while_its_workload_is_not_evicted_is_created_again_in_the_same_group():
    """Someone else deleted it (kubectl delete): the job does not restart; the pod comes back as it was."""
    sim = queued_running({"Worker": 2})
    sim.gc("mx-worker-1")
    sim.sync()
    assert sorted(sim.pods) == ["mx-worker-0", "mx-worker-1"] and attempts(sim) == {None}
    assert sim.status.get("attempt", 0) == 0 and sim.condition("Restarting") is None


def test_one_pod_seen_stopping_and_one_already_gone_are_one_eviction():
    sim = queued_running({"Worker": 2})
    workload_says(sim, group(sim), EVICTED)
    evict(sim, "mx-worker-0")
    sim.gc("mx-worker-1")
    sim.sync()
    assert record(sim, 1)["lostPod"] == "mx-worker-0"
    assert restarting(sim)["reason"] == "MXJobEvictedByQueue" and sim.status["attempt"] == 1
    next_attempt(sim)
    assert attempts(sim) == {"1"} and len(sim.pods) == 2


def test_the_evicted_workload_of_an_earlier_attempt_leaves_the_current_one_alone():
    """Kueue keeps the first group's Workload Evicted (then Finished); the new attempt's group is another."""
    sim = queued_running({"Worker": 2})
    first = group(sim)
    workload_says(sim, first, EVICTED)
    for name in list(sim.pods):
        sim.gc(name)
    sim.sync()
    next_attempt(sim)
    sim.run()
    sim.sync()
    sim.gc("mx-worker-1")  # a pod of attempt 1 deleted by someone else
    sim.sync()
    assert sim.status["attempt"] == 1 and attempts(sim) == {"1"} and len(sim.pods) == 2
    assert not any(n.endswith("-attempt-2") for n in sim.config_maps)


def test_without_kueue_pod_groups_no_workload_is_read():
    """With the setting false (Kueue v0.5-v0.10 queues the job itself) a missing pod is created again."""
    sim = running(mxjob(replicas={"Worker": 2}))
    sim.gc("mx-worker-0")
    sim.sync()
    assert sorted(sim.pods) == ["mx-worker-0", "mx-worker-1"] and sim.status.get("attempt", 0) == 0


@pytest.mark.parametrize(("conditions", "expected"), [
    ([EVICTED], GroupEviction(PREEMPTED, PREEMPTED_MESSAGE)),
    ([{**EVICTED, "reason": "PodsReadyTimeout", "message": "Exceeded the PodsReady timeout ns/w\nmore"}],
     GroupEviction("WorkloadEvictedDueToPodsReadyTimeout", "Exceeded the PodsReady timeout ns/w")),
    ([{**EVICTED, "reason": "", "message": ""}], GroupEviction("WorkloadEvicted", None)),
    ([{**EVICTED, "status": "False"}], None),
    ([{"type": "Admitted", "status": "True", "reason": "Admitted"}], None),
    ([], None),
], ids=["preempted", "first-line", "no-reason", "readmitted", "admitted", "none"])
def test_group_eviction_words_a_workloads_eviction_as_kueue_words_its_pods(conditions, expected):
    assert group_eviction({"status": {"conditions": conditions}}) == expected


@pytest.mark.parametrize("bad", [None, "x", {"status": "x"}, {"status": {"conditions": "x"}},
                                 {"status": {"conditions": ["x", {"type": "Evicted"}]}}],
                         ids=["none", "text", "status-text", "conditions-text", "odd-conditions"])
def test_group_eviction_of_a_workload_of_another_shape_is_none(bad):
    assert group_eviction(bad) is None


def _vanished_run(stale: Stale | None) -> tuple[Sim, Watch]:
    """A queued distributed job whose pods Kueue stopped and let go unseen, a second passing between the syncs,
    settled; then attempt 1 runs and the job settles."""
    job = mxjob(replicas=DISTRIBUTED, runPolicy=NO_BUDGET)
    job["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "q"}
    sim = Sim(job, stale=stale, settings={"kueue_pod_groups": "true"})
    watch = Watch(sim, "Pod")
    watch.settle()
    sim.create({"apiVersion": WORKLOADS, "kind": "Workload", "metadata": {"name": group(sim), "namespace": "ns"},
                "status": {"conditions": []}})
    sim.run()
    watch.settle()
    workload_says(sim, group(sim), EVICTED)
    for name in list(sim.pods):
        sim.gc(name)
    for _ in range(4):
        watch.sync()
        sim.tick(1)
    watch.settle()
    sim.run()
    watch.settle()
    return sim, watch


@pytest.mark.parametrize("stale", MODES, ids=lambda m: f"stale-{m}")
def test_pods_gone_unseen_under_stale_reads_are_one_uncounted_restart(stale):
    sim, watch = _vanished_run(stale)
    fresh, _ = _vanished_run(None)
    assert (sim.state(), sim.status.get("restartCount", 0), sim.status["attempt"]) == ("Running", 0, 1)
    assert essence(sim.status) == essence(fresh.status)
    assert attempts(sim) == {"1"} and len(sim.pods) == 4
    assert sorted(n for n in sim.config_maps if "-attempt-" in n) == ["mx-attempt-1"]
    watch.check()
