"""The hooks under Metacontroller's stale reads, over the project's one emulation (docs/localcluster.md).

Real Metacontroller reads the parent and the children from separate informer caches, writes the
children first (deletes, then creates) and the status after, over a fresh read. The next sync,
queued by those child events, often sees the status of one write earlier with the children of
now. The emulation (localcluster/metacontroller/) has that as its `stale` mode: "parent" (the
sync after a status write sees the status before it) and "children" (each sync sees the children
of the sync before). The scenes are tests/helpers/mcsim.py's `Sim` and tests/helpers/chainersim.py's `ChainerSim`.

The named regression tests pin the failures a stale parent caused before the memory moved into
children (hooks/shared/memory.py; docs/lifecycle.md, "Why the outcome is recorded in a child");
each fails on the hooks of commit ae4b906. The properties run random MXJob and ChainerJob
lifecycles under both stale modes, and compare a stale run with a fresh run of the same events.
"""
from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from helpers.chainersim import JOB_KEY, STATEFULSET_KEY, ChainerSim, chainerjob
from helpers.mcsim import Sim, mxjob
from helpers.stalewatch import MODES, STALE_MODES, Watch, essence, terminal
from hypothesis import given, settings
from hypothesis import strategies as st

from hooks.chainerjob.sync import sync_chainerjob
from hooks.shared.conditions import rfc3339
from localcluster.metacontroller import Stale

# --- MXJob: the three failures, as regression tests --------------------------------------------------


def _succeeded_with_clean_all(stale: Stale | None) -> tuple[Sim, Watch]:
    sim = Sim(mxjob(replicas={"Scheduler": 1, "Server": 1, "Worker": 2}, runPolicy={"cleanPodPolicy": "All"}), stale=stale)
    watch = Watch(sim, "Pod")
    watch.sync()
    sim.run()
    watch.sync()
    for name in ("mx-worker-0", "mx-worker-1", "mx-scheduler-0"):
        sim.set_phase(name, "Succeeded", exit_code=0)
    for _ in range(6):  # the syncs queued by the deletions, each reading the parent one write late
        watch.sync()
        sim.tick(40)  # past the success grace
    return sim, watch


@pytest.mark.parametrize("stale", MODES)
def test_a_job_declared_succeeded_is_not_run_again_when_the_next_sync_reads_the_old_status(stale):
    """Before: with cleanPodPolicy All, the Succeeded answer deleted every pod; the next sync read
    the Running status with no pods, created them all again (training reran) and wrote Running
    over Succeeded."""
    sim, watch = _succeeded_with_clean_all(stale)
    assert sim.state() == "Succeeded"
    assert watch.runs_at_decision is not None
    watch.check()
    assert sim.pods == {}  # cleanPodPolicy All, applied once the outcome is recorded


def _backoff_run(stale: Stale | None, backoff_limit: int = 2) -> tuple[int, Watch]:
    """A worker failing with 137 (retryable) each time it runs, the job settled after each event;
    the failures until the job fails."""
    sim = Sim(mxjob(replicas={"Worker": {"replicas": 1, "restartPolicy": "ExitCode"}}, runPolicy={"backoffLimit": backoff_limit}),
              stale=stale)
    watch = Watch(sim, "Pod")
    watch.settle()
    failures = 0
    while sim.state() != "Failed" and failures < 10:
        sim.run("mx-worker-0")
        watch.settle()
        sim.set_phase("mx-worker-0", "Failed", exit_code=137)
        failures += 1
        watch.settle()
    assert "backoff limit" in (sim.condition("Failed") or {}).get("message", "")
    return failures, watch


@pytest.mark.parametrize("stale", STALE_MODES)
def test_a_stale_parent_does_not_forget_restarts_and_backoff_limit_still_fails_the_job(stale):
    """Before: restartHistory lived only in status. The sync after the one that deleted the failed
    pod read the status of before it, created the pod again without counting, and its status was
    written over the one with the restart: with backoffLimit 2 a worker failing with 137 was
    recreated again and again. Now the job fails at the same failure as with fresh reads, with the
    same status."""
    fresh_failures, fresh = _backoff_run(None)
    failures, watch = _backoff_run(stale)
    assert fresh_failures == 3  # backoffLimit + 1
    assert failures == fresh_failures
    assert essence(watch.statuses[-1]) == essence(fresh.statuses[-1])
    assert watch.runs_created() == fresh.runs_created() == ["Pod/mx-worker-0"] * 3
    watch.check()


