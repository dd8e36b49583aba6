"""Properties over generated jobs and observations: determinism, fixed point, no lost running pod."""
from __future__ import annotations

import json
from datetime import timedelta

from hypothesis import given, settings
from hypothesis import strategies as st
from mcsim import Sim, mxjob

from hooks.mxjob.sync import sync_mxjob

PHASES = ["Pending", "Running", "Succeeded", "Failed"]
EXIT_CODES = [None, 0, 1, 2, 137, 138, 143]

jobs = st.one_of(
    st.builds(lambda s, w, pol, sp: mxjob(replicas={"Scheduler": 1, "Server": s,
                                                     "Worker": {"replicas": w, "restartPolicy": pol}},
                                           successPolicy=sp),
              st.integers(1, 3), st.integers(1, 4),
              st.sampled_from(["Never", "ExitCode", "OnFailure"]), st.sampled_from(["", "AllWorkers"])),
    st.builds(lambda w: mxjob(replicas={"Worker": w}), st.integers(1, 4)),
    st.builds(lambda n: mxjob(jobMode="MXTune", replicas={"TunerTracker": 1, "TunerServer": n,
                                                          "Tuner": 1}), st.integers(1, 3)),
)
pod_states = st.lists(st.tuples(st.sampled_from(PHASES), st.sampled_from(EXIT_CODES),
                                st.integers(0, 2), st.booleans()), min_size=12, max_size=12)
run_policies = st.fixed_dictionaries({}, optional={
    "backoffLimit": st.integers(0, 3), "cleanPodPolicy": st.sampled_from(["All", "Running", "None"]),
    "activeDeadlineSeconds": st.integers(1, 120), "ttlSecondsAfterFinished": st.integers(0, 60)})

SETTINGS = settings(max_examples=150, deadline=None, derandomize=True)


def observed_sim(parent: dict, policy: dict, states: list, elapsed: int) -> Sim:
    """A job after its first sync, its pods in the generated states, some time later."""
    parent["spec"]["runPolicy"] = policy
    sim = Sim(parent)
    sim.sync()
    for name, (phase, code, restarts, present) in zip(sorted(sim.pods), states, strict=False):
        if not present:
            sim.gc(name)
            continue
        sim.set_phase(name, phase, exit_code=code if phase in ("Succeeded", "Failed") else None,
                      restarts=restarts)
    sim.tick(elapsed)
    return sim


def dumps(value) -> str:
    return json.dumps(value, sort_keys=True)


@SETTINGS
@given(jobs, run_policies, pod_states, st.integers(0, 200))
def test_same_observations_give_byte_identical_answers(parent, policy, states, elapsed):
    sim = observed_sim(parent, policy, states, elapsed)
    request = sim.request()
    assert dumps(sync_mxjob(request, now=sim.now)) == dumps(sync_mxjob(request, now=sim.now))


@SETTINGS
@given(jobs, run_policies, pod_states, st.integers(0, 200))
def test_answer_fed_back_is_a_fixed_point(parent, policy, states, elapsed):
    sim = observed_sim(parent, policy, states, elapsed)
    before = {n: p["metadata"]["uid"] for n, p in sim.pods.items()}
    first = sim.sync()
    # A memory record the answer creates (an outcome, a restart) triggers one more sync, the one
    # that acts on it (cleanup, deleting the failed pod): the status must not change on it, but
    # for the record of a TTL cleanup that sync carries out.
    if any("-outcome" in c or "-restart-" in c for c in sim.created if c.startswith("ConfigMap/")):
        acted = sim.sync()
        assert dumps({k: v for k, v in acted["status"].items() if k != "cleanedUpTime"}) == dumps(first["status"])
        first = acted
    second = sync_mxjob(sim.request(), now=sim.now)
    assert dumps(second["status"]) == dumps(first["status"])
    # The only allowed change: a failed pod left out to be deleted is given again once it is gone.
    first_names = {(c["kind"], c["metadata"]["name"]) for c in first["children"]}
    second_names = {(c["kind"], c["metadata"]["name"]) for c in second["children"]}
    extra = second_names - first_names
    assert all(kind == "Pod" and name in before for kind, name in extra)
    assert second_names - extra == first_names
    # Time alone changes nothing until a timer the answer asked for is due.
    if first.get("resyncAfterSeconds", 10) > 1:
        later = sync_mxjob(sim.request(), now=sim.now + timedelta(seconds=1))
        assert dumps(later["status"]) == dumps(first["status"])


@SETTINGS
@given(jobs, run_policies, pod_states, st.integers(0, 200))
def test_no_running_pod_of_an_unfinished_job_is_dropped(parent, policy, states, elapsed):
    sim = observed_sim(parent, policy, states, elapsed)
    running = {n for n, p in sim.pods.items() if p["status"]["phase"] == "Running"}
    answer = sim.sync()
    finished = any(c["type"] in ("Succeeded", "Failed") and c["status"] == "True"
                   for c in answer["status"]["conditions"])
    if not finished:
        kept = {c["metadata"]["name"] for c in answer["children"] if c["kind"] == "Pod"}
        assert running <= kept


@SETTINGS
@given(jobs, run_policies, pod_states, st.integers(0, 200))
def test_a_finished_job_never_creates_a_pod(parent, policy, states, elapsed):
    sim = observed_sim(parent, policy, states, elapsed)
    sim.sync()
    finished = any(c["type"] in ("Succeeded", "Failed") and c["status"] == "True"
                   for c in sim.status["conditions"])
    if finished:
        created = len(sim.created)
        sim.tick(30)
        sim.sync()
        assert len(sim.created) == created
