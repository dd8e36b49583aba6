"""Every status the hook writes survives the API server: declared in its kind's CRD, so nothing is pruned."""
from __future__ import annotations

import functools
from pathlib import Path

import pytest
from helpers import yamlio

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "golden"


@functools.cache
def status_schema(kind: str = "MXJob") -> dict:
    """The status schema of the CRD that defines `kind` (its storage version); read once, never changed."""
    for path in sorted((ROOT / "crd").glob("*-crd.yaml")):
        crd = yamlio.load(path.read_text())
        if crd["spec"]["names"]["kind"] == kind:
            version = next(v for v in crd["spec"]["versions"] if v["storage"])
            return version["schema"]["openAPIV3Schema"]["properties"]["status"]
    raise AssertionError(f"no CRD under crd/ defines {kind}")


def undeclared(value, schema: dict, path: str) -> list[str]:
    """Paths in value that a structural schema would prune."""
    if schema.get("x-kubernetes-preserve-unknown-fields"):
        return []
    if isinstance(value, dict):
        props = schema.get("properties")
        extra = schema.get("additionalProperties")
        found = []
        for key, item in value.items():
            if props is not None and key in props:
                found += undeclared(item, props[key], f"{path}.{key}")
            elif isinstance(extra, dict):
                found += undeclared(item, extra, f"{path}.{key}")
            else:
                found.append(f"{path}.{key}")
        return found
    if isinstance(value, list):
        return [p for i, item in enumerate(value)
                for p in undeclared(item, schema.get("items", {}), f"{path}[{i}]")]
    return []


def golden_statuses() -> list[Path]:
    return sorted(GOLDEN.glob("*/response.yaml"))


def test_the_prune_check_catches_an_undeclared_field():
    assert undeclared({"conditions": [{"type": "Created", "bogus": 1}]}, status_schema(),
                      "status") == ["status.conditions[0].bogus"]


@pytest.mark.parametrize("path", golden_statuses(), ids=lambda p: p.parent.name)
def test_golden_status_is_fully_declared(path):
    kind = yamlio.load((path.parent / "request.yaml").read_text())["parent"]["kind"]
    status = yamlio.load(path.read_text())["status"]
    assert undeclared(status, status_schema(kind), "status") == []


def test_every_kind_with_golden_cases_has_a_status_schema():
    kinds = {yamlio.load((p.parent / "request.yaml").read_text())["parent"]["kind"] for p in golden_statuses()}
    assert kinds == {"MXJob", "ChainerJob"}
    assert all(status_schema(kind)["properties"] for kind in kinds)


def test_restart_history_with_exit_code_is_declared():
    status = {"observedGeneration": 2, "restartCount": 1, "restartHistory": {"mx-worker-0": {
        "lastFailedUID": "u", "lastExitCode": 137, "recreations": 1, "priorContainerRestarts": 0}},
        "specError": "x", "cleanedUpTime": "2026-11-21T10:00:00Z"}
    assert undeclared(status, status_schema(), "status") == []
