"""ChainerJob's decision (hooks.chainerjob.decision): what a sync answers, from the observations alone."""
from __future__ import annotations

import dataclasses

import pytest
from helpers.chainersim import chainerjob

from hooks.chainerjob.decision import Decision, decide, ready_workers
from hooks.chainerjob.spec import parse_chainerjob

JOB = parse_chainerjob(chainerjob(workers={"a": 2, "b": 1}))
SINGLE = parse_chainerjob(chainerjob())
PODGROUP = {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
            "metadata": {"name": "chj", "namespace": "default"}}
BOTH_SETS = {"chj-workerset-a": {}, "chj-workerset-b": {}}


def decision(job=JOB, *, outcome=None, master_observed=False, ready=None, statefulsets=None, podgroup=None,
             observed_podgroups=None) -> Decision:
    return decide(job, outcome=outcome, master_observed=master_observed,
                  ready=ready if ready is not None else {name: 0 for name in job.worker_sets},
                  statefulsets=statefulsets or {}, podgroup=podgroup, observed_podgroups=observed_podgroups or {})


def test_the_master_waits_for_every_worker_to_be_ready():
    assert not decision(ready={"a": 2, "b": 0}).master
    assert decision(ready={"a": 2, "b": 1}).master


def test_a_single_pod_job_starts_its_master_at_once():
    assert decision(SINGLE, ready={}).master


def test_a_finished_job_never_creates_its_master_again_but_keeps_an_observed_one():
    assert not decision(outcome="Complete", ready={"a": 2, "b": 1}).master
    assert decision(outcome="Failed", master_observed=True).master


def test_under_a_gang_nothing_that_makes_pods_is_created_before_the_podgroup_exists():
    waiting = decision(podgroup=PODGROUP)
    assert (waiting.podgroup, waiting.master, waiting.held_back) == (True, False, frozenset({"a", "b"}))
    assert waiting.waiting_message is not None and "PodGroup default/chj" in waiting.waiting_message


def test_under_a_gang_what_exists_is_kept_while_the_podgroup_is_missing():
    kept = decision(podgroup=PODGROUP, master_observed=True, statefulsets={"chj-workerset-a": {}})
    assert (kept.master, kept.held_back) == (True, frozenset({"b"}))
    assert kept.waiting_message is not None
    assert decision(podgroup=PODGROUP, master_observed=True, statefulsets=BOTH_SETS).waiting_message is None


def test_under_a_gang_the_master_does_not_wait_for_ready_workers_once_the_podgroup_exists():
    started = decision(podgroup=PODGROUP, observed_podgroups={"chj": PODGROUP})
    assert (started.master, started.held_back, started.waiting_message, started.gang) == (True, frozenset(), None, True)


def test_a_finished_job_has_no_podgroup_and_holds_nothing_back():
    done = decision(outcome="Complete", podgroup=PODGROUP, master_observed=True)
    assert (done.podgroup, done.held_back, done.waiting_message, done.done) == (False, frozenset(), None, True)


def test_the_decision_is_a_frozen_value():
    with pytest.raises(dataclasses.FrozenInstanceError):
        decision().master = True


def test_ready_workers_reads_each_sets_statefulset_and_counts_a_bad_value_as_zero():
    observed = {"chj-workerset-a": {"status": {"readyReplicas": 2}}, "chj-workerset-b": {"status": {"readyReplicas": "1"}}}
    assert ready_workers(JOB, observed) == {"a": 2, "b": 0}
    assert ready_workers(JOB, {}) == {"a": 0, "b": 0}
