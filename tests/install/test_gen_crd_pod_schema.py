"""scripts/gen_crd_pod_schema.py on a stand-in OpenAPI: how Kubernetes' schema becomes a CRD's, and that
it rewrites the pod template blocks and nothing else (tests/install/test_pod_template_schema.py checks the
CRDs against the real server's OpenAPI)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from helpers import yamlio
from helpers.scripts import load_script

ROOT = Path(__file__).resolve().parents[2]
gen = load_script("gen_crd_pod_schema")

REF = "#/components/schemas/"
OPENAPI = {"components": {"schemas": {
    gen.ROOT_TYPE: {"type": "object", "description": "a template", "properties": {
        "spec": {"allOf": [{"$ref": REF + "Spec"}], "default": {}, "description": "the pod"}}},
    "Spec": {"type": "object", "required": ["containers"], "properties": {
        "containers": {"type": "array", "items": {"allOf": [{"$ref": REF + "Container"}], "default": {}},
                       "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"],
                       "x-kubernetes-patch-strategy": "merge", "x-kubernetes-patch-merge-key": "name"},
        "overhead": {"type": "object", "additionalProperties": {"$ref": REF + "Quantity"}},
    }},
    "Container": {"type": "object", "required": ["name"], "properties": {
        "name": {"type": "string", "default": ""},
        "port": {"$ref": REF + "IntOrString"},
        "ports": {"type": "array", "items": {"$ref": REF + "Port"},
                  "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["containerPort", "protocol"]},
    }},
    "Port": {"type": "object", "required": ["containerPort"], "properties": {
        "containerPort": {"type": "integer", "format": "int32", "default": 0},
        "protocol": {"type": "string", "default": "TCP"}}},
    "IntOrString": {"format": "int-or-string", "oneOf": [{"type": "integer"}, {"type": "string"}]},
    "Quantity": {"oneOf": [{"type": "string"}, {"type": "number"}]},
}}}


def test_kubernetes_schema_becomes_a_structural_crd_schema():
    assert gen.pod_template_schema(OPENAPI) == {"type": "object", "properties": {"spec": {
        "type": "object", "required": ["containers"], "properties": {
            # Every list atomic: keyed lists refuse duplicates a Pod takes.
            "containers": {"type": "array", "x-kubernetes-list-type": "atomic",
                           "items": {"type": "object", "required": ["name"], "properties": {
                               "name": {"type": "string"},
                               "port": {"x-kubernetes-int-or-string": True},
                               "ports": {"type": "array", "x-kubernetes-list-type": "atomic", "items": {
                                   "type": "object", "required": ["containerPort"], "properties": {
                                       "containerPort": {"type": "integer", "format": "int32"},
                                       "protocol": {"type": "string"}}}}}}},
            # A quantity is a string or any number: only an untyped node takes both.
            "overhead": {"type": "object", "additionalProperties": {"x-kubernetes-preserve-unknown-fields": True}}}}}}


def test_descriptions_are_kept_only_when_asked():
    described = gen.pod_template_schema(OPENAPI, descriptions=True)
    assert described["description"] == "a template"
    assert described["properties"]["spec"]["description"] == "the pod", "the property's own description wins"
    assert "description" not in str(gen.pod_template_schema(OPENAPI))


def test_what_a_crd_cannot_express_is_refused_not_dropped():
    recursive = {"components": {"schemas": {gen.ROOT_TYPE: {"type": "object", "properties": {
        "self": {"$ref": REF + gen.ROOT_TYPE}}}}}}
    with pytest.raises(ValueError, match="recursive"):
        gen.pod_template_schema(recursive)
    either = {"components": {"schemas": {gen.ROOT_TYPE: {"type": "object", "properties": {
        "x": {"oneOf": [{"type": "boolean"}, {"type": "string"}]}}}}}}
    with pytest.raises(ValueError, match="oneOf"):
        gen.pod_template_schema(either)


def without_templates(text: str) -> list[str]:
    """The CRD's lines but for each `template:` block's body."""
    kept: list[str] = []
    inside = None
    for line in text.split("\n"):
        indent = len(line) - len(line.lstrip(" "))
        if inside is not None and (not line.strip() or indent > inside):
            continue
        inside = indent if re.fullmatch(r"\s*template:\s*", line) else None
        kept.append(line)
    return kept


def test_only_the_template_blocks_change_and_generating_twice_changes_nothing(tmp_path):
    for name in gen.TEMPLATES:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text((ROOT / name).read_text())
    for path, text in gen.generate(OPENAPI, "vX", root=tmp_path).items():
        original = (ROOT / path.relative_to(tmp_path)).read_text()
        assert without_templates(text) == without_templates(original)
        assert text != original
        doc = yamlio.load(text)
        for template_path in gen.TEMPLATES[path.relative_to(tmp_path).as_posix()]:
            node = gen._lookup(doc, template_path)
            assert set(node) == {"type", "description", "properties"}
            assert node["properties"]["spec"]["properties"]["containers"]["items"]["required"] == ["name"]
            assert node["description"] == gen._lookup(yamlio.load(original), template_path)["description"]
        path.write_text(text)
    assert all(path.read_text() == text for path, text in gen.generate(OPENAPI, "vX", root=tmp_path).items())
