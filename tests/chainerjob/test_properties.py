"""ChainerJob properties over generated jobs and observations: determinism, fixed point, nothing lost."""
from __future__ import annotations

import json
from datetime import timedelta

from helpers.chainer_strategies import MASTER_STATES, observed_sim
from helpers.chainersim import JOB_KEY, chainerjob
from hypothesis import given, settings
from hypothesis import strategies as st

from hooks.chainerjob.sync import sync_chainerjob

jobs = st.builds(
    lambda sets, backoff: chainerjob(workers=sets or None, master={
        **chainerjob()["spec"]["master"], **({"backoffLimit": backoff} if backoff is not None else {})}),
    st.dictionaries(st.sampled_from(["a", "b", "ws0"]), st.integers(0, 3), max_size=3),
    st.one_of(st.none(), st.integers(0, 3)))
observations = st.tuples(st.lists(st.one_of(st.none(), st.integers(0, 4)), min_size=3, max_size=3),
                         st.sampled_from(MASTER_STATES), st.integers(0, 600))

SETTINGS = settings(max_examples=150, deadline=None, derandomize=True)




def dumps(value) -> str:
    return json.dumps(value, sort_keys=True)


@SETTINGS
@given(jobs, observations)
def test_same_observations_give_byte_identical_answers(parent, obs):
    sim = observed_sim(parent, obs)
    request = sim.request()
    assert dumps(sync_chainerjob(request, now=sim.now)) == dumps(sync_chainerjob(request, now=sim.now))


@SETTINGS
@given(jobs, observations)
def test_answer_fed_back_is_a_fixed_point(parent, obs):
    sim = observed_sim(parent, obs)
    first = sim.sync()
    second = sync_chainerjob(sim.request(), now=sim.now + timedelta(seconds=1))
    assert dumps(second) == dumps(first)


@SETTINGS
@given(jobs, observations)
def test_a_master_that_exists_is_never_dropped_and_a_finished_one_never_comes_back(parent, obs):
    sim = observed_sim(parent, obs)
    had_master = bool(sim.names(JOB_KEY))
    finished = any(c["type"] in ("Complete", "Failed") and c["status"] == "True"
                   for c in sim.status.get("conditions", []))
    answer = sim.sync()
    has_master = any(c["kind"] == "Job" for c in answer["children"])
    if had_master:
        assert has_master
    if finished and not had_master:
        assert not has_master


@SETTINGS
@given(jobs, observations)
def test_the_role_never_grants_on_an_empty_name_list(parent, obs):
    answer = observed_sim(parent, obs).sync()
    for role in (c for c in answer["children"] if c["kind"] == "Role"):
        assert all(rule["resourceNames"] for rule in role["rules"])
