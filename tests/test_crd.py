"""The MXJob CRD: its OpenAPI schema, its CEL rules, and every example against both.

The API server is not available here, so the schema is checked with an OpenAPI 3.0 validator
and the CEL rules are evaluated with cel-python, bound to `self`/`oldSelf` at the schema node
that declares them, the way the API server binds them.
"""

from __future__ import annotations

import copy
import re
from datetime import UTC
from pathlib import Path

import celpy
import pytest
import yaml
from helpers.crd import (
    CRD,
    ROOT,
    RULES,
    SCHEMA,
    VALID,
    VERSION,
    Rule,
    broken_rules,
    keys_anywhere,
    lower_ascii,
    mxjob,
    mxnet,
    pruned_paths,
    schema_errors,
    untyped_nodes,
    with_field,
)

EXAMPLES = ROOT / "examples"

SPEC_SCHEMA = SCHEMA["properties"]["spec"]
STATUS_SCHEMA = SCHEMA["properties"]["status"]

RUN_POLICY_FIELDS = (
    "cleanPodPolicy",
    "ttlSecondsAfterFinished",
    "activeDeadlineSeconds",
    "backoffLimit",
    "schedulingPolicy",
)


# ---------------------------------------------------------------------------------------------
# Helpers: schema validation, pruning, CEL






















def rule_with(fragment: str) -> Rule:
    matches = [r for r in RULES if fragment in r.message]
    assert len(matches) == 1, f"{fragment!r} should name exactly one rule, got {matches}"
    return matches[0]






def example_files() -> list[Path]:
    found = []
    for path in sorted(EXAMPLES.rglob("*.yaml")):
        docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
        if any(d.get("kind") == "MXJob" for d in docs):
            found.append(path)
    return found


def example_docs() -> list[tuple[str, dict]]:
    return [
        (f"{path.relative_to(EXAMPLES)}#{i}", doc)
        for path in example_files()
        for i, doc in enumerate(yaml.safe_load_all(path.read_text()))
        if doc and doc.get("kind") == "MXJob"
    ]


EXAMPLE_DOCS = example_docs()


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
    # The older served versions are tested in tests/test_crd_versions.py.
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
    assert set(run_policy) == set(RUN_POLICY_FIELDS) | {"suspend"}


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


def test_rules_read_only_what_the_schema_declares():
    # The API server's CEL exposes only an object's declared properties (SchemaDeclType in
    # k8s.io/apiextensions-apiserver: "does not expose unknown fields"), and a pod template is
    # free-form: a rule that reads a field of a template, or iterates over one, does not compile
    # there and the whole CRD is refused at install. cel-python sees every field, so the rules'
    # other tests cannot catch it: a template may only be compared whole (`==`).
    template = SPEC_SCHEMA["properties"]["mxReplicaSpecs"]["additionalProperties"]["properties"]["template"]
    assert "properties" not in template and template["x-kubernetes-preserve-unknown-fields"] is True
    for rule in RULES:
        assert not re.search(r"template\s*(\.|\[)", rule.source), rule.source


def test_the_declared_fields_check_catches_a_rule_that_reads_a_template():
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





