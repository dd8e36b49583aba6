"""The shell's selective decoding: the MXJob core answers the same from it as from the full request.

The shell builds only the fields of observed children that hooks.mxjob.sync.OBSERVED_FIELDS
declares. If the core starts reading another field without declaring it, these tests fail.
"""
from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import pytest
from helpers import yamlio
from helpers.mcsim import Sim, mxjob

import hooks.kinds
from hooks.mxjob.sync import sync_mxjob
from hooks.server.wire import RequestDecoder

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
DECODER = RequestDecoder(hooks.kinds.OBSERVED_FIELDS["MXJob"])


def both_ways(request: dict, now: datetime) -> tuple[dict, dict]:
    raw = json.dumps(request).encode()
    return sync_mxjob(json.loads(raw), now=now), sync_mxjob(DECODER.decode(raw), now=now)


def _mxjob_goldens() -> list[str]:
    # Only MXJob declares OBSERVED_FIELDS; other kinds' requests are decoded whole.
    return sorted(p.name for p in GOLDEN.iterdir() if p.is_dir()
                  and "kind: MXJob" in (p / "request.yaml").read_text())


@pytest.mark.parametrize("case", _mxjob_goldens())
def test_every_golden_answer_is_the_same_from_the_selective_decode(case):
    request = yamlio.load((GOLDEN / case / "request.yaml").read_text())
    now = datetime.fromisoformat(request.pop("now"))
    full, selective = both_ways(request, now)
    assert selective == full


def _failing_pods() -> Sim:
    sim = Sim(mxjob(replicas={"Scheduler": 1, "Server": 1, "Worker": {"replicas": 2, "restartPolicy": "ExitCode"}},
                    runPolicy={"backoffLimit": 5}))
    sim.sync()
    sim.run()
    sim.sync()
    sim.set_phase("mx-worker-0", "Failed", exit_code=137, restarts=2)
    sim.set_phase("mx-worker-1", "Running", restarts=1)
    sim.terminating("mx-server-0")
    return sim


def _invalid_edit() -> Sim:
    sim = _failing_pods()
    sim.sync()
    sim.edit({"mxReplicaSpecs": {"Worker": {"replicas": 3}}})
    return sim


def _no_last_applied() -> Sim:
    sim = _invalid_edit()
    for pod in sim.pods.values():
        del pod["metadata"]["annotations"]
    return sim


def _in_place_restarts_past_backoff() -> Sim:
    # The Failed message names the restarted container and its last exit code, read from lastState.
    sim = Sim(mxjob(replicas={"Worker": {"replicas": 2, "restartPolicy": "OnFailure"}}, runPolicy={"backoffLimit": 1}))
    sim.sync()
    sim.run()
    sim.set_phase("mx-worker-0", "Running", restarts=2, last_exit_code=3)
    return sim


@pytest.mark.parametrize("scenario", [_failing_pods, _invalid_edit, _no_last_applied, _in_place_restarts_past_backoff],
                         ids=["failed-restarting-terminating-pods", "invalid-edit-keeps-children",
                              "invalid-edit-without-last-applied", "in-place-restarts-past-backoff"])
def test_scenario_answers_are_the_same_from_the_selective_decode(scenario):
    sim = scenario()
    full, selective = both_ways(sim.request(), sim.now)
    assert selective == full
    if scenario is _in_place_restarts_past_backoff:
        assert "pod mx-worker-0 was lost (exit code 3)" in selective["status"]["conditions"][-1]["message"]


def test_the_selective_decode_leaves_out_what_the_core_never_reads():
    sim = Sim(mxjob())
    sim.sync()
    sim.run()
    decoded = DECODER.decode(json.dumps(sim.request()).encode())
    pod = decoded["children"]["Pod.v1"]["mx-worker-0"]
    assert set(pod) == {"apiVersion", "kind", "metadata", "spec", "status"}
    # Of the pod spec, only the containers' names, plain env values (the layout guard's DMLC_NUM_*)
    # and termination message policies (whether a message may be a log tail).
    container = pod["spec"]["containers"][0]
    assert set(pod["spec"]) == {"containers"} and set(container) == {"name", "env", "terminationMessagePolicy"}
    assert {"name": "DMLC_NUM_WORKER", "value": "2"} in container["env"]
    assert all(set(e) <= {"name", "value"} for e in container["env"])
    assert decoded["parent"] == sim.parent  # the parent is decoded whole


@pytest.mark.parametrize(("child", "path"), [
    ({"status": "Running"}, "$.children[...][...].status"),
    ({"metadata": {"uid": 7}}, "$.children[...][...].metadata.uid"),
    ({"metadata": {"labels": {"a": 1}}}, "$.children[...][...].metadata.labels[...]"),
    ({"status": {"containerStatuses": {"name": "mxnet"}}}, "$.children[...][...].status.containerStatuses"),
    ("a pod", "$.children[...][...]"),
], ids=["status-a-string", "uid-a-number", "label-not-a-string", "container-statuses-an-object", "child-a-string"])
def test_an_observed_child_of_the_wrong_shape_is_malformed_and_named(child, path):
    from hooks.server.wire import MalformedRequest

    body = json.dumps({"parent": {}, "children": {"Pod.v1": {"p": child}}}).encode()
    with pytest.raises(MalformedRequest, match="wrong shape") as caught:
        DECODER.decode(body)
    assert caught.value.status == 400 and str(caught.value).endswith(f"at `{path}`")


def test_the_core_skips_its_own_shape_walk_only_for_children_the_decoder_checked():
    """The decoder marks the children it checked against the kind's fields (the walk was half of a
    1,000-replica sync); any other mapping, or one checked against other fields, is walked as before."""
    from hooks.mxjob.sync import OBSERVED_FIELDS
    from hooks.shared.errors import InvalidRequest
    from hooks.shared.request import CheckedChildren, read_children

    decoded = DECODER.decode(json.dumps({"parent": {}, "children": {"Pod.v1": {"p": {"metadata": {"name": "p"}}}}}).encode())
    assert isinstance(decoded["children"], CheckedChildren) and decoded["children"].fields is OBSERVED_FIELDS
    bad = {"Pod.v1": {"p": {"metadata": {"uid": 7}}}}
    with pytest.raises(InvalidRequest, match="uid"):
        read_children({"children": bad}, ("Pod.v1",), fields=OBSERVED_FIELDS)
    with pytest.raises(InvalidRequest, match="uid"):
        read_children({"children": CheckedChildren(bad, {"metadata": {"uid": str}})}, ("Pod.v1",), fields=OBSERVED_FIELDS)
    # A child's name is still matched against its key.
    with pytest.raises(InvalidRequest, match="must equal the key"):
        read_children({"children": CheckedChildren({"Pod.v1": {"p": {"metadata": {"name": "q"}}}}, OBSERVED_FIELDS)},
                      ("Pod.v1",), fields=OBSERVED_FIELDS)
