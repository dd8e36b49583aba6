"""Properties over generated jobs and observations: determinism, fixed point, no lost running pod."""
from __future__ import annotations

import json
from datetime import timedelta

from helpers.strategies import jobs, observed_sim, pod_states, run_policies
from hypothesis import given, settings
from hypothesis import strategies as st

from hooks.mxjob.sync import sync_mxjob

SETTINGS = settings(max_examples=150, deadline=None, derandomize=True)




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
    if any("-outcome" in c or "-restart-" in c or "-attempt-" in c for c in sim.created if c.startswith("ConfigMap/")):
        acted = sim.sync()
        assert dumps({k: v for k, v in acted["status"].items() if k != "cleanedUpTime"}) == dumps(first["status"])
        first = acted
    second = sync_mxjob(sim.request(), now=sim.now)
    assert dumps(second["status"]) == dumps(first["status"])
    # The only allowed change: a failed pod left out to be deleted (or every pod a whole-job restart
    # replaces) is given again once it is gone.
    first_names = {(c["kind"], c["metadata"]["name"]) for c in first["children"]}
    second_names = {(c["kind"], c["metadata"]["name"]) for c in second["children"]}
    extra = second_names - first_names
    # A whole-job restart also holds back the pods of slots that had none until the old attempt's are gone.
    restarted = any("-attempt-" in c for c in sim.created if c.startswith("ConfigMap/"))
    assert all(kind == "Pod" and (name in before or restarted) for kind, name in extra)
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