SCHEMA_REJECTS = {
    "restartPolicy-Sometimes": ("spec.mxReplicaSpecs.Worker.restartPolicy", "Sometimes"),
    "replicas-negative": ("spec.mxReplicaSpecs.Worker.replicas", -1),
    "replicas-string": ("spec.mxReplicaSpecs.Worker.replicas", "2"),
    "jobMode-unknown": ("spec.jobMode", "MXServe"),
    "cleanPodPolicy-unknown": ("spec.runPolicy.cleanPodPolicy", "Some"),
    "inline-cleanPodPolicy-unknown": ("spec.cleanPodPolicy", "Finished"),
    "activeDeadlineSeconds-zero": ("spec.runPolicy.activeDeadlineSeconds", 0),
    "ttl-negative": ("spec.runPolicy.ttlSecondsAfterFinished", -1),
    "backoffLimit-negative": ("spec.backoffLimit", -1),
    "suspend-string": ("spec.runPolicy.suspend", "yes"),
    "successPolicy-unknown": ("spec.successPolicy", "AnyWorker"),
    "minResources-not-a-quantity": (
        "spec.runPolicy.schedulingPolicy.minResources",
        {"cpu": "lots"},
    ),
    "template-not-an-object": ("spec.mxReplicaSpecs.Worker.template", "pod"),
    "replicas-over-maximum": ("spec.mxReplicaSpecs.Worker.replicas", 5001),
    "activeDeadlineSeconds-int64-max": ("spec.runPolicy.activeDeadlineSeconds", 2**63 - 1),
    "inline-activeDeadlineSeconds-over-maximum": ("spec.activeDeadlineSeconds", 2**31),
    "ttl-over-maximum": ("spec.runPolicy.ttlSecondsAfterFinished", 2**31),
    "backoffLimit-over-maximum": ("spec.runPolicy.backoffLimit", 2**31),
    "mxReplicaSpecs-empty": ("spec.mxReplicaSpecs", {}),
    "mxReplicaSpecs-seven-types": (
        "spec.mxReplicaSpecs",
        {t: {"template": mxnet()} for t in "ABCDEFG"},
    ),
}


@pytest.mark.parametrize(
    "dotted,value", SCHEMA_REJECTS.values(), ids=SCHEMA_REJECTS.keys()
)
def test_schema_rejects(dotted, value):
    assert schema_errors(VALID) == []
    assert schema_errors(with_field(VALID, dotted, value)) != []


def test_schema_requires_spec_and_mxreplicaspecs():
    assert schema_errors({"apiVersion": "kubeflow.org/v1", "kind": "MXJob"}) != []
    no_specs = copy.deepcopy(VALID)
    del no_specs["spec"]["mxReplicaSpecs"]
    assert schema_errors(no_specs) != []


SCHEMA_ACCEPTS = {
    "activeDeadlineSeconds-one": ("spec.runPolicy.activeDeadlineSeconds", 1),
    "ttl-zero": ("spec.runPolicy.ttlSecondsAfterFinished", 0),
    "backoffLimit-zero": ("spec.runPolicy.backoffLimit", 0),
    "successPolicy-empty": ("spec.successPolicy", ""),
    "minResources-quantities": (
        "spec.schedulingPolicy.minResources",
        {"cpu": "500m", "memory": "4Gi", "nvidia.com/gpu": 2},
    ),
    "legacy-label": ("spec.mxReplicaSpecs.Worker.label", "gpu-v100"),
    "template-free-form": (
        "spec.mxReplicaSpecs.Worker.template",
        {"metadata": {"annotations": {"a": "b"}}, "spec": {"anything": [1, {"goes": True}]}},
    ),
}


@pytest.mark.parametrize(
    "dotted,value", SCHEMA_ACCEPTS.values(), ids=SCHEMA_ACCEPTS.keys()
)
def test_schema_accepts(dotted, value):
    obj = with_field(VALID, dotted, value)
    assert schema_errors(obj) == []
    assert pruned_paths(obj, SCHEMA) == []


REPRESENTATIVE_STATUS = {
    "conditions": [
        {
            "type": "Created",
            "status": "True",
            "reason": "MXJobCreated",
            "message": "MXJob default/job is created.",
            "lastUpdateTime": "2025-01-02T03:04:05Z",
            "lastTransitionTime": "2025-01-02T03:04:05Z",
        },
        {
            "type": "Running",
            "status": "False",
            "reason": "MXJobRunning",
            "message": "MXJob default/job is running.",
            "lastUpdateTime": "2025-01-02T03:05:00Z",
            "lastTransitionTime": "2025-01-02T03:05:00Z",
        },
        {
            "type": "Succeeded",
            "status": "True",
            "reason": "MXJobSucceeded",
            "message": "MXJob default/job succeeded: its Scheduler exited with code 0.",
            "lastUpdateTime": "2025-01-02T04:00:00Z",
            "lastTransitionTime": "2025-01-02T04:00:00Z",
        },
    ],
    "replicaStatuses": {
        "Scheduler": {"active": 0, "succeeded": 1, "failed": 0, "completedIndexes": "0"},
        "Worker": {"active": 0, "succeeded": 2, "failed": 1, "completedIndexes": "0-1"},
    },
    "startTime": "2025-01-02T03:04:05Z",
    "completionTime": "2025-01-02T04:00:00Z",
    "observedGeneration": 3,
    "restartCount": 1,
    "restartHistory": {
        "job-worker-1": {"lastFailedUID": "0b4f", "recreations": 1, "priorContainerRestarts": 2}
    },
    "cleanedUpTime": "2025-01-03T04:00:00Z",
    "specError": "",
    "statusWarnings": ["status.startTime is not an RFC 3339 time with a zone; it was ignored"],
}