@pytest.mark.parametrize("stale", STALE_MODES)
def test_an_older_status_is_never_written_over_a_newer_one(stale):
    """Before: the sync after a recreation read the status of before it and wrote a smaller
    restartCount over the larger one (a pod's container restarts went with the pod)."""
    sim = Sim(mxjob(replicas={"Worker": {"replicas": 1, "restartPolicy": "OnFailure"}}), stale=stale)
    watch = Watch(sim, "Pod")
    watch.sync()
    sim.set_phase("mx-worker-0", "Running", restarts=2)
    watch.sync()
    watch.sync()
    assert sim.status["restartCount"] == 2
    sim.set_phase("mx-worker-0", "Failed", restarts=2)  # evicted: recreated, not a job failure
    watch.settle()  # the restart recorded, then the pod deleted, then created again
    assert sim.status["restartCount"] == 3
    assert "mx-worker-0" in sim.pods
    watch.check()


def _restarting(stale: Stale | None) -> tuple[Sim, Watch]:
    """A worker killed (137 under ExitCode restarts the whole job), a second passing between the
    syncs that follow; the job settled with the new attempt's pods created. While it restarts,
    Restarting carries the time the attempt's record keeps (the sync that decided the restart)."""
    sim = Sim(mxjob(replicas={t: {"replicas": n, "restartPolicy": "ExitCode"}
                              for t, n in {"Scheduler": 1, "Server": 1, "Worker": 2}.items()}), stale=stale)
    watch = Watch(sim, "Pod")
    watch.settle()
    sim.run()
    watch.settle()
    sim.set_phase("mx-worker-1", "Failed", exit_code=137, reason="Error")
    for _ in range(3):  # the restart decided, the old pods deleted, the new ones created
        watch.sync()
        sim.tick(1)
    watch.settle()
    decided = json.loads(sim.config_maps["mx-attempt-1"]["data"]["record"])["time"]
    assert rfc3339(sim.now - timedelta(seconds=3)) <= decided <= rfc3339(sim.now)
    restarting = sim.condition("Restarting") or {}
    assert (restarting.get("status"), restarting.get("lastTransitionTime")) == ("True", decided)
    return sim, watch


def _job_restart(stale: Stale | None) -> tuple[Sim, Watch]:
    """`_restarting`, then the new attempt's pods run; the job settled."""
    sim, watch = _restarting(stale)
    sim.run()
    watch.settle()
    return sim, watch


@pytest.mark.parametrize("stale", MODES)
def test_a_job_restart_settles_when_the_syncs_after_it_read_the_status_of_one_write_earlier(stale):
    """Before: the sync after the one that decided a whole-job restart read the Running status
    (one write earlier) with the restart's record and set Restarting again, stamped with its own
    now; the next read the first restart status, with the first time: each sync wrote the other
    time back (lastTransitionTime 10:00:00, 10:00:01, 10:00:00, ...), a hot loop that Metacontroller
    runs whenever its parent cache stays one write behind (test_recovery's stale parent case).
    Now the transition is stamped with the time the attempt record keeps, and the job settles."""
    sim, watch = _job_restart(stale)
    fresh, _ = _job_restart(None)
    assert sim.status["attempt"] == 1 and sim.status["restartCount"] == 1
    assert essence(sim.status) == essence(fresh.status)
    restarting = sim.condition("Restarting") or {}
    assert restarting.get("status") == "False"
    assert sim.condition("Running")["status"] == "True"  # type: ignore[index]
    watch.check()


def _times(status: dict) -> dict[str, str]:
    """startTime and each condition's transition time: what a sync stamps from its own clock."""
    stamped = {f"{c['type']}.lastTransitionTime": c["lastTransitionTime"] for c in status.get("conditions") or []}
    return {"startTime": status.get("startTime", ""), **stamped}


def _stale_syncs_statuses(sim: Sim, watch: Watch, syncs: int) -> list[dict]:
    """Syncs a second apart, each (in "parent" mode) reading the status of one write earlier: the
    status after each."""
    seen = []
    for _ in range(syncs):
        sim.tick(1)
        watch.sync()
        seen.append(sim.status)
    return seen


