"""The memory records (docs/lifecycle.md, "Why the outcome is recorded in a child") as properties.

Each property is the generated form of one defect of issue 29 (tests/fuzz_repro/d552d2e/):
- stale parents with invalid edits: once a job's `<job>-outcome` record is observed, every answer's
  status is the record (plus specError, cleanedUpTime, statusWarnings), whatever status the parent
  shows and whatever the spec has become;
- MXTune layouts with terminating pods: a layout edit never deletes a live child of a started job,
  and is refused whenever the request still shows the old layout;
- child-rule sets missing a kind: a request without one of the child rules the hook needs is a 400
  naming it, for MXJob (with and without a gang) and ChainerJob, in the core and through the shell.

Budget: MXJOB_FUZZ_EXAMPLES examples per property (default 60, derandomized; tests/helpers/fuzz.py).
"""
from __future__ import annotations

import copy
import json

from helpers.chainer_strategies import observed_sim as observed_chainer_sim
from helpers.chainersim import ChainerSim, chainerjob
from helpers.fuzz import FUZZ, garbage, paths, set_at
from helpers.mcsim import gang_controller
from helpers.strategies import (
    OUTCOME,
    finished_runs,
    jobs,
    mxtune_edits,
    mxtune_views,
    observed_sim,
    pod_states,
    run_policies,
    started_mxtune,
)
from hypothesis import event, given
from hypothesis import strategies as st

from hooks.chainerjob.sync import sync_chainerjob
from hooks.mxjob.names import LAYOUT_ANNOTATION
from hooks.mxjob.sync import sync_mxjob
from hooks.server.app import create_app
from hooks.shared.errors import InvalidRequest
from hooks.shared.gang import VOLCANO_API
from hooks.shared.progress import ACCESS_KEYS

EXTRAS = ("specError", "cleanedUpTime", "statusWarnings")


def kept(request: dict) -> set[tuple[str, str]]:
    return {(key.split(".")[0], name) for key, objs in request["children"].items() for name in objs}


def emitted(answer: dict) -> set[tuple[str, str]]:
    return {(c["kind"], c["metadata"]["name"]) for c in answer["children"]}


def is_fixed_point(request: dict, answer: dict, now) -> bool:
    again = copy.deepcopy(request)
    again["parent"]["status"] = answer["status"]
    return json.dumps(sync_mxjob(again, now=now)["status"], sort_keys=True) == json.dumps(answer["status"], sort_keys=True)


# --- stale parents with invalid edits (D-A) ---------------------------------------------------------


def terminal(status: dict | None) -> str:
    """The state a status shows, for the statistics (`pytest --hypothesis-show-statistics`)."""
    true = [c.get("type") for c in (status or {}).get("conditions") or [] if c.get("status") == "True"]
    return next((t for t in ("Succeeded", "Failed") if t in true), "unfinished" if status else "none")


@FUZZ
@given(finished_runs, st.data())
def test_once_the_outcome_is_recorded_every_status_is_the_record(run, data):
    sim, written = run
    request = sim.request()
    record = json.loads(request["children"]["ConfigMap.v1"][OUTCOME]["data"]["record"])
    # A stale parent: any status written on the way (or none at all), with the spec edited past
    # admission: a layout change, or any value at any path of the spec.
    stale = data.draw(st.sampled_from([*written, None]), label="stale status")
    parent = request["parent"]
    parent.pop("status", None)
    if stale is not None:
        parent["status"] = copy.deepcopy(stale)
    if data.draw(st.booleans(), label="layout edit"):
        spec = parent["spec"]["mxReplicaSpecs"][data.draw(st.sampled_from(sorted(parent["spec"]["mxReplicaSpecs"])))]
        spec["replicas"] = spec.get("replicas", 1) + data.draw(st.sampled_from([-1, 1]), label="replicas by")
    else:
        set_at(parent, ("spec", *data.draw(st.sampled_from(paths(parent["spec"])[1:]), label="path")),
               data.draw(garbage, label="value"))
    answer = sync_mxjob(request, now=sim.now)
    status = answer["status"]
    event("spec error" if "specError" in status else "valid spec")
    event(f"stale status: {terminal(stale)}")
    assert {k: v for k, v in status.items() if k not in EXTRAS} == record
    if "specError" in status:
        assert emitted(answer) == kept(request), "an invalid edit keeps every child"
    assert is_fixed_point(request, answer, sim.now)


# --- MXTune layouts with terminating pods (D-B) ------------------------------------------------------


