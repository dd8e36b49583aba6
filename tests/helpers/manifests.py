"""Rendering kustomizations with kubectl and validating the objects against pinned Kubernetes schemas and the Metacontroller CRDs."""

from __future__ import annotations

import functools
import shutil
import subprocess
from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest
from kubernetes_validate.utils import SchemaNotFoundError
from openapi_schema_validator import OAS30Validator, oas30_format_checker

from helpers import yamlio

ROOT = Path(__file__).resolve().parents[2]
# The Kubernetes minor the manifests are validated against; kubernetes-validate 1.34.1 ships
# schemas for 1.25 to 1.34.
KUBERNETES_VERSION = "1.34"


@functools.cache
def kubectl() -> str:
    path = shutil.which("kubectl")
    if path is None:
        pytest.fail(
            "kubectl is not on PATH: install kubectl (it renders the kustomizations with "
            "`kubectl kustomize`) and run the tests again"
        )
    return path


@functools.cache
def render(directory: Path) -> tuple[dict, ...]:
    result = subprocess.run(
        [kubectl(), "kustomize", str(directory)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    if result.returncode != 0:
        pytest.fail(f"kubectl kustomize {directory.relative_to(ROOT)} failed:\n{result.stderr}")
    return tuple(doc for doc in yamlio.load_all(result.stdout) if doc)


def the(objects, kind: str, name: str | None = None) -> dict:
    found = [o for o in objects if o["kind"] == kind and name in (None, o["metadata"]["name"])]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def mxjob_schema() -> dict:
    crd = yamlio.load((ROOT / "crd" / "mxjob-crd.yaml").read_text())
    return crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


# The Prometheus Operator's PrometheusRule CRD (monitoring/prometheusrule.yaml is one), copied with its source named.
PROMETHEUSRULE_CRD = ROOT / "tests" / "install" / "thirdparty" / "prometheusrules-crd.yaml"


def prometheusrule_crd() -> dict:
    [crd] = [d for d in yamlio.load_all(PROMETHEUSRULE_CRD.read_text()) if d]
    return dict(crd)


def prometheusrule_schema() -> dict:
    [version] = prometheusrule_crd()["spec"]["versions"]
    return dict(version["schema"]["openAPIV3Schema"])


# The Metacontroller v1alpha1 CompositeController fields this project uses, closed with
# additionalProperties: false so a misspelt field fails here instead of being ignored.
# A webhook names either a full `url` or a Service and a `path` (Metacontroller's webhookURL).
_WEBHOOK = {
    "type": "object",
    "additionalProperties": False,
    "oneOf": [{"required": ["url"], "not": {"anyOf": [{"required": ["service"]}, {"required": ["path"]}]}},
              {"required": ["service", "path"], "not": {"required": ["url"]}}],
    "properties": {
        "url": {"type": "string", "pattern": "^https?://"},
        "service": {
            "type": "object",
            "additionalProperties": False,
            "required": ["name", "namespace"],
            "properties": {
                "name": {"type": "string", "minLength": 1},
                "namespace": {"type": "string", "minLength": 1},
                "port": {"type": "integer", "minimum": 1, "maximum": 65535},
                "protocol": {"enum": ["http", "https"]},
            },
        },
        "path": {"type": "string", "pattern": "^/"},
        "timeout": {"type": "string", "pattern": r"^([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+$"},
    },
}
COMPOSITE_CONTROLLER_SCHEMA = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "metacontroller.k8s.io/v1alpha1"},
        "kind": {"const": "CompositeController"},
        "metadata": {
            "type": "object",
            "required": ["name"],
            "not": {"required": ["namespace"]},  # cluster-scoped
        },
        "spec": {
            "type": "object",
            "additionalProperties": False,
            "required": ["parentResource", "childResources", "hooks"],
            "properties": {
                "parentResource": {
                    "type": "object",
                    "additionalProperties": False,
                    "required": ["apiVersion", "resource"],
                    "properties": {
                        "apiVersion": {"type": "string"},
                        "resource": {"type": "string"},
                    },
                },
                "childResources": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "additionalProperties": False,
                        "required": ["apiVersion", "resource"],
                        "properties": {
                            "apiVersion": {"type": "string"},
                            "resource": {"type": "string"},
                            "updateStrategy": {
                                "type": "object",
                                "additionalProperties": False,
                                "properties": {
                                    "method": {
                                        "enum": [
                                            "OnDelete",
                                            "Recreate",
                                            "InPlace",
                                            "RollingRecreate",
                                            "RollingInPlace",
                                        ]
                                    }
                                },
                            },
                        },
                    },
                },
                "hooks": {
                    "type": "object",
                    "additionalProperties": False,
                    "required": ["sync"],
                    "properties": {
                        "sync": {
                            "type": "object",
                            "additionalProperties": False,
                            "required": ["webhook"],
                            "properties": {"webhook": _WEBHOOK},
                        },
                        # Metacontroller's customize hook (hook version v1, the default).
                        "customize": {
                            "type": "object",
                            "additionalProperties": False,
                            "required": ["webhook"],
                            "properties": {"webhook": _WEBHOOK, "version": {"enum": ["v1"]}},
                        },
                    },
                },
                "generateSelector": {"type": "boolean"},
                "resyncPeriodSeconds": {"type": "integer", "minimum": 1},
            },
        },
    },
}


def validation_errors(obj: dict) -> list[str]:
    """Why obj would be rejected, by the schema that owns its kind; [] when it is valid."""
    kind = obj.get("kind")
    if kind == "CompositeController":
        validator = jsonschema.Draft202012Validator(COMPOSITE_CONTROLLER_SCHEMA)
        return [e.message for e in validator.iter_errors(obj)]
    if kind == "MXJob":
        validator = OAS30Validator(mxjob_schema(), format_checker=oas30_format_checker)
        return [e.message for e in validator.iter_errors(obj)]
    if kind == "PrometheusRule":
        validator = OAS30Validator(prometheusrule_schema(), format_checker=oas30_format_checker)
        return [e.message for e in validator.iter_errors(obj)]
    try:
        kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
    except kubernetes_validate.ValidationError as err:
        return [f"{'.'.join(map(str, err.path))}: {err.message}"]
    except SchemaNotFoundError:
        return [f"no schema to validate {obj.get('apiVersion')} {kind}: add one to this test"]
    return []
