"""The ChainerJob CRD: names, status subresource, structural schema, and the seed manifests against it."""
from __future__ import annotations

from pathlib import Path

import pytest
from helpers import yamlio
from helpers.crd import CHAINERJOB_CRD as CRD
from helpers.crd import CHAINERJOB_SCHEMA as SCHEMA
from helpers.crd import keys_anywhere, pruned_paths, schema_errors, untyped_nodes
from helpers.crd_cases import (
    CHAINERJOB_EXAMPLES,
    CHAINERJOB_SCHEMA_ACCEPTS,
    CHAINERJOB_SCHEMA_REJECTS,
    chainerjob_with,
)

from hooks.chainerjob.sync import CHILD_KEYS, sync_chainerjob

ROOT = Path(__file__).resolve().parents[2]
VERSION = CRD["spec"]["versions"][0]
EXAMPLES = CHAINERJOB_EXAMPLES


def load(path: Path) -> dict:
    return yamlio.load(path.read_text())


def test_crd_names_group_and_scope():
    assert CRD["apiVersion"] == "apiextensions.k8s.io/v1"
    assert CRD["metadata"]["name"] == "chainerjobs.kubeflow.org"
    assert (CRD["spec"]["group"], CRD["spec"]["scope"]) == ("kubeflow.org", "Namespaced")
    names = CRD["spec"]["names"]
    assert (names["kind"], names["plural"], names["singular"]) == ("ChainerJob", "chainerjobs", "chainerjob")
    assert names["shortNames"] == ["chj", "chjs", "chjob", "chjobs"]


def test_one_served_storage_version_v1alpha1_with_status_subresource():
    assert [v["name"] for v in CRD["spec"]["versions"]] == ["v1alpha1"]
    assert VERSION["served"] is True and VERSION["storage"] is True
    assert VERSION["subresources"] == {"status": {}}


def test_printer_columns_show_state_from_last_condition_progress_and_age():
    columns = {c["name"]: (c["type"], c["jsonPath"]) for c in VERSION["additionalPrinterColumns"]}
    assert columns == {"State": ("string", ".status.conditions[-1:].type"),
                       "Progress": ("integer", ".status.progress.progressPercentage"),
                       "Last Report": ("date", ".status.progress.lastUpdatedTime"),
                       "Retries": ("integer", ".status.failed"),
                       "Age": ("date", ".metadata.creationTimestamp")}
    assert [c["name"] for c in VERSION["additionalPrinterColumns"]][-1] == "Age"


def test_schema_is_structural_and_declares_no_defaults():
    assert untyped_nodes(SCHEMA) == []
    assert keys_anywhere(SCHEMA, "default") == []
    assert keys_anywhere(SCHEMA, "$ref") == []


def test_the_seed_manifests_are_here():
    assert {p.name for p in EXAMPLES} == {"chainerjob-mn.yaml", "chainerjob-single.yaml",
                                          "chainerjob-gpu-two-sets.yaml"}


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_seed_manifest_validates_unchanged(path):
    doc = load(path)
    assert (doc["apiVersion"], doc["kind"]) == ("kubeflow.org/v1alpha1", "ChainerJob")
    assert schema_errors(doc, SCHEMA) == []
    assert pruned_paths(doc, SCHEMA) == [], "the API server would drop these fields"


@pytest.mark.parametrize("dotted,value", CHAINERJOB_SCHEMA_REJECTS.values(), ids=list(CHAINERJOB_SCHEMA_REJECTS))
def test_schema_rejects(dotted, value):
    assert schema_errors(chainerjob_with(dotted, value), SCHEMA) != []


@pytest.mark.parametrize("dotted,value", CHAINERJOB_SCHEMA_ACCEPTS.values(), ids=list(CHAINERJOB_SCHEMA_ACCEPTS))
def test_schema_accepts(dotted, value):
    doc = chainerjob_with(dotted, value)
    assert schema_errors(doc, SCHEMA) == [] and pruned_paths(doc, SCHEMA) == []


def test_status_the_hook_writes_is_declared_and_valid():
    doc = load(ROOT / "examples" / "chainerjob" / "chainerjob-mn.yaml")
    doc["metadata"].update(namespace="default", uid="u")
    from datetime import UTC, datetime

    answer = sync_chainerjob({"parent": doc, "children": {k: {} for k in CHILD_KEYS}},
                             now=datetime(2026, 1, 1, tzinfo=UTC))
    status = {**answer["status"], "observedGeneration": 1, "specError": "x", "startTime": "2026-01-01T00:00:00Z",
              "completionTime": "2026-01-01T00:01:00Z", "active": 1, "succeeded": 1, "failed": 2}
    status["conditions"] = [*status["conditions"], {
        "type": "Complete", "status": "True", "lastProbeTime": "2026-01-01T00:01:00Z",
        "lastTransitionTime": "2026-01-01T00:01:00Z", "reason": "", "message": ""}]
    doc["status"] = status
    assert schema_errors(doc, SCHEMA) == []
    assert pruned_paths(doc, SCHEMA) == []