def _stale_syncs(sim: Sim, watch: Watch, syncs: int = 4) -> list[dict[str, str]]:
    """`_stale_syncs_statuses`: the times each status carries."""
    return [_times(status) for status in _stale_syncs_statuses(sim, watch, syncs)]


@pytest.mark.parametrize("stale", MODES)
def test_start_time_stays_when_the_syncs_after_the_first_read_it_without_status(stale):
    """Before: startTime (and Created) was the sync's own time whenever the parent read showed none.
    The sync after the first read the parent as created, with the children the first had made, and
    wrote its own second over the first's; the next read the first status again, and so on: each
    sync wrote the other time back (10:00:00, 10:00:01, 10:00:00, ...), a hot loop under a parent
    cache one write behind (test_recovery's stale parent case), and a startTime that moved by a
    second in a real cluster (test_e2e). Now the job's Services keep the time its run began."""
    sim = Sim(mxjob(), stale=stale)
    watch = Watch(sim, "Pod")
    watch.sync()
    first = _times(sim.status)
    assert first == {"startTime": "2026-11-21T10:00:00Z", "Created.lastTransitionTime": "2026-11-21T10:00:00Z"}
    assert _stale_syncs(sim, watch) == [first] * 4
    assert not watch.wrote


@pytest.mark.parametrize("stale", MODES)
def test_start_time_of_a_resumed_job_stays_when_the_syncs_after_the_resume_read_it_suspended(stale):
    """The same on resume, which sets startTime again: the syncs after it read the status of
    before (Suspended True) and resumed the job again, each at its own second."""
    sim = Sim(mxjob(), stale=stale)
    watch = Watch(sim, "Pod")
    watch.settle()
    sim.edit({"runPolicy": {"suspend": True}})
    watch.settle()
    assert sim.state() == "Suspended" and sim.pods == {}
    sim.tick(60)
    sim.edit({"runPolicy": {"suspend": False}})
    watch.sync()
    resumed = _times(sim.status)
    assert (resumed["startTime"], resumed["Suspended.lastTransitionTime"]) == ("2026-11-21T10:01:00Z",) * 2
    assert _stale_syncs(sim, watch) == [resumed] * 4
    assert not watch.wrote


@pytest.mark.parametrize("stale", MODES)
def test_suspended_stays_stamped_when_the_syncs_after_the_suspension_read_it_running(stale):
    """Before: Suspended True (and Running False with it) was stamped with the clock of the sync that
    saw the suspension, and the sync after it, reading the Running status of before, stamped it
    again with its own second: a write on every sync. A suspended job has no pod or Service to keep
    the time, so the suspension is a record of its own, `<job>-suspension`, gone on resume."""
    sim = Sim(mxjob(), stale=stale)
    watch = Watch(sim, "Pod")
    watch.settle()
    sim.run()
    watch.settle()
    sim.tick(30)
    sim.edit({"runPolicy": {"suspend": True}})
    watch.sync()
    suspended = _times(sim.status)
    assert suspended["Suspended.lastTransitionTime"] == suspended["Running.lastTransitionTime"] == "2026-11-21T10:00:30Z"
    assert _stale_syncs(sim, watch) == [suspended] * 4
    assert not watch.wrote
    assert sim.state() == "Suspended" and sim.pods == {}
    assert "mx-suspension" in sim.config_maps
    sim.edit({"runPolicy": {"suspend": False}})
    watch.settle()
    assert sim.state() != "Suspended" and "mx-suspension" not in sim.config_maps


@pytest.mark.parametrize("stale", MODES)
def test_running_stays_stamped_when_the_syncs_after_read_the_status_of_before(stale):
    """Before: Running was stamped with the clock of the first sync that saw the deciding pods run,
    and the sync after it, reading the status of before, stamped it again with its own: two times
    alternated as startTime's did. Now it is stamped with when the last deciding pod started running,
    whichever sync sees it first."""
    sim = Sim(mxjob(), stale=stale)
    watch = Watch(sim, "Pod")
    watch.settle()
    sim.tick(5)
    sim.run()
    seen = _stale_syncs(sim, watch, 6)  # from 10:00:06 on
    assert seen[-1]["Running.lastTransitionTime"] == "2026-11-21T10:00:05Z"
    assert seen[-4:] == [seen[-1]] * 4
    assert not watch.wrote


