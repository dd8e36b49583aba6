"""CRDs of other projects that the install and the hooks' children need on a real API server.

- Metacontroller's CompositeController: its own CRD (README.md says where it comes from), so a
  CompositeController we ship is checked against Metacontroller's schema; its DecoratorController and
  ControllerRevision: minimal structural CRDs of our own, enough for a real Metacontroller binary to
  start against the local cluster.
- The Volcano and scheduler-plugins PodGroups, with the upstream spec schemas kept in this folder
  (README.md says where each comes from), so a PodGroup the hook emits is checked field by field.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
# group, version, kind, plural, scope, the spec schema file (None: any spec is kept)
THIRD_PARTY_APIS: tuple[tuple[str, str, str, str, str, str | None], ...] = (
    ("metacontroller.k8s.io", "v1alpha1", "DecoratorController", "decoratorcontrollers", "Cluster", None),
    ("metacontroller.k8s.io", "v1alpha1", "ControllerRevision", "controllerrevisions", "Namespaced", None),
    ("scheduling.volcano.sh", "v1beta1", "PodGroup", "podgroups", "Namespaced", "volcano-v1beta1.yaml"),
    ("scheduling.x-k8s.io", "v1alpha1", "PodGroup", "podgroups", "Namespaced", "scheduler-plugins-v1alpha1.yaml"),
)
# A group under k8s.io is protected: the API server wants this annotation (Metacontroller's own CRDs carry it).
_APPROVAL = {"api-approved.kubernetes.io": "unapproved, request not yet submitted"}
_ANY = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}


def _crd(group: str, version: str, kind: str, plural: str, scope: str, spec_schema: dict[str, Any]) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": f"{plural}.{group}"}
    if group.endswith(".k8s.io"):
        metadata["annotations"] = dict(_APPROVAL)
    properties: dict[str, Any] = {"spec": spec_schema, "status": _ANY}
    if kind == "ControllerRevision":  # its payload sits at the top level, beside metadata
        properties = {"parentPatch": _ANY, "children": {"type": "array", "items": _ANY}}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": metadata,
        "spec": {
            "group": group,
            "scope": scope,
            "names": {"kind": kind, "plural": plural, "singular": kind.lower(), "listKind": f"{kind}List"},
            "versions": [{
                "name": version, "served": True, "storage": True,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "properties": properties}},
            }],
        },
    }


COMPOSITE_CONTROLLER_CRD = HERE / "metacontroller-compositecontrollers.yaml"


def third_party_crds() -> list[dict[str, Any]]:
    """The CRDs above, ready to apply."""
    crds = [yaml.safe_load(COMPOSITE_CONTROLLER_CRD.read_text())]
    for group, version, kind, plural, scope, schema_file in THIRD_PARTY_APIS:
        spec = yaml.safe_load((HERE / schema_file).read_text()) if schema_file else dict(_ANY)
        crds.append(_crd(group, version, kind, plural, scope, spec))
    return crds