def test_status_schema_declares_every_field_the_hook_writes():
    obj = {**VALID, "status": REPRESENTATIVE_STATUS}
    assert schema_errors(obj) == []
    assert pruned_paths(obj, SCHEMA) == [], "the API server would prune these status fields"
    # mxReplicaStatuses is only read (older operators wrote it); declared so it is not pruned.
    assert set(STATUS_SCHEMA["properties"]) == set(REPRESENTATIVE_STATUS) | {"mxReplicaStatuses"}


STATUS_REJECTS = {
    "condition-type-unknown": ("conditions", [{"type": "Done", "status": "True"}]),
    "condition-status-yes": ("conditions", [{"type": "Running", "status": "Yes"}]),
    "condition-without-status": ("conditions", [{"type": "Running"}]),
    "startTime-not-a-time": ("startTime", "yesterday"),
    "observedGeneration-string": ("observedGeneration", "3"),
    "replicaStatus-active-string": ("replicaStatuses", {"Worker": {"active": "1"}}),
    "statusWarnings-eleven": ("statusWarnings", ["w"] * 11),
}


@pytest.mark.parametrize("field,value", STATUS_REJECTS.values(), ids=STATUS_REJECTS.keys())
def test_status_schema_rejects(field, value):
    status = {**REPRESENTATIVE_STATUS, field: value}
    assert schema_errors({**VALID, "status": status}) != []


# ---------------------------------------------------------------------------------------------
# CEL rules on create

CEL_ACCEPTS = {
    "distributed-canonical-keys": mxjob({"Scheduler": 1, "Server": 2, "Worker": 4}),
    "distributed-lowercase-keys": mxjob({"scheduler": 1, "server": 1, "worker": 1}),
    "distributed-uppercase-keys": mxjob({"SCHEDULER": None, "SERVER": 3, "WORKER": 2}),
    "scheduler-replicas-left-out": mxjob({"Scheduler": None, "Server": None, "Worker": None}),
    "worker-only": mxjob({"Worker": 1}),
    "worker-only-many": mxjob({"worker": 8}),
    "explicit-mxtrain": mxjob({"Worker": 1}, jobMode="MXTrain"),
    "tune": mxjob({"TunerTracker": 1, "TunerServer": 2, "Tuner": 1}, jobMode="MXTune"),
    "tune-mixed-case-keys": mxjob(
        {"tunerTracker": None, "tunerserver": 5, "TUNER": None}, jobMode="MXTune"
    ),
}


@pytest.mark.parametrize("obj", CEL_ACCEPTS.values(), ids=CEL_ACCEPTS.keys())
def test_cel_accepts(obj):
    assert schema_errors(obj) == []
    assert broken_rules(obj) == []