@pytest.mark.parametrize("stale", MODES)
def test_a_restarted_job_running_again_stays_stamped_when_the_syncs_after_read_it_restarting(stale):
    """The same as a whole-job restart ends: Restarting goes False and Running True, stamped with when
    the last pod of the new attempt started running."""
    sim, watch = _restarting(stale)
    sim.tick(5)
    sim.run()
    started = rfc3339(sim.now)
    seen = _stale_syncs(sim, watch, 6)
    assert seen[-1]["Restarting.lastTransitionTime"] == seen[-1]["Running.lastTransitionTime"] == started
    assert seen[-4:] == [seen[-1]] * 4
    assert not watch.wrote


@pytest.mark.parametrize("ended", [{"exit_code": 137}, {"pod_reason": "Evicted"}], ids=["killed", "evicted-no-exit"])
@pytest.mark.parametrize("stale", MODES)
def test_a_recreated_pod_restarting_stays_stamped_when_the_syncs_after_read_the_status_of_before(stale, ended):
    """Before: Restarting True for a pod's recreation was stamped with the clock of the first sync
    that saw the failure, and each sync after it, reading the status of before, stamped it again.
    Now it is stamped with when the pod failed, as its restart record keeps it (the container's
    finishedAt, or the time of the sync that recorded a failure without one)."""
    sim = Sim(mxjob(replicas={"Worker": {"replicas": 1, "restartPolicy": "OnFailure"}}), stale=stale)
    watch = Watch(sim, "Pod")
    watch.settle()
    sim.run()
    watch.settle()
    sim.tick(5)
    failed_at = rfc3339(sim.now)
    sim.set_phase("mx-worker-0", "Failed", **ended)
    for _ in range(3):  # the first sync to see it comes a second later ("children": a sync after)
        sim.tick(1)
        watch.sync()
        restarting = sim.condition("Restarting") or {}
        if restarting.get("status") == "True":
            break
    assert restarting.get("status") == "True"
    first = restarting["lastTransitionTime"]
    # Killed: when its container ended; without a container state: the sync that recorded it.
    assert first == (failed_at if "exit_code" in ended else rfc3339(sim.now))
    seen = _stale_syncs(sim, watch, 6)  # the record observed, the failed pod deleted, ...
    assert all(times.get("Restarting.lastTransitionTime") == first for times in seen)
    assert seen[-3:] == [seen[-1]] * 3
    watch.check()


def _updates(status: dict) -> dict[str, str]:
    """Each condition's message and update time."""
    return {c["type"]: f"{c['lastUpdateTime']} {c['message']}" for c in status.get("conditions") or []}


@pytest.mark.parametrize("stale", MODES)
def test_the_success_grace_message_stays_stamped_when_the_syncs_after_read_the_status_of_before(stale):
    """Before: while the job waited out the success grace, Running's message (which pods still run)
    was stamped with the sync's own clock, and a sync reading the status of before stamped it again:
    two update times alternated. Now it is stamped with when the last of the pods it names ended."""
    sim = Sim(mxjob(), stale=stale)
    watch = Watch(sim, "Pod")
    watch.settle()
    sim.run()
    watch.settle()
    sim.tick(5)
    sim.set_phase("mx-scheduler-0", "Succeeded", exit_code=0)
    seen = [_updates(s) for s in _stale_syncs_statuses(sim, watch, 4)]
    assert seen[-1]["Running"].startswith("2026-11-21T10:00:05Z ") and "(Server 0, Worker 0, Worker 1)" in seen[-1]["Running"]
    assert seen[-3:] == [seen[-1]] * 3 and not watch.wrote
    sim.set_phase("mx-worker-0", "Succeeded", exit_code=0)
    seen = [_updates(s) for s in _stale_syncs_statuses(sim, watch, 4)]
    assert seen[-1]["Running"].startswith("2026-11-21T10:00:09Z ") and "(Server 0, Worker 1)" in seen[-1]["Running"]
    assert seen[-3:] == [seen[-1]] * 3 and not watch.wrote


