"""The MXJob CRD: its OpenAPI schema, its CEL rules, and every example against both.

Here the API server is emulated (tests/helpers/crd.py): the schema is checked with an OpenAPI 3.0
validator and the CEL rules are evaluated with cel-python, bound to `self`/`oldSelf` at the schema
node that declares them, the way the API server binds them, with its ratcheting on updates. The
cases are tables in tests/helpers/crd_cases.py, which tests/install/test_apiserver_crd_rules.py replays
against a real API server: the two must agree on every one.
"""

from __future__ import annotations

import copy
import re
from datetime import UTC

import celpy
import pytest
from helpers.crd import (
    BLOCKED_NOTE,
    CRD,
    RULES,
    SCHEMA,
    VALID,
    VERSION,
    Rule,
    broken_rules,
    keys_anywhere,
    lower_ascii,
    mxjob,
    pruned_paths,
    refusals,
    schema_errors,
    status_refusals,
    unchanged,
    untyped_nodes,
    with_field,
)
from helpers.crd_cases import (
    AGREEMENT_CASES,
    BASE_TUNE,
    BLOCKED_RULES,
    CEL_ACCEPTS,
    CEL_REJECTS,
    EXAMPLE_DOCS,
    EXAMPLES,
    KUEUE_UPDATE_ACCEPTS,
    RATCHET_STATUS_WRITES,
    RATCHET_UPDATES,
    REPRESENTATIVE_STATUS,
    SCHEMA_ACCEPTS,
    SCHEMA_REJECTS,
    SCHEMA_REQUIRES,
    STATUS_REJECTS,
    UNBLOCKED_RULES,
    UPDATE_ACCEPTS,
    UPDATE_REJECTS,
    edited,
    example_files,
    without,
)

SPEC_SCHEMA = SCHEMA["properties"]["spec"]
TEMPLATE_SCHEMA = SPEC_SCHEMA["properties"]["mxReplicaSpecs"]["additionalProperties"]["properties"]["template"]
STATUS_SCHEMA = SCHEMA["properties"]["status"]

RUN_POLICY_FIELDS = (
    "cleanPodPolicy",
    "ttlSecondsAfterFinished",
    "activeDeadlineSeconds",
    "backoffLimit",
    "schedulingPolicy",
)


def rule_with(fragment: str) -> Rule:
    matches = [r for r in RULES if fragment in r.message]
    assert len(matches) == 1, f"{fragment!r} should name exactly one rule, got {matches}"
    return matches[0]


def named_rules(fragments: list[str]) -> set[str]:
    """The messages of the rules the fragments name (the others are the API server's own wording)."""
    return {rule_with(f).message for f in fragments if any(f in r.message for r in RULES)}


# ---------------------------------------------------------------------------------------------
# The CRD object itself


def test_crd_names_group_and_scope():
    assert CRD["apiVersion"] == "apiextensions.k8s.io/v1"
    assert CRD["metadata"]["name"] == "mxjobs.kubeflow.org"
    spec = CRD["spec"]
    assert spec["group"] == "kubeflow.org"
    assert spec["scope"] == "Namespaced"
    names = spec["names"]
    assert (names["kind"], names["plural"], names["singular"]) == ("MXJob", "mxjobs", "mxjob")
    assert names["shortNames"] == ["mxj"]
    assert "kubeflow" in names["categories"]


def test_v1_comes_first_and_is_the_served_storage_version_with_status_subresource():
    # The older served versions are tested in tests/install/test_crd_versions.py.
    assert [v["name"] for v in CRD["spec"]["versions"] if v["storage"]] == ["v1"]
    assert VERSION["name"] == "v1"
    assert VERSION["served"] is True and VERSION["storage"] is True
    assert VERSION["subresources"] == {"status": {}}