CEL_REJECTS = {
    "scheduler-two-replicas": (
        mxjob({"Scheduler": 2, "Server": 1, "Worker": 1}),
        ["run exactly one pod"],
    ),
    "lowercase-scheduler-zero-replicas": (
        mxjob({"scheduler": 0, "server": 1, "worker": 1}),
        ["run exactly one pod"],
    ),
    "worker-zero-replicas": (mxjob({"Worker": 0}), ["at least 1"]),
    "server-zero-replicas": (
        mxjob({"Scheduler": 1, "Server": 0, "Worker": 1}),
        ["at least 1"],
    ),
    "unknown-type": (mxjob({"Worker": 1, "Chief": 1}), ["unknown replica type"]),
    "same-type-twice-in-different-case": (
        mxjob({"Worker": 1, "worker": 1}),
        ["differ only in letter case"],
    ),
    "train-without-worker": (
        mxjob({"Scheduler": 1, "Server": 1}),
        ["an MXTrain job needs a Worker"],
    ),
    "scheduler-without-server": (
        mxjob({"Scheduler": 1, "Worker": 2}),
        ["both a Scheduler and a Server"],
    ),
    "server-without-scheduler": (
        mxjob({"Server": 1, "Worker": 2}),
        ["both a Scheduler and a Server"],
    ),
    "train-with-tuner-types": (
        mxjob({"Worker": 1, "Tuner": 1}),
        ["belong to tuning jobs"],
    ),
    "tune-without-tuner": (
        mxjob({"TunerTracker": 1, "TunerServer": 1}, jobMode="MXTune"),
        ["needs a TunerTracker, a TunerServer and a"],
    ),
    "tune-with-worker": (
        mxjob({"TunerTracker": 1, "TunerServer": 1, "Tuner": 1, "Worker": 1}, jobMode="MXTune"),
        ["belong to training jobs"],
    ),
    "tune-two-trackers": (
        mxjob({"TunerTracker": 2, "TunerServer": 1, "Tuner": 1}, jobMode="MXTune"),
        ["run exactly one pod"],
    ),
    "tune-two-lowercase-tuners": (
        mxjob({"TunerTracker": 1, "TunerServer": 1, "tuner": 2}, jobMode="MXTune"),
        ["run exactly one pod"],
    ),
    "tune-no-tuner-servers": (
        mxjob({"TunerTracker": 1, "TunerServer": 0, "Tuner": 1}, jobMode="MXTune"),
        ["at least 1"],
    ),
}


@pytest.mark.parametrize("obj,fragments", CEL_REJECTS.values(), ids=CEL_REJECTS.keys())
def test_cel_rejects(obj, fragments):
    assert schema_errors(obj) == [], "the object should pass the schema and fail only CEL"
    expected = {rule_with(f).message for f in fragments}
    assert {r.message for r in broken_rules(obj)} == expected


# ---------------------------------------------------------------------------------------------
# CEL transition rules (updates)


def _edit(obj: dict, edit) -> dict:
    new = copy.deepcopy(obj)
    edit(new)
    return new


BASE = mxjob({"Scheduler": 1, "Server": 2, "Worker": 2})
BASE_NO_MODE = mxjob({"Worker": 1})
BASE_TUNE = mxjob({"TunerTracker": 1, "TunerServer": 1, "Tuner": 1}, jobMode="MXTune")

UPDATE_ACCEPTS = {
    "nothing-changed": (BASE, BASE),
    "suspend": (BASE, _edit(BASE, lambda o: o["spec"].update(runPolicy={"suspend": True}))),
    "deadline-added": (BASE, _edit(BASE, lambda o: o["spec"].update(activeDeadlineSeconds=60))),
    "labels-changed": (BASE, _edit(BASE, lambda o: o["metadata"].update(labels={"a": "b"}))),
    "default-mode-written-out": (
        BASE_NO_MODE,
        _edit(BASE_NO_MODE, lambda o: o["spec"].update(jobMode="MXTrain")),
    ),
    "default-mode-dropped": (
        _edit(BASE_NO_MODE, lambda o: o["spec"].update(jobMode="MXTrain")),
        BASE_NO_MODE,
    ),
}


@pytest.mark.parametrize("old,new", UPDATE_ACCEPTS.values(), ids=UPDATE_ACCEPTS.keys())
def test_update_accepted(old, new):
    assert broken_rules(new, old=old) == []


