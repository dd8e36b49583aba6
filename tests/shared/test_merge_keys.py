"""Metacontroller's list merge (hooks.shared.merge): the key it picks, the items it collapses, and that
no InPlace child the hooks answer holds a list it would collapse."""
from __future__ import annotations

from pathlib import Path

import pytest
from helpers import go_apply_merge, yamlio
from helpers.chainersim import CHILD_KEYS, example
from helpers.mcsim import T0
from hypothesis import given, settings
from hypothesis import strategies as st

from hooks.chainerjob.sync import sync_chainerjob
from hooks.shared.merge import collapsed, merge_key

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
# Kinds the shipped CompositeControllers and gang components update InPlace (Pods, ServiceAccounts,
# Jobs and MXJob's ConfigMap are OnDelete: never merged).
IN_PLACE = {"Service", "StatefulSet", "Role", "RoleBinding", "PodGroup"}


@pytest.mark.parametrize(("items", "key"), [
    pytest.param([{"name": "a", "port": 53, "protocol": "UDP"}, {"name": "b", "port": 53}], "port",
                 id="service-ports-by-port"),
    pytest.param([{"name": "p", "containerPort": 80}], "containerPort", id="container-ports"),
    pytest.param([{"name": "A", "value": "1"}], "name", id="env"),
    pytest.param([{"name": "v", "mountPath": "/x"}], "mountPath", id="mounts-by-path-not-name"),
    pytest.param([{"key": "k", "path": "p"}], "path", id="configmap-items"),
    pytest.param([{"name": "a"}, {"value": "b"}], None, id="no-common-key"),
    pytest.param(["a", "b"], None, id="not-objects"),
    pytest.param([], None, id="empty"),
])
def test_merge_key_is_the_first_known_key_every_item_has(items, key):
    assert merge_key(items) == key


def test_one_port_number_on_two_protocols_collapses_and_distinct_numbers_do_not():
    assert collapsed([{"port": 53, "protocol": "UDP"}, {"port": 53, "protocol": "TCP"}]) == [(1, "port", 53)]
    assert collapsed([{"port": 53}, {"port": 54}]) == []
    # Compared as Go prints them: 53 and "53" are one key.
    assert collapsed([{"port": 53}, {"port": "53"}]) == [(1, "port", "53")]


def _lists(value, path=""):
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _lists(item, f"{path}.{key}")
    elif isinstance(value, list):
        yield path, value
        for i, item in enumerate(value):
            yield from _lists(item, f"{path}[{i}]")


@pytest.mark.parametrize("case", sorted(p.name for p in GOLDEN.iterdir() if p.is_dir()))
def test_no_in_place_child_of_a_golden_answer_has_a_list_the_merge_collapses(case):
    answer = yamlio.load((GOLDEN / case / "response.yaml").read_text())
    for child in answer["children"]:
        if child["kind"] in IN_PLACE:
            for path, items in _lists(child):
                assert collapsed(items) == [], (child["kind"], child["metadata"]["name"], path)


def _worker_set_with(**container) -> dict:
    parent = example("chainerjob-mn.yaml")
    parent["spec"]["workerSets"]["ws0"]["template"]["spec"]["containers"][0].update(container)
    return parent


@pytest.mark.parametrize(("container", "problem"), [
    pytest.param({"ports": [{"containerPort": 53, "protocol": "UDP"}, {"containerPort": 53}]},
                 "spec.workerSets.ws0.template.spec.containers[0].ports[1].containerPort: 53 is also ports[0]'s",
                 id="port-number-twice"),
    pytest.param({"env": [{"name": "A", "value": "1"}, {"name": "A", "value": "2"}]},
                 "spec.workerSets.ws0.template.spec.containers[0].env[1].name: 'A' is also env[0]'s",
                 id="env-name-twice"),
    pytest.param({"ports": [{"containerPort": 53, "protocol": ["UDP"]}]},
                 "spec.workerSets.ws0.template.spec.containers[0].ports[0].protocol: must be one of TCP, UDP, "
                 "SCTP (a string), got a list", id="protocol-a-list"),
])
def test_a_worker_template_the_merge_would_collapse_is_refused_with_the_field(container, problem):
    answer = sync_chainerjob({"parent": _worker_set_with(**container), "children": {k: {} for k in CHILD_KEYS}},
                             now=T0)
    assert answer["children"] == []
    assert problem in answer["status"]["conditions"][-1]["message"]


def test_the_master_template_is_not_merged_so_one_number_on_two_protocols_is_fine():
    parent = example("chainerjob-mn.yaml")
    parent["spec"]["master"]["template"]["spec"]["containers"][0]["ports"] = [
        {"containerPort": 53, "protocol": "UDP"}, {"containerPort": 53}]
    answer = sync_chainerjob({"parent": parent, "children": {k: {} for k in CHILD_KEYS}}, now=T0)
    assert "specError" not in answer["status"] and answer["children"]
    assert all(c["reason"] != "ChainerJobFailedValidation" for c in answer["status"]["conditions"])


def test_a_running_chainerjob_edited_into_a_collapsing_template_keeps_every_child():
    from helpers.chainersim import ChainerSim

    sim = ChainerSim(example("chainerjob-mn.yaml"))
    sim.sync()
    sim.all_ready()
    sim.sync()
    before = {k: sorted(v) for k, v in sim.children.items()}
    ws0 = sim.parent["spec"]["workerSets"]["ws0"]
    ws0["template"]["spec"]["containers"][0]["env"] = [{"name": "A", "value": "1"}, {"name": "A", "value": "2"}]
    sim.edit({"workerSets": {"ws0": ws0}})
    answer = sim.sync()
    assert "env[1].name: 'A' is also env[0]'s" in answer["status"]["specError"]
    assert {k: sorted(v) for k, v in sim.children.items()} == before


# --- the hooks' reading of the merge, against the port of Metacontroller's (tests/helpers/go_apply_merge.py,
# itself checked against kubectl apply in tests/localcluster/test_go_merge_vs_kubectl.py) ---------------------------

_keys = st.sampled_from(["containerPort", "port", "mountPath", "name", "uid", "ip", "path", "protocol", "value"])
_key_values = st.one_of(st.integers(0, 3), st.sampled_from(["0", "1", "a"]), st.booleans())
_items = st.lists(st.one_of(st.dictionaries(_keys, _key_values, max_size=4), _key_values), max_size=5)


@settings(max_examples=300, deadline=None)
@given(_items)
def test_the_hooks_merge_key_and_collapse_agree_with_the_port_of_metacontroller(items):
    key = merge_key(items)
    assert key == (go_apply_merge.detect_list_map_key(items) or None)
    # An InPlace list answered again over itself: every item becomes the last one with its key, and
    # `collapsed` names exactly the items whose key an earlier item has.
    merged = go_apply_merge.Merge({"list": items}, {"list": items}, {"list": items})["list"]
    if key is None:
        assert merged == items and collapsed(items) == []
        return
    keys = [go_apply_merge.string_merge_key(item[key]) for item in items]
    last = dict(zip(keys, items, strict=True))
    assert merged == [last[k] for k in keys]
    assert [index for index, _, _ in collapsed(items)] == [i for i, k in enumerate(keys) if k in keys[:i]]