def test_a_terminal_status_is_never_replaced_by_a_stale_read():
    """The sync after the one that wrote Succeeded reads the Running status, with the pod
    garbage-collected meanwhile: it keeps the outcome and creates no pod."""
    sim = Sim(mxjob(replicas={"Worker": 1}, runPolicy={"cleanPodPolicy": "None"}), stale="parent")
    watch = Watch(sim, "Pod")
    watch.sync()
    sim.run()
    watch.sync()
    watch.sync()
    sim.set_phase("mx-worker-0", "Succeeded", exit_code=0)
    watch.sync()
    assert sim.state() == "Succeeded"
    outcome = sim.status
    sim.gc("mx-worker-0")
    answer = watch.sync()  # reads the status of before Succeeded
    assert terminal(answer["status"]) == "Succeeded"
    assert not [c for c in answer["children"] if c["kind"] == "Pod"]
    for _ in range(2):
        watch.sync()
    assert sim.status == outcome
    assert sim.pods == {}
    watch.check()


# --- MXJob: properties over random lifecycles ---------------------------------------------------------

CODES = [0, 1, 137, 143, 138]
mx_steps = st.lists(st.tuples(st.sampled_from(["run", "end", "tick", "gc"]), st.integers(0, 5), st.sampled_from(CODES)),
                    min_size=3, max_size=20)
mx_jobs = st.builds(
    lambda workers, policy, clean, limit, sched: mxjob(
        replicas=({"Scheduler": 1, "Server": 1} if sched else {}) | {"Worker": {"replicas": workers, "restartPolicy": policy}},
        runPolicy={"cleanPodPolicy": clean, **({"backoffLimit": limit} if limit is not None else {})}),
    st.integers(1, 3), st.sampled_from(["Never", "ExitCode", "OnFailure"]), st.sampled_from(["All", "Running", "None"]),
    st.one_of(st.none(), st.integers(0, 3)), st.booleans())


def _kubelet(sim: Sim, verb: str, n: int, code: int) -> None:
    """One kubelet or garbage-collector step on the n-th pod (by name) that still runs or waits."""
    if verb == "tick":
        sim.tick(10 * (n + 1))
        return
    pods = sorted(sim.pods)
    if not pods:
        return
    name = pods[n % len(pods)]
    phase = sim.pods[name].get("status", {}).get("phase")
    if verb == "run" and phase in (None, "Pending"):
        sim.run(name)
    elif verb == "end" and phase in (None, "Pending", "Running"):
        sim.set_phase(name, "Succeeded" if code == 0 else "Failed", exit_code=code)
    elif verb == "gc" and phase == "Succeeded":
        sim.gc(name)


def _draws(flags: list[bool]) -> Iterator[bool]:
    while True:
        yield from flags or [True]


@settings(max_examples=60, deadline=None, derandomize=True)
@given(mx_jobs, mx_steps, st.sampled_from(STALE_MODES), st.lists(st.booleans(), min_size=1, max_size=8))
def test_mxjob_lifecycles_under_stale_reads_keep_outcome_restarts_and_running_pods(parent, steps, stale, draws):
    """Random pod events, two syncs after each (in "parent" mode each read stale or not as drawn):
    the Watch properties hold, every answer is deterministic, and no Running pod is deleted while
    the job has no outcome."""
    sim = Sim(parent, stale=stale)
    watch = Watch(sim, "Pod")
    stale_now = _draws(draws)
    watch.sync()
    for verb, n, code in steps:
        _kubelet(sim, verb, n, code)
        for _ in range(2):
            running = {name for name, pod in sim.pods.items() if pod.get("status", {}).get("phase") == "Running"}
            attempt_of = {name: int(sim.pods[name]["metadata"].get("labels", {}).get(
                "training.kubeflow.org/job-attempt", "0")) for name in running}
            watch.sync(stale_now=next(stale_now))
            if terminal(sim.status) is None:
                # A whole-job restart deletes the running pods of the attempt it replaces, and only
                # once its record `<job>-attempt-<n>` is in the children (hooks.shared.memory).
                attempts = [int(n.rpartition("-attempt-")[2]) for n in sim.config_maps if "-attempt-" in n]
                replaced = {name for name in running if name not in sim.pods
                            and max(attempts, default=0) > attempt_of[name]}
                assert running - replaced <= set(sim.pods), f"running pods dropped: {sorted(running - set(sim.pods))}"
    for _ in range(3):
        sim.tick(31)
        watch.sync(stale_now=next(stale_now))
    watch.check()


