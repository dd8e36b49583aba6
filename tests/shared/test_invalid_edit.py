"""What an invalid edit of a running job keeps, the same for every kind (hooks.shared.answers).

The children stay as last applied and the status stays as it was, with `specError` added: a field
the hook does not read back is kept exactly as it was, a field it reads back only in the shape it
writes it (otherwise it is left out and named in statusWarnings). docs/hostile-input.md says so.
"""
from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest
from helpers.chainersim import ChainerSim, chainerjob
from helpers.mcsim import T0, Sim, Stepped, mxjob

from hooks.mxjob.vocabulary import STATE_ORDER
from hooks.shared.answers import keep_children, kept_status, refuse_new
from hooks.shared.status import OldStatus

# A field the hook never writes, as another tool (or a later version of the hook) could leave it.
FOREIGN = {"note": {"by": "a dashboard", "items": [1, "two", None]}}


def running_mxjob() -> Sim:
    sim = Sim(mxjob())
    sim.sync()
    sim.run()
    sim.sync()
    return sim


def running_chainerjob() -> ChainerSim:
    sim = ChainerSim(chainerjob(workers={"ws": 2}))
    sim.sync()
    sim.all_ready()
    sim.sync()
    sim.master("chj-master", active=1)
    sim.sync()
    return sim


# Per kind: a running job, and an edit its hook refuses.
KINDS = [
    pytest.param(running_mxjob, {"mxReplicaSpecs": {"Worker": {"replicas": -1}}}, id="mxjob"),
    pytest.param(running_chainerjob, {"backend": "nccl"}, id="chainerjob"),
]


def edit_invalidly(make: Any, edit: dict, status_update: dict) -> tuple[Stepped, dict, dict]:
    """A running job whose status got `status_update`, then an invalid edit: (sim, status before, answer)."""
    sim = make()
    sim.set_parent_status({**sim.status, **status_update})
    before = {k: v for k, v in sim.status.items() if k != "observedGeneration"}
    sim.edit(edit)
    return sim, before, sim.sync()


@pytest.mark.parametrize(("make", "edit"), KINDS)
def test_an_invalid_edit_keeps_every_status_field_and_adds_only_the_spec_error(make, edit):
    sim, before, answer = edit_invalidly(make, edit, FOREIGN)
    status = dict(answer["status"])
    assert "spec." in status.pop("specError")
    assert status == before
    assert sim.sync() == answer  # a fixed point: nothing moves while the spec stays invalid


@pytest.mark.parametrize(("make", "edit"), KINDS)
def test_an_invalid_edit_keeps_a_read_back_field_only_in_the_shape_the_hook_writes(make, edit):
    _, before, answer = edit_invalidly(make, edit, {"startTime": "yesterday", **FOREIGN})
    assert "startTime" not in answer["status"]
    assert answer["status"]["note"] == FOREIGN["note"]
    assert [w for w in answer["status"]["statusWarnings"] if w.startswith("status.startTime ")]
    assert answer["status"]["conditions"] == before["conditions"]


def test_an_mxjob_invalid_edit_keeps_the_replica_counts_it_does_not_read_back():
    _, before, answer = edit_invalidly(running_mxjob, KINDS[0].values[1], {})
    assert answer["status"]["replicaStatuses"] == before["replicaStatuses"]
    assert answer["status"]["replicaStatuses"]["Worker"]["active"] == 2


# --- the shared rules, one at a time -------------------------------------------------------------

NOW = datetime(2026, 1, 1, tzinfo=T0.tzinfo)


def test_kept_status_leaves_out_what_is_written_again_and_what_metacontroller_writes():
    old = OldStatus({"observedGeneration": 3, "specError": "old", "statusWarnings": ["old"], "extra": 1,
                     "startTime": "bad"}, condition_types=STATE_ORDER)
    assert kept_status(old, {"conditions": []}, read_back_fields=("conditions", "startTime")) == \
        {"extra": 1, "conditions": []}


def test_kept_status_keeps_unread_fields_first_then_the_read_back_ones_in_their_order():
    old = OldStatus({"b": 1, "conditions": "not a list", "a": 2}, condition_types=STATE_ORDER)
    status = kept_status(old, {"conditions": [], "startTime": "t"}, read_back_fields=("conditions", "startTime"))
    assert list(status) == ["b", "a", "conditions", "startTime"]


def test_keep_children_answers_every_observed_child_as_last_applied_with_the_message_last():
    observed = [("Pod.v1", "p", {"metadata": {"name": "p", "namespace": "ns", "uid": "u"}, "spec": {"x": 1}})]
    answer = keep_children({"a": 1}, observed, "why")
    assert answer == {"status": {"a": 1, "specError": "why"},
                      "children": [{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ns"}}]}
    assert list(answer["status"]) == ["a", "specError"]


def test_refuse_new_sets_failed_with_the_reason_and_puts_it_last():
    created = {"type": "Created", "status": "True", "reason": "R", "message": "m",
               "lastUpdateTime": "2025-01-01T00:00:00Z", "lastTransitionTime": "2025-01-01T00:00:00Z"}
    status = refuse_new([created], "bad spec", NOW, reason="XFailedValidation", state_order=("Failed", "Created"))
    assert [(c["type"], c["reason"]) for c in status["conditions"]] == [("Created", "R"),
                                                                          ("Failed", "XFailedValidation")]
    assert status["conditions"][1]["message"] == "bad spec"
    assert status["conditions"][1]["lastTransitionTime"] == "2026-01-01T00:00:00Z"
