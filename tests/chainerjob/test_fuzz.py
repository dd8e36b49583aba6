"""ChainerJob under hostile input (hypothesis): garbage of any JSON type at any path of the spec or
status, or of the request, never breaks the sync.

The rules are MXJob's (tests/mxjob/test_fuzz.py): the pure sync raises InvalidRequest (the
shell's 400) only for a malformed request, otherwise answers with something the shell can send; an
answer that reports a spec problem keeps every observed child; one that does not emits only
children the real API server admits (edits inside a pod template aside: the API server judges the
parts the hook passes through; under CONTROLPLANE=skip this one rule is not checked); answers are
deterministic and their status a fixed point.
Budget: MXJOB_FUZZ_EXAMPLES, as there.
"""
from __future__ import annotations

import copy
import json

from helpers.chainer_strategies import MASTER_STATES, jobs, observed_sim
from helpers.fuzz import FUZZ, garbage, paths, set_at
from helpers.metacontroller_writes import Admission
from hypothesis import given
from hypothesis import strategies as st

from hooks.chainerjob.sync import sync_chainerjob
from hooks.shared.errors import InvalidRequest

observations = st.tuples(st.lists(st.one_of(st.none(), st.integers(0, 3)), min_size=3, max_size=3),
                         st.sampled_from(MASTER_STATES), st.integers(0, 600))


def answer_or_400(request: dict, now) -> dict | None:
    try:
        answer = sync_chainerjob(request, now=now)
    except InvalidRequest:
        return None
    json.dumps(answer, allow_nan=False)
    assert isinstance(answer["status"], dict) and isinstance(answer["children"], list)
    return answer


def check_rules(request: dict, answer: dict, now, admission: Admission | None, *, checked: bool) -> None:
    status = answer["status"]
    observed = {(key.split(".")[0], name) for key, objs in request["children"].items() for name in objs}
    emitted = {(c["kind"], c["metadata"]["name"]) for c in answer["children"]}
    if "specError" in status:
        # Kept as last applied; only a master finished meanwhile may drop the PodGroup.
        assert {o for o in observed if o[0] != "PodGroup"} <= emitted <= observed, "an invalid edit must keep every child"
    elif any(c.get("reason") == "ChainerJobFailedValidation" for c in status.get("conditions", [])):
        assert not emitted
    elif checked and admission is not None:
        assert admission.refusals(answer["children"]) == []  # the real API server's verdict
    again = json.dumps(sync_chainerjob(request, now=now), sort_keys=True)
    assert again == json.dumps(answer, sort_keys=True), "not deterministic"
    fed_back = copy.deepcopy(request)
    fed_back["parent"]["status"] = status
    assert json.dumps(sync_chainerjob(fed_back, now=now)["status"], sort_keys=True) == \
        json.dumps(status, sort_keys=True), "the status is not a fixed point"


@FUZZ
@given(jobs, observations, st.data(), garbage)
def test_an_edit_of_spec_or_status_never_breaks_a_chainerjob_sync(admission, parent, obs, data, value):
    sim = observed_sim(parent, obs)
    request = sim.request()
    target = request["parent"]
    target.setdefault("status", {})
    candidates = [("spec", *p) for p in paths(target["spec"])] + [("status", *p) for p in paths(target["status"])]
    path = data.draw(st.sampled_from(candidates), label="path")
    set_at(target, path, value)
    answer = answer_or_400(request, sim.now)
    assert answer is not None, "a bad spec or status is a 200, not a 400"
    check_rules(request, answer, sim.now, admission, checked="template" not in path)


@FUZZ
@given(jobs, observations, st.data(), garbage)
def test_a_malformed_chainerjob_request_is_a_400_or_a_sound_answer(admission, parent, obs, data, value):
    sim = observed_sim(parent, obs)
    request = sim.request()
    candidates = [("parent", "metadata", *p) for p in paths(request["parent"]["metadata"])[1:]] + \
                 [("children", *p) for p in paths(request["children"])[1:]]
    set_at(request, data.draw(st.sampled_from(candidates), label="path"), value)
    answer = answer_or_400(request, sim.now)
    if answer is not None:
        check_rules(request, answer, sim.now, admission, checked=False)