def test_printer_columns_show_state_from_last_condition_and_age():
    columns = {c["name"]: c for c in VERSION["additionalPrinterColumns"]}
    assert columns["State"]["jsonPath"] == ".status.conditions[-1:].type"
    assert columns["State"]["type"] == "string"
    assert columns["Age"]["jsonPath"] == ".metadata.creationTimestamp"
    assert columns["Age"]["type"] == "date"


def test_printer_columns_show_the_attempt_and_the_restarts_before_the_age():
    """After a whole-job restart every pod shows RESTARTS 0: the job's own counters say what happened."""
    columns = [(c["name"], c["type"], c["jsonPath"]) for c in VERSION["additionalPrinterColumns"]]
    names = [name for name, _, _ in columns]
    assert ("Attempt", "integer", ".status.attempt") in columns
    assert ("Restarts", "integer", ".status.restartCount") in columns
    assert names.index("State") < names.index("Attempt") < names.index("Restarts") < names.index("Age") == len(names) - 1
    status = SCHEMA["properties"]["status"]["properties"]
    assert status["attempt"]["type"] == status["restartCount"]["type"] == "integer"


def test_schema_declares_only_the_defaults_clients_need_and_the_hook_assumes():
    # The hook applies defaults; the schema declares just two, for clients that read stored
    # objects (docs/ecosystem.md): the training SDK needs runPolicy, Kueue needs jobMode.
    assert keys_anywhere(SCHEMA, "default") == ["default", "default"]
    assert SPEC_SCHEMA["properties"]["runPolicy"]["default"] == {}
    assert SPEC_SCHEMA["properties"]["jobMode"]["default"] == "MXTrain"


def test_schema_is_structural_every_node_has_a_type():
    # The API server refuses a CRD whose schema is not structural.
    assert untyped_nodes(SCHEMA) == []


def test_inline_run_policy_fields_match_run_policy():
    run_policy = SPEC_SCHEMA["properties"]["runPolicy"]["properties"]
    for field in RUN_POLICY_FIELDS:
        assert SPEC_SCHEMA["properties"][field] == run_policy[field], field
    assert set(run_policy) == set(RUN_POLICY_FIELDS) | {"suspend", "failurePolicy", "progress", "stallPolicy"}


def test_every_cel_rule_has_a_message_naming_the_field():
    assert RULES, "the CRD should declare CEL rules"
    for rule in RULES:
        assert rule.message.startswith("spec."), rule


def test_iterating_rules_run_over_a_bounded_map():
    # The API server rejects the CRD when a rule's estimated cost is too high; every rule that
    # iterates does so over mxReplicaSpecs, whose size maxProperties caps.
    replica_specs = SPEC_SCHEMA["properties"]["mxReplicaSpecs"]
    assert replica_specs["maxProperties"] == 6
    for rule in RULES:
        if any(macro in rule.source for macro in (".all(", ".exists(", ".filter(")):
            assert rule.path in {("spec",), ("spec", "mxReplicaSpecs")}, rule


def test_rules_compare_pod_templates_only_whole():
    # The rules compare a pod template whole (`==`), never read into one: the CEL cost of a rule that
    # iterated over a template's lists would be priced by Kubernetes' unbounded PodSpec lists, and a
    # rule about pods belongs to the hook (one place).
    for rule in RULES:
        assert not re.search(r"template\s*(\.|\[)", rule.source), rule.source


def schema_nodes(schema: dict, path: str = "") -> list[tuple[str, dict]]:
    """(path, node) for schema and every schema below it."""
    found = [(path, schema)]
    for name, sub in schema.get("properties", {}).items():
        found += schema_nodes(sub, f"{path}.{name}")
    for key, mark in (("additionalProperties", ".*"), ("items", "[]")):
        if isinstance(schema.get(key), dict):
            found += schema_nodes(schema[key], f"{path}{mark}")
    return found