def _settled_run(parent: dict, steps: list, stale: Stale | None) -> tuple[list[tuple[dict, dict[str, Any]]], Watch]:
    """The same events applied to one scene, each followed by syncs until nothing changes: the
    status and the pods (name -> phase) after each."""
    sim = Sim(parent, stale=stale)
    watch = Watch(sim, "Pod")
    watch.settle()
    seen = []
    for verb, n, code in steps:
        _kubelet(sim, verb, n, code)
        watch.settle()
        seen.append((essence(sim.status), {name: pod.get("status", {}).get("phase") for name, pod in sim.pods.items()}))
    return seen, watch


@settings(max_examples=60, deadline=None, derandomize=True)
@given(mx_jobs, mx_steps, st.sampled_from(STALE_MODES))
def test_a_stale_run_ends_where_a_fresh_run_of_the_same_events_does(parent, steps, stale):
    """Exactness: the same kubelet events, each followed by syncs until the job settles, give with
    stale reads the status and pods a fresh-read run gives, after every event. So backoffLimit fails
    the job at the same restart, with the same restartCount and message, and the outcome is the same."""
    stale_run, stale_watch = _settled_run(parent, steps, stale)
    fresh_run, _ = _settled_run(parent, steps, None)
    assert stale_run == fresh_run
    stale_watch.check()


# --- ChainerJob ----------------------------------------------------------------------------------------


def _chainerjob_finished(stale: Stale | None, outcome: str = "Complete") -> tuple[ChainerSim, Watch]:
    sim = ChainerSim(chainerjob(workers={"ws": 2}), stale=stale)
    watch = Watch(sim, "Job")
    watch.settle()
    sim.all_ready()
    watch.settle()
    sim.master("chj-master", active=1)
    watch.settle()
    reason = "CompletionsReached" if outcome == "Complete" else "BackoffLimitExceeded"
    sim.master("chj-master", succeeded=int(outcome == "Complete"), failed=int(outcome == "Failed"),
               finished=(outcome, reason, "done"))
    for _ in range(4):  # until the outcome is written, and no further: the next sync reads before it
        watch.sync()
        if sim.state() == outcome:
            return sim, watch
    raise AssertionError(f"no {outcome}: {sim.status}")


def _assert_finished_and_scaled_to_zero(sim: ChainerSim, watch: Watch, outcome: str) -> None:
    assert sim.state() == outcome
    assert sim.children[STATEFULSET_KEY] and all(sts["spec"]["replicas"] == 0 for sts in sim.children[STATEFULSET_KEY].values())
    watch.check()


@pytest.mark.parametrize("stale", MODES)
def test_a_chainerjob_master_deleted_after_the_job_finished_is_not_created_again_on_a_stale_read(stale):
    """Before: that the master Job had finished was remembered only in status, so a sync reading the
    status of before the end, after someone deleted the finished master Job, created it again."""
    sim, watch = _chainerjob_finished(stale)
    completed_at = sim.status["completionTime"]
    sim.delete(JOB_KEY, "chj-master")  # the master's TTL, or a user, removes it afterwards
    mark = len(sim.created)
    for _ in range(3):
        watch.sync()
        assert sim.state() == "Complete"
    assert sim.created[mark:] == []  # neither the master Job nor any worker comes back
    # The master Job's counts are kept, as the record has them, with the Job gone.
    assert (sim.status["succeeded"], sim.status["completionTime"]) == (1, completed_at)
    _assert_finished_and_scaled_to_zero(sim, watch, "Complete")


@pytest.mark.parametrize("stale", MODES)
def test_a_chainerjob_outcome_is_recorded_in_a_child(stale):
    sim, watch = _chainerjob_finished(stale, "Failed")
    watch.sync()
    watch.sync()
    assert "chj-outcome" in sim.children["ConfigMap.v1"]
    _assert_finished_and_scaled_to_zero(sim, watch, "Failed")


