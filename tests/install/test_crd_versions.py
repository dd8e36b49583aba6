"""The older API versions the CRD serves (v1beta1, v1alpha2): one schema, deprecated, converted by rewrite.

Under conversion strategy None the API server only rewrites apiVersion, so a v1beta1 or v1alpha2
MXJob reaches the hook as a v1 object with the same fields. Each case in tests/versions/ holds a
manifest in an old version's shape and, as its second document, the same job written for v1: the
old one must pass its own version's schema and CEL rules, and once rewritten to v1 it must give
the hook the same children and status as the v1 one, through a whole run.
"""
from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from helpers.crd import BLOCKED_NOTE, CRD, CRD_PATH, Rule, collect_rules, pruned_paths, refusals, schema_errors
from helpers.crd_cases import (
    OLD_VERSIONS,
    VERSION_CASES,
    VERSION_CASES_DIR,
    VERSION_CREATE_REJECTS,
    VERSION_UPDATE_REJECTS,
    load_version_case,
)
from helpers.mcsim import Sim

VERSIONS = {v["name"]: v for v in CRD["spec"]["versions"]}


def version_of(doc: dict) -> str:
    group, _, version = doc["apiVersion"].partition("/")
    assert group == "kubeflow.org"
    return version


def schema_of(version: str) -> dict:
    return VERSIONS[version]["schema"]["openAPIV3Schema"]


def rules_of(version: str) -> list[Rule]:
    return list(collect_rules(schema_of(version)))


def version_refusals(obj: dict, old: dict | None = None) -> list[str]:
    """What the API server would answer, with the schema and rules of obj's own version."""
    version = version_of(obj)
    return refusals(obj, old, schema=schema_of(version), rules=rules_of(version))


# ---------------------------------------------------------------------------------------------
# The CRD's version list


def test_v1_is_the_storage_version_and_the_old_ones_are_served_and_deprecated():
    assert list(VERSIONS) == ["v1", *OLD_VERSIONS]
    assert [n for n, v in VERSIONS.items() if v["storage"]] == ["v1"]
    assert VERSIONS["v1"].get("deprecated") is not True
    for name in OLD_VERSIONS:
        version = VERSIONS[name]
        assert (version["served"], version["storage"], version["deprecated"]) == (True, False, True)
        warning = version["deprecationWarning"]
        assert f"kubeflow.org/{name}" in warning and "kubeflow.org/v1 " in warning, warning


def test_conversion_only_rewrites_the_api_version():
    assert CRD["spec"]["conversion"] == {"strategy": "None"}


@pytest.mark.parametrize("name", OLD_VERSIONS)
def test_old_versions_have_v1s_schema_status_subresource_and_columns(name):
    for key in ("schema", "subresources", "additionalPrinterColumns"):
        assert VERSIONS[name][key] == VERSIONS["v1"][key], key


def test_the_schema_is_written_once_and_aliased():
    # Equal today is not enough: a second copy would drift. The old versions must be aliases.
    text = CRD_PATH.read_text()
    assert text.count("openAPIV3Schema:") == 1
    assert text.count("schema: *schema") == len(OLD_VERSIONS)


# ---------------------------------------------------------------------------------------------
# Manifests in each old version's shape


@pytest.mark.parametrize("path", VERSION_CASES, ids=lambda p: p.stem)
def test_old_manifest_passes_its_versions_schema_and_rules(path):
    old, new = load_version_case(path)
    version = version_of(old)
    assert version in OLD_VERSIONS and version_of(new) == "v1"
    schema = schema_of(version)
    assert schema_errors(old, schema) == []
    assert pruned_paths(old, schema) == [], "the API server would drop these fields"
    assert version_refusals(old) == []


def test_cases_cover_both_old_versions_and_the_label_fallback():
    versions = {version_of(load_version_case(p)[0]) for p in VERSION_CASES}
    assert versions == set(OLD_VERSIONS)
    labelled = {version_of(load_version_case(p)[0]) for p in VERSION_CASES if "label:" in p.read_text()}
    assert labelled == set(OLD_VERSIONS)


def named(fragments: list[str], messages: list[str], rules: list[Rule]) -> bool:
    """Every fragment that names a rule is in one of the messages (the others are the server's wording)."""
    return all(any(f in m for m in messages) for f in fragments if any(f in r.message for r in rules))