def test_the_pod_templates_are_kubernetes_pod_template_spec():
    # Generated from the API server's OpenAPI (scripts/gen_crd_pod_schema.py; the apiserver test
    # test_pod_template_schema.py checks it is what the pinned server serves): a typo in a template is
    # refused, nothing in it is kept unchecked, and nothing in it has a default the server would
    # write into every stored job.
    assert set(TEMPLATE_SCHEMA["properties"]) == {"metadata", "spec"}
    container = TEMPLATE_SCHEMA["properties"]["spec"]["properties"]["containers"]["items"]
    assert {"name", "image", "args", "command", "env", "ports", "resources"} <= set(container["properties"])
    quantities = []
    for path, node in schema_nodes(TEMPLATE_SCHEMA):
        assert "default" not in node and "$ref" not in node and "allOf" not in node and "oneOf" not in node, path
        if node.get("x-kubernetes-preserve-unknown-fields"):
            assert node == {"x-kubernetes-preserve-unknown-fields": True}, path  # a scalar: a quantity
            quantities.append(path)
    assert ".spec.containers[].resources.limits.*" in quantities
    assert ".spec.volumes[].emptyDir.sizeLimit" in quantities
    assert untyped_nodes(TEMPLATE_SCHEMA) == []


def quirky_objects(schema: dict, path: str = "") -> list[str]:
    """Typed objects that keep unknown fields without declaring any key.

    The real API server's `==` compares such an object (valuesunstructured.go, unstructuredMap.Equal)
    by size, then only the keys both sides have: {spec: ...} equals {metadata: ...}. cel-python's
    `==` is exact, so the emulation is right only if no rule compares one.
    """
    found = []
    if schema.get("type") == "object" and schema.get("x-kubernetes-preserve-unknown-fields") \
            and "properties" not in schema and not isinstance(schema.get("additionalProperties"), dict):
        found.append(path)
    for name, sub in schema.get("properties", {}).items():
        found += quirky_objects(sub, f"{path}.{name}")
    if isinstance(schema.get("additionalProperties"), dict):
        found += quirky_objects(schema["additionalProperties"], f"{path}.*")
    return found


def test_no_rule_compares_an_object_whose_keys_the_server_cannot_match():
    # Every rule is on spec or under it, so nothing under spec may be such an object.
    assert {r.path[:1] for r in RULES} == {("spec",)}
    assert quirky_objects(SPEC_SCHEMA) == []


def test_the_quirky_objects_check_catches_a_plain_free_form_template():
    plain = {"type": "object", "properties": {"template": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}}
    assert quirky_objects(plain) == [".template"]


def test_the_whole_template_check_catches_a_rule_that_reads_a_template():
    bad = "self.mxReplicaSpecs.all(k, self.mxReplicaSpecs[k].template.spec.nodeSelector == {})"
    assert re.search(r"template\s*(\.|\[)", bad)


# ---------------------------------------------------------------------------------------------
# OpenAPI schema


def test_examples_are_found():
    names = {path.relative_to(EXAMPLES).as_posix() for path in example_files()}
    assert {
        "dist-cpu-train.yaml",
        "dist-gpu-train.yaml",
        "byteps.yaml",
        "tune.yaml",
        "single-worker.yaml",
    } <= names


@pytest.mark.parametrize("doc", [d for _, d in EXAMPLE_DOCS], ids=[i for i, _ in EXAMPLE_DOCS])
def test_example_validates_against_the_crd(doc):
    assert doc["apiVersion"] == "kubeflow.org/v1"
    assert schema_errors(doc) == []
    assert pruned_paths(doc, SCHEMA) == [], "the API server would drop these fields"
    assert broken_rules(doc) == []


@pytest.mark.parametrize("doc", [d for _, d in EXAMPLE_DOCS], ids=[i for i, _ in EXAMPLE_DOCS])
def test_example_has_an_mxnet_container_with_an_image_in_every_replica(doc):
    for rtype, rspec in doc["spec"]["mxReplicaSpecs"].items():
        containers = rspec["template"]["spec"]["containers"]
        images = [c.get("image") for c in containers if c["name"] == "mxnet"]
        assert len(images) == 1 and images[0], rtype


