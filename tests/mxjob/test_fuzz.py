"""The hostile-input rules as properties over generated requests (hypothesis).

Three generators: valid jobs in random observed states, the same with a random edit of the spec or
status (garbage of any JSON type at any path), and the same with a random edit of the request
itself (the parent's identity, an observed child). For every request the pure sync either raises
InvalidRequest (the shell's 400) or answers with an object the shell can send as a 200; a 200
that reports a spec problem keeps every observed child (so no running pod is dropped) and one that
does not emits only children the real API server admits (the `admission` fixture; under
CONTROLPLANE=skip this one rule is not checked); answers are deterministic and the status they
write is read back unchanged.

Budget: MXJOB_FUZZ_EXAMPLES examples per property (default 60, derandomized, so `make test`
stays within a few minutes and always runs the same cases). A longer, random run:
    MXJOB_FUZZ_EXAMPLES=5000 .venv/bin/python -m pytest tests/mxjob/test_fuzz.py
"""
from __future__ import annotations

import copy
import json
from dataclasses import replace
from datetime import datetime
from typing import Any

from helpers.fuzz import FUZZ, garbage, paths, set_at
from helpers.metacontroller_writes import Admission
from helpers.strategies import jobs, observed_sim, pod_states, run_policies, with_rich_templates
from hypothesis import given
from hypothesis import strategies as st

from hooks.kinds import KINDS, MXJOB
from hooks.mxjob.sync import sync_mxjob
from hooks.server.app import create_app
from hooks.shared.errors import InvalidRequest

observed_jobs = st.builds(observed_sim, jobs.map(with_rich_templates), run_policies, pod_states,
                          st.integers(0, 200))






def answer_or_400(request: dict, now: datetime) -> dict | None:
    """The answer, or None for InvalidRequest; anything else escaping is a 500 and fails."""
    try:
        answer = sync_mxjob(request, now=now)
    except InvalidRequest:
        return None
    json.dumps(answer, allow_nan=False)  # the shell must be able to send it
    assert isinstance(answer["status"], dict) and isinstance(answer["children"], list)
    return answer


def passed_through(path: tuple) -> bool:
    """Whether an edit at this path is in a part of the pod template the hook neither reads nor
    checks (say a container's command): the API server, not the hook, judges those."""
    if "template" not in path:
        return False
    rest = path[path.index("template") + 1:]
    if rest[:1] != ("spec",) or len(rest) < 2:
        return False
    if rest[1] != "containers" or len(rest) < 4:
        return len(rest) >= 2 and rest[1] != "containers"
    # Inside an env entry's valueFrom, only "an object" is checked; the API server judges the rest.
    return rest[3] not in HOOK_READS or (rest[3] == "env" and len(rest) > 6)


HOOK_READS = ("name", "image", "env", "ports")


def check_rules(request: dict, answer: dict, now: datetime, admission: Admission | None, *, checked: bool = True) -> None:
    status = answer["status"]
    observed = {(kind.split(".")[0], name) for kind, objs in request["children"].items()
                for name in objs}
    emitted = {(c["kind"], c["metadata"]["name"]) for c in answer["children"]}
    if "specError" in status:
        assert emitted == observed, "an invalid edit must keep every child"
    elif any(c.get("reason") == "MXJobFailedValidation" for c in status.get("conditions", [])):
        assert not observed and not emitted
    else:
        state = [c["type"] for c in status["conditions"] if c["status"] == "True"]
        if not {"Succeeded", "Failed", "Suspended"} & set(state):
            running = {("Pod", name) for name, pod in request["children"]["Pod.v1"].items()
                       if isinstance(pod, dict) and isinstance(pod.get("status"), dict)
                       and pod["status"].get("phase") == "Running"
                       and not (pod.get("metadata") or {}).get("deletionTimestamp")}
            assert running <= emitted, "a running pod of a running job was dropped"
    if checked and "specError" not in status and emitted and admission is not None:
        # The real API server's verdict. Index 0 of each replica type stands for its siblings
        # (same template, other numbers), and the cluster ConfigMap for the records; the
        # progress children (the ServiceAccount the pods name) go too.
        assert admission.refusals([c for c in answer["children"]
                                   if c["metadata"]["name"].endswith(("-0", "-cluster", "-progress"))]) == []
    # Deterministic, and the status written is a fixed point of the same observations.
    assert json.dumps(sync_mxjob(request, now=now), sort_keys=True) == json.dumps(answer, sort_keys=True)
    again = copy.deepcopy(request)
    again["parent"]["status"] = status
    assert json.dumps(sync_mxjob(again, now=now)["status"], sort_keys=True) == \
        json.dumps(status, sort_keys=True)