@pytest.mark.parametrize("stored,new,fragments", VERSION_UPDATE_REJECTS.values(), ids=VERSION_UPDATE_REJECTS.keys())
def test_old_versions_keep_the_immutability_rules(stored, new, fragments):
    assert version_of(stored) in OLD_VERSIONS and version_refusals(stored) == []
    found = version_refusals(new, stored)
    assert found and named(fragments, found, rules_of(version_of(new)))


@pytest.mark.parametrize("obj,fragments", VERSION_CREATE_REJECTS.values(), ids=VERSION_CREATE_REJECTS.keys())
def test_old_versions_reject_what_v1_rejects(obj, fragments):
    found = version_refusals(obj)
    assert found and named(fragments, found, rules_of(version_of(obj)))
    assert (BLOCKED_NOTE in found) == ("not checked" in fragments)
    v1 = version_refusals({**obj, "apiVersion": "kubeflow.org/v1"})
    assert v1 == found


# ---------------------------------------------------------------------------------------------
# The hook after the API server's rewrite


def as_served(doc: dict) -> dict:
    """What Metacontroller sends for a stored object: apiVersion v1, identity filled in."""
    doc = copy.deepcopy(doc)
    doc["apiVersion"] = "kubeflow.org/v1"
    doc["metadata"].setdefault("namespace", "default")
    doc["metadata"].update(uid=f"uid-{doc['metadata']['name']}", generation=1)
    return doc


def comparable(answer: dict) -> str:
    """The answer without the tuner-server-key annotation, the one place label and annotation differ.

    The v1 spelling is a template annotation, which the pod template carries onto the pods; the
    old `label` field is not part of the template. Everything else, MX_CONFIG included, must match.
    """
    answer = copy.deepcopy(answer)
    for child in answer["children"]:
        annotations = child["metadata"].get("annotations") or {}
        annotations.pop("tuner-server-key", None)
        if not annotations:
            child["metadata"].pop("annotations", None)
    return json.dumps(answer, sort_keys=True)


def deciding_pods(sim: Sim) -> list[str]:
    return sorted(name for name, pod in sim.pods.items()
                  if pod["metadata"]["labels"].get("training.kubeflow.org/job-role") == "master"
                  or "-worker-" in name)


def run_to_completion(sim: Sim) -> list[dict[str, Any]]:
    """First sync, every pod running, the deciding pods succeed, the others end within the success
    grace, then the TTL, if any, passes."""
    answers = [sim.sync()]
    sim.run()
    answers.append(sim.sync())
    for name in deciding_pods(sim):
        sim.set_phase(name, "Succeeded", exit_code=0)
    sim.tick(5)
    for name in sorted(set(sim.pods) - set(deciding_pods(sim))):
        sim.set_phase(name, "Succeeded", exit_code=0)
    answers.append(sim.sync())
    sim.tick(3600)
    answers.append(sim.sync())
    return answers


@pytest.mark.parametrize("path", VERSION_CASES, ids=lambda p: p.stem)
def test_rewritten_old_manifest_runs_like_its_v1_twin(path):
    old, new = load_version_case(path)
    old_run = run_to_completion(Sim(as_served(old)))
    new_run = run_to_completion(Sim(as_served(new)))
    assert old_run[0]["children"], "the first sync should create children"
    assert old_run[2]["status"]["conditions"][-1]["type"] == "Succeeded"
    for step, (got, want) in enumerate(zip(old_run, new_run, strict=True)):
        assert comparable(got) == comparable(want), f"sync {step} differs"


def test_label_reaches_mx_config_as_the_tuner_server_key():
    old, _ = load_version_case(VERSION_CASES_DIR / "v1beta1-tune-label.yaml")
    answer = Sim(as_served(old)).sync()
    pod = next(c for c in answer["children"] if c["metadata"]["name"] == "beta-tune-tuner-0")
    # The labels part of MX_CONFIG is in the pod itself (only the cluster map is in the ConfigMap).
    env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
    labels = env["MX_CONFIG"].split(',"labels":', 1)[1].split(',"task":', 1)[0]
    assert json.loads(labels)["tunerserver"] == "2080ti"