@FUZZ
@given(st.integers(1, 3), mxtune_views, mxtune_edits)
def test_an_mxtune_layout_edit_never_deletes_a_live_child_and_is_refused_while_the_old_layout_shows(servers, view, edit):
    sim = started_mxtune(servers)
    for name, going in zip(sorted(sim.pods), view["terminating"], strict=False):
        if going:
            sim.terminating(name)  # a node drain: the pod (not its Service) is on its way out
    if view["config_map"] == "deleted":
        sim.remove("v1", "ConfigMap", "mx-cluster")
    request = sim.request()
    if view["config_map"] == "terminating":
        request["children"]["ConfigMap.v1"]["mx-cluster"]["metadata"]["deletionTimestamp"] = "2026-11-21T10:00:00Z"
    if not view["annotated"]:
        for pod in request["children"]["Pod.v1"].values():
            pod["metadata"]["annotations"].pop(LAYOUT_ANNOTATION, None)
    specs = request["parent"]["spec"]["mxReplicaSpecs"]
    specs["TunerServer"]["replicas"] = edit["servers"]
    if edit["port"] is not None:
        specs[edit["port_type"]]["template"]["spec"]["containers"][0]["ports"] = [
            {"name": "mxjob-port", "containerPort": edit["port"]}]
    changed = edit["servers"] != servers or edit["port"] is not None

    answer = sync_mxjob(request, now=sim.now)
    live = {(key.split(".")[0], name) for key in ("Pod.v1", "Service.v1")
            for name, obj in request["children"][key].items() if not obj["metadata"].get("deletionTimestamp")}
    assert live <= emitted(answer), "an edit deleted a live child of a running job"
    # What still shows the old layout: the cluster ConfigMap; a live pod or Service of a replica
    # the edit removes; a live pod that carries the layout it was built with.
    new_names = {"mx-tunertracker-0", "mx-tuner-0", *(f"mx-tunerserver-{i}" for i in range(edit["servers"]))}
    shows_old_layout = changed and (
        view["config_map"] == "observed"
        or any(name not in new_names for _, name in live)
        or (view["annotated"] and any(kind == "Pod" for kind, _ in live)))
    event(f"shows the old layout: {shows_old_layout}, refused: {'specError' in answer['status']}")
    if shows_old_layout:
        assert "changed after the job's pods were created" in answer["status"].get("specError", ""), answer["status"]
        assert emitted(answer) == kept(request)
    assert is_fixed_point(request, answer, sim.now)


# --- child-rule sets missing a kind (D-C) ------------------------------------------------------------

SHELL = create_app().test_client()


def assert_refused(request: dict, dropped: set[str], sync, route: str, now) -> None:
    for key in dropped:
        del request["children"][key]
    try:
        sync(request, now=now)
    except InvalidRequest as err:
        message = str(err)
    else:
        raise AssertionError(f"answered without {sorted(dropped)}")
    assert any(message.startswith(f"children[{key}]: required: the CompositeController has no child rule")
               for key in dropped), message
    assert "re-apply metacontroller/" in message
    response = SHELL.post(route, data=json.dumps(request), content_type="application/json")
    assert response.status_code == 400 and response.get_json()["error"] == message


@FUZZ
@given(st.builds(observed_sim, jobs, run_policies, pod_states, st.integers(0, 200)), st.booleans(), st.data())
def test_an_mxjob_request_missing_a_child_rule_is_refused_naming_it(sim, gang, data):
    if gang:
        sim.use_controller(gang_controller(VOLCANO_API))
        sim.sync()
    request = sim.request()
    # The progress rules (ServiceAccount, Role, RoleBinding) are needed only by a job that asks
    # for progress (tests/mxjob/test_progress.py checks that refusal); this job does not.
    required = sorted(key for key in request["children"] if key not in ACCESS_KEYS)
    dropped = data.draw(st.sets(st.sampled_from(required), min_size=1), label="dropped")
    assert_refused(request, dropped, sync_mxjob, "/sync", sim.now)


@FUZZ
@given(st.sampled_from([{}, {"ws": 2}]), st.tuples(st.lists(st.sampled_from([None, 0, 1, 2]), max_size=2),
                                                  st.sampled_from([None, "active", "Complete", "Failed"]),
                                                  st.integers(0, 100)), st.data())
def test_a_chainerjob_request_missing_a_child_rule_is_refused_naming_it(workers, obs, data):
    sim: ChainerSim = observed_chainer_sim(chainerjob(workers=workers or None), obs)
    request = sim.request()
    dropped = data.draw(st.sets(st.sampled_from(sorted(request["children"])), min_size=1), label="dropped")
    assert_refused(request, dropped, sync_chainerjob, "/chainerjob/sync", sim.now)