def _set_replicas(o):
    o["spec"]["mxReplicaSpecs"]["Worker"]["replicas"] = 3


def _set_image(o):
    o["spec"]["mxReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["image"] = "x:2"


def _add_env(o):
    container = o["spec"]["mxReplicaSpecs"]["Server"]["template"]["spec"]["containers"][0]
    container["env"] = [{"name": "A", "value": "1"}]


def _set_restart_policy(o):
    o["spec"]["mxReplicaSpecs"]["Worker"]["restartPolicy"] = "ExitCode"


def _rename_key(o):
    specs = o["spec"]["mxReplicaSpecs"]
    specs["worker"] = specs.pop("Worker")


IMMUTABLE_SPECS = "spec.mxReplicaSpecs is immutable"
IMMUTABLE_LAYOUT = "the replica types and their replicas are immutable"
IMMUTABLE_MODE = "spec.jobMode is immutable"


def _suspended(obj: dict, value: bool = True) -> dict:
    return _edit(obj, lambda o: o["spec"].setdefault("runPolicy", {}).update(suspend=value))


# What Kueue v0.5-v0.10 writes into every replica template when it admits a job (RunWithPodSetsInfo),
# here with topology-aware scheduling: labels, an annotation, nodeSelector, tolerations and a gate.
KUEUE_INFO = {
    "labels": {"kueue.x-k8s.io/podset": "worker", "kueue.x-k8s.io/tas": "true"},
    "annotations": {"kueue.x-k8s.io/workload": "mxjob-x-abcde"},
    "nodeSelector": {"instance-type": "on-demand"},
    "tolerations": [{"key": "spot", "operator": "Exists", "effect": "NoSchedule"}],
    "schedulingGates": [{"name": "kueue.x-k8s.io/topology"}],
}


def _kueue_injects(o: dict) -> None:
    for spec in o["spec"]["mxReplicaSpecs"].values():
        meta = spec["template"].setdefault("metadata", {})
        meta.setdefault("labels", {}).update(KUEUE_INFO["labels"])
        meta.setdefault("annotations", {}).update(KUEUE_INFO["annotations"])
        pod = spec["template"]["spec"]
        pod["nodeSelector"] = dict(KUEUE_INFO["nodeSelector"])
        pod["tolerations"] = list(KUEUE_INFO["tolerations"])
        pod["schedulingGates"] = list(KUEUE_INFO["schedulingGates"])


SUSPENDED = _suspended(BASE)
ADMITTED = _edit(_suspended(BASE, False), _kueue_injects)  # Kueue's admission: one update

KUEUE_UPDATE_ACCEPTS = {
    "kueue-admits-suspended-job-with-template-fields": (SUSPENDED, ADMITTED),
    "kueue-evicts-and-restores-templates": (ADMITTED, SUSPENDED),
    "suspended-job-template-fields-edited": (SUSPENDED, _edit(SUSPENDED, _kueue_injects)),
    # The rule cannot see inside a free-form template on a real API server (only `==`), so while a
    # job is suspended any template change is let through; it has no pods, and every pod is built
    # from the templates at resume.
    "image-changed-while-suspended": (SUSPENDED, _edit(SUSPENDED, _set_image)),
    "image-changed-on-admission": (SUSPENDED, _edit(ADMITTED, _set_image)),
}


@pytest.mark.parametrize("old,new", KUEUE_UPDATE_ACCEPTS.values(), ids=KUEUE_UPDATE_ACCEPTS.keys())
def test_update_accepted_for_kueue(old, new):
    assert old != new and schema_errors(new) == []
    assert broken_rules(new, old=old) == []


UPDATE_REJECTS = {
    "worker-replicas-changed": (BASE, _edit(BASE, _set_replicas), [IMMUTABLE_SPECS, IMMUTABLE_LAYOUT]),
    "template-fields-of-a-running-job": (BASE, _edit(BASE, _kueue_injects), [IMMUTABLE_SPECS]),
    "replicas-changed-while-suspended": (SUSPENDED, _edit(SUSPENDED, _set_replicas), [IMMUTABLE_LAYOUT]),
    "restart-policy-changed-while-suspended": (SUSPENDED, _edit(SUSPENDED, _set_restart_policy),
                                               [IMMUTABLE_SPECS]),
    "key-respelled-while-suspended": (SUSPENDED, _edit(SUSPENDED, _rename_key), [IMMUTABLE_LAYOUT]),
    "image-changed-inside-free-form-template": (
        BASE,
        _edit(BASE, _set_image),
        [IMMUTABLE_SPECS],
    ),
    "env-added-inside-free-form-template": (BASE, _edit(BASE, _add_env), [IMMUTABLE_SPECS]),
    "restart-policy-changed": (BASE, _edit(BASE, _set_restart_policy), [IMMUTABLE_SPECS]),
    "key-respelled": (BASE, _edit(BASE, _rename_key), [IMMUTABLE_SPECS, IMMUTABLE_LAYOUT]),
    "train-to-tune": (BASE, BASE_TUNE, [IMMUTABLE_SPECS, IMMUTABLE_LAYOUT, IMMUTABLE_MODE]),
    "default-mode-to-tune": (
        BASE_NO_MODE,
        _edit(BASE_NO_MODE, lambda o: o["spec"].update(jobMode="MXTune")),
        [IMMUTABLE_MODE],
    ),
}


@pytest.mark.parametrize("old,new,fragments", UPDATE_REJECTS.values(), ids=UPDATE_REJECTS.keys())
def test_update_rejected(old, new, fragments):
    assert old != new
    broken = {r.message for r in broken_rules(new, old=old) if r.is_transition}
    assert broken == {rule_with(f).message for f in fragments}


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

    from hooks.mxjob.sync import sync_mxjob

    parent = copy.deepcopy(obj)
    parent["metadata"].update(namespace="default", uid="0b4f", generation=1)
    request = {
        "controller": {},
        "parent": parent,
        "children": {"Pod.v1": {}, "Service.v1": {}, "ConfigMap.v1": {}},
        "related": {},
        "finalizing": False,
    }
    response = sync_mxjob(request, now=datetime(2025, 1, 2, tzinfo=UTC))
    reasons = {c.get("reason") for c in response["status"].get("conditions", [])}
    return "MXJobFailedValidation" not in reasons


# The numeric bounds: the hook rejects exactly past the CRD's maximums.
BOUND_CASES = {
    "deadline-at-maximum": (with_field(VALID, "spec.runPolicy.activeDeadlineSeconds", 2**31 - 1), True),
    "deadline-over-maximum": (with_field(VALID, "spec.runPolicy.activeDeadlineSeconds", 2**31), False),
    "ttl-at-maximum": (with_field(VALID, "spec.ttlSecondsAfterFinished", 2**31 - 1), True),
    "ttl-over-maximum": (with_field(VALID, "spec.ttlSecondsAfterFinished", 2**31), False),
    "backoff-at-maximum": (with_field(VALID, "spec.runPolicy.backoffLimit", 2**31 - 1), True),
    "backoff-over-maximum": (with_field(VALID, "spec.runPolicy.backoffLimit", 2**31), False),
    "replicas-over-maximum": (with_field(VALID, "spec.mxReplicaSpecs.Worker.replicas", 5001), False),
}

AGREEMENT_CASES = {
    **{f"bound-{k}": v for k, v in BOUND_CASES.items()},
    **{f"accepts-{k}": (obj, True) for k, obj in CEL_ACCEPTS.items()},
    **{f"rejects-{k}": (obj, False) for k, (obj, _) in CEL_REJECTS.items()},
    **{f"example-{k}": (doc, True) for k, doc in EXAMPLE_DOCS},
}


@pytest.mark.parametrize("obj,valid", AGREEMENT_CASES.values(), ids=AGREEMENT_CASES.keys())
def test_hook_agrees_with_the_crd(obj, valid):
    assert (schema_errors(obj) == [] and broken_rules(obj) == []) is valid
    assert _hook_accepts(obj) is valid