@pytest.mark.parametrize(
    "dotted,value", SCHEMA_REJECTS.values(), ids=SCHEMA_REJECTS.keys()
)
def test_schema_rejects(dotted, value):
    # kubectl apply is strict: a field the schema does not declare is refused, not dropped.
    assert schema_errors(VALID) == [] and pruned_paths(VALID, SCHEMA) == []
    obj = with_field(VALID, dotted, value)
    assert schema_errors(obj) + pruned_paths(obj, SCHEMA) != []


@pytest.mark.parametrize("path", SCHEMA_REQUIRES.values(), ids=SCHEMA_REQUIRES.keys())
def test_schema_requires(path):
    assert schema_errors(without(VALID, path)) != []


@pytest.mark.parametrize(
    "dotted,value", SCHEMA_ACCEPTS.values(), ids=SCHEMA_ACCEPTS.keys()
)
def test_schema_accepts(dotted, value):
    obj = with_field(VALID, dotted, value)
    assert schema_errors(obj) == []
    assert pruned_paths(obj, SCHEMA) == []


def test_status_schema_declares_every_field_the_hook_writes():
    obj = {**VALID, "status": REPRESENTATIVE_STATUS}
    assert schema_errors(obj) == []
    assert pruned_paths(obj, SCHEMA) == [], "the API server would prune these status fields"
    # mxReplicaStatuses is only read (older operators wrote it); declared so it is not pruned.
    assert set(STATUS_SCHEMA["properties"]) == set(REPRESENTATIVE_STATUS) | {"mxReplicaStatuses"}


@pytest.mark.parametrize("field,value", STATUS_REJECTS.values(), ids=STATUS_REJECTS.keys())
def test_status_schema_rejects(field, value):
    status = {**REPRESENTATIVE_STATUS, field: value}
    assert schema_errors({**VALID, "status": status}) != []
    assert status_refusals({**VALID, "status": status}, VALID) != []


# ---------------------------------------------------------------------------------------------
# CEL rules on create


@pytest.mark.parametrize("obj", CEL_ACCEPTS.values(), ids=CEL_ACCEPTS.keys())
def test_cel_accepts(obj):
    assert schema_errors(obj) == []
    assert broken_rules(obj) == []


@pytest.mark.parametrize("obj,fragments", CEL_REJECTS.values(), ids=CEL_REJECTS.keys())
def test_cel_rejects(obj, fragments):
    assert schema_errors(obj) == [], "the object should pass the schema and fail only CEL"
    expected = {rule_with(f).message for f in fragments}
    assert {r.message for r in broken_rules(obj)} == expected


@pytest.mark.parametrize("obj,fragments", BLOCKED_RULES.values(), ids=BLOCKED_RULES.keys())
def test_a_blocking_schema_error_stops_the_rules(obj, fragments):
    assert broken_rules(obj) != [], "the object breaks a rule too"
    found = refusals(obj)
    assert found[-1] == BLOCKED_NOTE and not set(found) & {r.message for r in RULES}


@pytest.mark.parametrize("obj,fragments", UNBLOCKED_RULES.values(), ids=UNBLOCKED_RULES.keys())
def test_a_bound_error_lets_the_rules_run(obj, fragments):
    found = refusals(obj)
    assert BLOCKED_NOTE not in found
    assert named_rules(fragments) and named_rules(fragments) <= set(found)


# ---------------------------------------------------------------------------------------------
# CEL transition rules (updates)


@pytest.mark.parametrize("old,new", UPDATE_ACCEPTS.values(), ids=UPDATE_ACCEPTS.keys())
def test_update_accepted(old, new):
    assert broken_rules(new, old=old) == []


@pytest.mark.parametrize("old,new", KUEUE_UPDATE_ACCEPTS.values(), ids=KUEUE_UPDATE_ACCEPTS.keys())
def test_update_accepted_for_kueue(old, new):
    assert old != new and schema_errors(new) == []
    assert broken_rules(new, old=old) == []