def test_a_chainerjob_invalid_edit_read_with_a_stale_status_keeps_the_recorded_outcome():
    """Before (issue 29, as MXJob's tests/fuzz_repro/d552d2e/01): an invalid edit read with the status of
    before the end, after the finished master Job was deleted, answered that stale status (Running
    True): the invalid-spec path did not read the outcome record."""
    sim = ChainerSim(chainerjob())
    sim.sync()
    sim.master("chj-master", active=1)
    sim.sync()
    stale = json.loads(json.dumps(sim.status))
    sim.master("chj-master", failed=1, finished=("Failed", "BackoffLimitExceeded", "done"))
    for _ in range(3):
        sim.sync()
    sim.delete(JOB_KEY, "chj-master")
    sim.sync()
    assert "chj-outcome" in sim.children["ConfigMap.v1"] and sim.state() == "Failed"
    request = sim.request()
    request["parent"]["status"] = stale
    valid = sync_chainerjob(request, now=sim.now)["status"]
    request["parent"]["spec"]["master"]["backoffLimit"] = -1
    invalid = sync_chainerjob(request, now=sim.now)["status"]
    assert invalid.pop("specError").startswith("ChainerJob ns/chj has an invalid spec: spec.master.backoffLimit")
    assert invalid == valid
    assert [c["type"] for c in invalid["conditions"] if c["status"] == "True"] == ["Created", "Failed"]


def _chainerjob_times(sim: ChainerSim, watch: Watch, syncs: int = 4) -> list[dict[str, str]]:
    return [{f"{c['type']}.{stamp}": c.get(stamp) for c in status["conditions"] for stamp in ("lastTransitionTime", "lastUpdateTime")}
            for status in _stale_syncs_statuses(sim, watch, syncs)]  # type: ignore[arg-type]


@pytest.mark.parametrize("workers", [0, 2], ids=["non-distributed", "distributed"])
@pytest.mark.parametrize("stale", MODES)
def test_chainerjob_conditions_stay_stamped_when_the_syncs_after_read_the_status_of_before(stale, workers):
    """Before: Created, Waiting, Running and the end were stamped with the clock of the first sync
    that saw them, and each sync after it, reading the status of before, stamped them again with
    its own second: two statuses alternated, a status write on every sync. Now each is stamped with
    a time the children keep (the job's first sync, the master Job's, the Job controller's start
    and end), whichever sync sees it first."""
    sim = ChainerSim(chainerjob(workers={"ws": workers} if workers else None), stale=stale)
    watch = Watch(sim, "Job")
    watch.sync()
    created = _chainerjob_times(sim, watch)
    assert created[-1]["Created.lastTransitionTime"] == "2026-11-21T10:00:00Z"
    assert created == [created[-1]] * 4
    steps: list[tuple[str, Any]] = [("started", lambda: sim.master("chj-master", active=1)),
                                    ("ended", lambda: sim.master("chj-master", succeeded=1,
                                                                 finished=("Complete", "CompletionsReached", "done")))]
    if workers:
        steps.insert(0, ("ready", sim.all_ready))
    for step, event in steps:
        event()
        seen = _chainerjob_times(sim, watch, 6)
        assert seen[-4:] == [seen[-1]] * 4, step
        assert not watch.wrote, step
    assert sim.state() == "Complete"
    watch.check()


@settings(max_examples=60, deadline=None, derandomize=True)
@given(st.integers(0, 2), st.sampled_from(["Complete", "Failed"]), st.sampled_from(STALE_MODES),
       st.lists(st.booleans(), min_size=1, max_size=6), st.integers(0, 3), st.booleans(), st.booleans())
def test_chainerjob_lifecycles_under_stale_reads(workers, outcome, stale, draws, extra_syncs, decided_first, delete_master):
    """Workers ready, the master runs and ends (the Job controller's interim condition first, or
    not), some syncs, the finished master maybe deleted: the outcome is the master's and is never
    replaced, the master Job is never created again, and the workers stay scaled to 0."""
    sim = ChainerSim(chainerjob(workers={"ws": workers} if workers else None), stale=stale)
    watch = Watch(sim, "Job")
    stale_now = _draws(draws)
    watch.sync()
    sim.all_ready()
    for _ in range(3):
        watch.sync(stale_now=next(stale_now))
    assert sim.names(JOB_KEY) == ["chj-master"]
    sim.master("chj-master", active=1)
    watch.sync(stale_now=next(stale_now))
    reason = "CompletionsReached" if outcome == "Complete" else "BackoffLimitExceeded"
    counts = {"succeeded": 1} if outcome == "Complete" else {"failed": 1}
    if decided_first:
        sim.master("chj-master", **counts, finished=(outcome, reason, "done"), decided_only=True)
        watch.sync(stale_now=next(stale_now))
    sim.master("chj-master", **counts, finished=(outcome, reason, "done"))
    for _ in range(1 + extra_syncs):
        watch.sync(stale_now=next(stale_now))
    if delete_master:
        sim.delete(JOB_KEY, "chj-master")
    for _ in range(3):
        watch.sync(stale_now=next(stale_now))
    assert [entry for entry in sim.created if entry.startswith("Job.")] == ["Job.batch/v1/chj-master"]
    if workers:
        _assert_finished_and_scaled_to_zero(sim, watch, outcome)
    else:
        assert sim.state() == outcome
        watch.check()
    assert sim.status.get("completionTime") == (rfc3339(sim.now) if outcome == "Complete" else None)


