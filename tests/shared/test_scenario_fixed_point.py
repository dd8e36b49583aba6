"""The scenario harness's fixed-point check (helpers/mcsim.py), which every scenario step of every kind runs.

A hook whose answer changes when it sees its own result must fail the step it happens in; a step that
wrote a child the hook reads back (a memory record, a deleted child, a PodGroup) hands off to the
next sync, which may answer other children, but, save for the wait on a PodGroup, not another status.
"""
from __future__ import annotations

import itertools

import pytest
from helpers.chainersim import ChainerSim, chainerjob
from helpers.mcsim import Handoff, Sim, mxjob

from hooks.chainerjob.sync import sync_chainerjob
from hooks.mxjob.sync import sync_mxjob


def counting_status(sync):
    """The hook, with a counter in its status: never a fixed point."""
    calls = itertools.count()

    def hook(request, **settings):
        answer = sync(request, **settings)
        answer["status"]["syncs"] = next(calls)
        return answer
    return hook


@pytest.mark.parametrize(("scene", "sync"), [(lambda: Sim(mxjob()), sync_mxjob),
                                             (lambda: ChainerSim(chainerjob(workers={"ws": 1})), sync_chainerjob)],
                         ids=["mxjob", "chainerjob"])
def test_a_status_that_changes_on_every_sync_fails_the_step(scene, sync):
    sim = scene()
    sim._hook = counting_status(sync)
    with pytest.raises(AssertionError, match="not a fixed point: syncing again changes the status"):
        sim.sync()


def test_a_child_that_changes_on_every_sync_fails_the_step():
    sim = Sim(mxjob())
    sim.sync()
    calls = itertools.count()

    def hook(request, **settings):
        answer = sync_mxjob(request, **settings)
        answer["children"][0]["metadata"]["labels"]["sync"] = str(next(calls))
        return answer
    sim._hook = hook
    with pytest.raises(AssertionError, match="not a fixed point: syncing again changes the children"):
        sim.sync()


def test_a_hand_off_lets_the_next_sync_answer_other_children_but_not_another_status():
    sim = Sim(mxjob(replicas={"Worker": 2}, runPolicy={"cleanPodPolicy": "All"}))
    sim.sync()
    sim.run()
    sim.sync()
    sim.set_phase("mx-worker-0", "Succeeded", exit_code=0)
    sim.set_phase("mx-worker-1", "Succeeded", exit_code=0)
    sim.sync()  # records the outcome; the sync that observes the record deletes the pods (cleanPodPolicy)
    assert sim.condition("Succeeded")["status"] == "True" and "ConfigMap/mx-outcome" in sim.created
    handoff = Handoff.of(["ConfigMap/mx-outcome"], [])
    sim.assert_fixed_point(handoff)
    with pytest.raises(AssertionError, match="changes the children"):
        sim.assert_fixed_point(Handoff())
    sim._hook = counting_status(sync_mxjob)
    with pytest.raises(AssertionError, match="changes the status"):
        sim.assert_fixed_point(handoff)


def test_only_records_podgroups_and_deletions_are_hand_offs():
    assert not Handoff.of(["Pod/mx-worker-0", "Service/mx-worker-0", "ConfigMap/mx-cluster"], [])
    assert Handoff.of(["ConfigMap/mx-worker-0-restart-1"], []).record
    assert Handoff.of(["ConfigMap/mx-attempt-2"], []).record
    assert Handoff.of(["PodGroup.scheduling.volcano.sh/v1beta1/chj"], []).podgroup
    assert Handoff.of(["ConfigMap.v1/chj-outcome"], []).record
    assert Handoff.of([], ["Pod/mx-worker-0"])