@pytest.mark.parametrize("old,new,fragments", UPDATE_REJECTS.values(), ids=UPDATE_REJECTS.keys())
def test_update_rejected(old, new, fragments):
    assert old != new
    broken = {r.message for r in broken_rules(new, old=old) if r.is_transition}
    assert broken == {rule_with(f).message for f in fragments}


# ---------------------------------------------------------------------------------------------
# Ratcheting: on an update, an error at a node that did not change is let through


@pytest.mark.parametrize("stored,edit,fragments", RATCHET_UPDATES.values(), ids=RATCHET_UPDATES.keys())
def test_ratcheting_on_update(stored, edit, fragments):
    assert refusals(stored) != [], "the stored object breaks the CRD as it is now"
    found = refusals(edited(stored, edit), old=stored)
    if fragments is None:
        assert found == []
    else:
        assert found and named_rules(fragments) <= set(found)


@pytest.mark.parametrize("stored,status", RATCHET_STATUS_WRITES.values(), ids=RATCHET_STATUS_WRITES.keys())
def test_a_job_stored_before_a_rule_takes_status_writes(stored, status):
    assert broken_rules(stored) != []
    assert status_refusals({**stored, "status": status}, stored) == []


def test_ratcheting_equality_is_the_api_servers():
    free = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    declared = {"type": "object", "additionalProperties": {"x-kubernetes-preserve-unknown-fields": True}}
    assert unchanged({"a": 1}, {"a": 1}, declared)
    assert not unchanged({"a": 1}, {"a": 1}, free), "a key without a schema is not correlated"
    assert unchanged({}, {}, free) and unchanged([{"a": 1}], [{"a": 1}], {"type": "array"})
    assert not unchanged({"a": 1}, {"b": 1}, declared) and not unchanged(1, 1.0, {})


def test_transition_rules_do_not_run_on_create():
    assert broken_rules(BASE_TUNE, old=None) == []
    assert all(not r.is_transition for r in broken_rules(mxjob({"Worker": 0})))


def test_every_cel_rule_is_exercised_by_a_rejecting_case():
    exercised = {rule_with(f).source for _, fragments in CEL_REJECTS.values() for f in fragments}
    exercised |= {rule_with(f).source for *_, fragments in UPDATE_REJECTS.values() for f in fragments}
    assert exercised == {r.source for r in RULES}


def test_lower_ascii_matches_kubernetes_semantics():
    assert lower_ascii(celpy.celtypes.StringType("TunerServer-É")) == "tunerserver-É"


# ---------------------------------------------------------------------------------------------
# The CRD and the hook agree: whatever admission lets through, the hook accepts, and the hook
# rejects what CEL rejects (it must, for objects stored before the CRD was installed or updated).


def _hook_accepts(obj: dict) -> bool:
    from datetime import datetime

    from helpers.requests import MXJOB_CHILD_KEYS

    from hooks.mxjob.sync import sync_mxjob

    parent = copy.deepcopy(obj)
    parent["metadata"].update(namespace="default", uid="0b4f", generation=1)
    request = {
        "controller": {},
        "parent": parent,
        "children": {key: {} for key in MXJOB_CHILD_KEYS},  # every rule of the shipped controller
        "related": {},
        "finalizing": False,
    }
    response = sync_mxjob(request, now=datetime(2025, 1, 2, tzinfo=UTC))
    reasons = {c.get("reason") for c in response["status"].get("conditions", [])}
    return "MXJobFailedValidation" not in reasons


@pytest.mark.parametrize("obj,valid", AGREEMENT_CASES.values(), ids=AGREEMENT_CASES.keys())
def test_hook_agrees_with_the_crd(obj, valid):
    assert (schema_errors(obj) == [] and broken_rules(obj) == []) is valid
    assert _hook_accepts(obj) is valid