@pytest.mark.parametrize("workers", [0, 2], ids=["non-distributed", "distributed"])
@pytest.mark.parametrize("stale", MODES)
def test_a_chainerjob_suspended_and_resumed_under_stale_reads_launches_each_attempt_once(stale, workers):
    """spec.runPolicy.suspend (docs/chainerjob.md, "Suspend"): the suspension is recorded as the next
    attempt before the master Job and StatefulSets go, so a sync that reads the children or the status
    of before it neither keeps the job running nor launches the suspended attempt again; after the
    resume, the StatefulSets deleted at suspension (stale and still ready) never start the master."""
    sim = ChainerSim(chainerjob(workers={"ws": workers} if workers else None), stale=stale)
    watch = Watch(sim, "Job")
    watch.settle()
    sim.all_ready()
    watch.settle()
    sim.master("chj-master", active=1)
    watch.settle()
    sim.edit({"runPolicy": {"suspend": True}})
    watch.settle()
    assert sim.state() == "Suspended" and sim.status["attempt"] == 1
    assert not sim.children[JOB_KEY] and not sim.children[STATEFULSET_KEY]
    mark = len(sim.created)
    sim.tick(60)
    watch.settle()
    assert [e for e in sim.created[mark:] if e.split(".")[0] in ("Job", "StatefulSet")] == []
    sim.edit({"runPolicy": {"suspend": False}})
    watch.settle()
    if workers:
        assert not sim.children[JOB_KEY], "the new attempt's master waits for the new attempt's workers"
        sim.all_ready()
        watch.settle()
    assert sim.names(JOB_KEY) == ["chj-master"]
    assert sim.children[JOB_KEY]["chj-master"]["metadata"]["labels"]["chainerjob.kubeflow.org/attempt"] == "1"
    sim.master("chj-master", active=1)
    watch.settle()
    sim.master("chj-master", succeeded=1, finished=("Complete", "CompletionsReached", "done"))
    watch.settle()
    assert sim.state() == "Complete" and sim.status["attempt"] == 1
    assert [e for e in sim.created if e.startswith("Job.")] == ["Job.batch/v1/chj-master"] * 2
    watch.check()


@pytest.mark.parametrize("workers", [0, 2], ids=["non-distributed", "distributed"])
@pytest.mark.parametrize("stale", MODES)
def test_a_resumed_chainerjob_stays_stamped_when_the_syncs_after_read_it_suspended(stale, workers):
    """Before: Suspended False (and Waiting True with it) was stamped with the clock of the sync that
    resumed the job, and each sync after it that read the Suspended status of before stamped them
    again with its own second until the master started. The resumed attempt's master Job and
    StatefulSets now keep the time (chainerjob.kubeflow.org/resumed)."""
    sim = ChainerSim(chainerjob(workers={"ws": workers} if workers else None), stale=stale)
    watch = Watch(sim, "Job")
    watch.settle()
    sim.all_ready()
    watch.settle()
    sim.master("chj-master", active=1)
    watch.settle()
    sim.edit({"runPolicy": {"suspend": True}})
    watch.settle()
    sim.tick(30)
    sim.edit({"runPolicy": {"suspend": False}})
    watch.sync()
    resumed = _times(sim.status)
    assert resumed["Suspended.lastTransitionTime"] == rfc3339(sim.now)
    assert _stale_syncs(sim, watch) == [resumed] * 4
    assert not watch.wrote