@FUZZ
@given(observed_jobs)
def test_valid_jobs_in_any_observed_state_follow_the_rules(admission, sim):
    request = sim.request()
    answer = sync_mxjob(request, now=sim.now)
    check_rules(request, answer, sim.now, admission)


@FUZZ
@given(observed_jobs, st.data(), garbage)
def test_an_edit_of_spec_or_status_never_breaks_the_sync(admission, sim, data, value):
    request = sim.request()
    parent = request["parent"]
    parent.setdefault("status", {})
    targets = [("spec", *p) for p in paths(parent["spec"])] + \
              [("status", *p) for p in paths(parent["status"])]
    path = data.draw(st.sampled_from(targets), label="path")
    set_at(parent, path, value)
    answer = answer_or_400(request, sim.now)
    assert answer is not None, "a bad spec or status is a 200, not a 400"
    check_rules(request, answer, sim.now, admission, checked=not passed_through(path))


@FUZZ
@given(observed_jobs, st.data(), garbage)
def test_a_malformed_request_is_a_400_or_a_sound_answer(admission, sim, data, value):
    request = sim.request()
    targets = [("parent", "metadata", *p) for p in paths(request["parent"]["metadata"])[1:]] + \
              [("children", *p) for p in paths(request["children"])[1:]]
    set_at(request, data.draw(st.sampled_from(targets), label="path"), value)
    answer = answer_or_400(request, sim.now)
    if answer is not None:
        check_rules(request, answer, sim.now, admission)


# The times the shell passed to the MXJob core of SHELL, which otherwise is the real one.
SEEN: list[datetime] = []


def _timed_core(body: dict, *, now: datetime, **settings: str) -> Any:
    SEEN.append(now)
    return sync_mxjob(body, now=now, **settings)


SHELL = create_app(kinds=tuple(replace(kind, sync=_timed_core) if kind is MXJOB else kind for kind in KINDS)).test_client()


@FUZZ
@given(observed_jobs, st.data(), garbage)
def test_through_the_shell_a_malformed_request_is_a_400_and_a_sound_one_the_cores_answer(sim, data, value):
    """The same edits sent as HTTP bodies: the shell's selective decoder refuses what the core would
    (400 with a JSON message, never a 500) and otherwise answers what the core answers for the
    whole request, at the time the shell read."""
    request = sim.request()
    targets = [("parent", "metadata", *p) for p in paths(request["parent"]["metadata"])[1:]] + \
              [("children", *p) for p in paths(request["children"])[1:]] + \
              [("parent", "spec", *p) for p in paths(request["parent"]["spec"])]
    set_at(request, data.draw(st.sampled_from(targets), label="path"), value)
    SEEN.clear()
    response = SHELL.post("/sync", data=json.dumps(request), content_type="application/json")
    assert response.status_code in (200, 400), response.get_data(as_text=True)[:300]
    body = response.get_json()
    if response.status_code == 400:
        assert isinstance(body.get("error"), str) and body["error"]
        return
    assert body == json.loads(json.dumps(sync_mxjob(request, now=SEEN[0])))
