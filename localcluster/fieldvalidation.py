"""Unknown fields: what the API server would prune from a custom resource, by path, so `run` can warn or refuse.

A structural CRD schema makes the API server drop every field it does not declare (pruning), and
server-side field validation reports each dropped field as `unknown field "<path>"`: a warning
under `fieldValidation=Warn` (the API server's default for a client that does not ask), an error
under `Strict`. The local cluster has no API server, so it reads the same schema from crd/ and
computes the same set, following the pruning rules of apiextensions-apiserver:

- an object's keys outside `properties` are pruned, unless the node has `additionalProperties`
  (a map: every key is kept, each value checked against that schema) or
  `x-kubernetes-preserve-unknown-fields: true` (unknown keys kept and not looked into; declared
  `properties` below it are still checked);
- array items are checked against `items`;
- at the root, `apiVersion`, `kind` and `metadata` are always kept, and `metadata` (as in every
  node with `x-kubernetes-embedded-resource: true`) is pruned to ObjectMeta's fields;
- a value of another type than the schema says is left to validation, not pruning.

So nothing inside a pod template, which both CRDs mark preserve-unknown-fields, is ever reported:
the API server keeps it as written (the pod itself is validated only when a controller creates it).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from .config import REPO_ROOT

CRD_DIR = REPO_ROOT / "crd"

PRESERVE = "x-kubernetes-preserve-unknown-fields"
EMBEDDED = "x-kubernetes-embedded-resource"
# metav1.ObjectMeta's JSON fields: what survives in `metadata` of a custom resource or embedded object.
OBJECT_META_FIELDS = frozenset({
    "name", "generateName", "namespace", "selfLink", "uid", "resourceVersion", "generation",
    "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "labels", "annotations",
    "ownerReferences", "finalizers", "managedFields",
})
TYPE_META_FIELDS = ("apiVersion", "kind")


FieldPath = tuple[str | int, ...]  # keys and list indexes from the resource's root


def unknown_fields(obj: Mapping[str, Any], schema: Mapping[str, Any]) -> list[str]:
    """Every path (`spec.mxReplicaSpecs.Worker.replica`, `spec.items[0].x`) the API server would prune from obj.

    `schema` is the version's `openAPIV3Schema`; `obj` the whole custom resource. Sorted, so the
    report is the same on every run.
    """
    return sorted({show(path) for path in _embedded(obj, schema, ())})


def pruned(obj: Mapping[str, Any], schema: Mapping[str, Any]) -> dict[str, Any]:
    """obj as the API server would store it: a deep copy without the fields unknown_fields names."""
    copy = copy_json(obj)
    for path in _embedded(obj, schema, ()):
        parent: Any = copy
        for step in path[:-1]:
            parent = parent[step]
        del parent[path[-1]]
    return copy


def copy_json(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: copy_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [copy_json(v) for v in value]
    return value


def show(path: FieldPath) -> str:
    """A path as the API server writes it in a warning: keys joined by '.', list indexes in brackets."""
    text = ""
    for step in path:
        text += f"[{step}]" if isinstance(step, int) else (f".{step}" if text else str(step))
    return text


def _embedded(obj: Mapping[str, Any], schema: Mapping[str, Any], path: FieldPath) -> Iterator[FieldPath]:
    """An object with apiVersion, kind and ObjectMeta (the resource itself, or an embedded resource)."""
    meta = obj.get("metadata")
    if isinstance(meta, Mapping):
        for key in meta:
            if key not in OBJECT_META_FIELDS:
                yield (*path, "metadata", key)
    rest = {k: v for k, v in obj.items() if k not in (*TYPE_META_FIELDS, "metadata")}
    properties = {k: v for k, v in (schema.get("properties") or {}).items() if k not in (*TYPE_META_FIELDS, "metadata")}
    yield from _object(rest, {**schema, "properties": properties}, path)


def _node(value: Any, schema: Mapping[str, Any], path: FieldPath) -> Iterator[FieldPath]:
    if isinstance(value, Mapping):
        if schema.get(EMBEDDED):
            yield from _embedded(value, schema, path)
        else:
            yield from _object(value, schema, path)
    elif isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        for index, item in enumerate(value):
            yield from _node(item, schema["items"], (*path, index))


def _object(value: Mapping[str, Any], schema: Mapping[str, Any], path: FieldPath) -> Iterator[FieldPath]:
    properties = schema.get("properties") or {}
    additional = schema.get("additionalProperties")
    for key, item in value.items():
        child = (*path, key)
        if key in properties:
            yield from _node(item, properties[key], child)
        elif isinstance(additional, Mapping):
            yield from _node(item, additional, child)
        elif additional is True or schema.get(PRESERVE):
            continue  # kept as written, and not looked into
        elif schema.get("type", "object") == "object":  # a value of another type is validation's business
            yield child


@cache
def crd_schemas(crd_dir: Path = CRD_DIR) -> dict[tuple[str, str, str], Mapping[str, Any]]:
    """(group, kind, version) -> that version's openAPIV3Schema, for every CRD under crd_dir."""
    schemas: dict[tuple[str, str, str], Mapping[str, Any]] = {}
    for path in sorted(crd_dir.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if isinstance(doc, dict) and doc.get("kind") == "CustomResourceDefinition":
                spec = doc["spec"]
                for version in spec["versions"]:
                    schemas[(spec["group"], spec["names"]["kind"], version["name"])] = version["schema"]["openAPIV3Schema"]
    return schemas


def schema_of(job: Mapping[str, Any], crd_dir: Path = CRD_DIR) -> Mapping[str, Any] | None:
    """The schema of the job's own apiVersion and kind, or None for a kind crd/ does not define."""
    group, _, version = str(job.get("apiVersion", "")).rpartition("/")
    return crd_schemas(crd_dir).get((group, str(job.get("kind")), version))


def unknown_fields_of(job: Mapping[str, Any], crd_dir: Path = CRD_DIR) -> list[str]:
    """The fields the API server would prune from a job as written; [] for a kind crd/ does not define."""
    schema = schema_of(job, crd_dir)
    return unknown_fields(job, schema) if schema is not None else []


def pruned_job(job: Mapping[str, Any], crd_dir: Path = CRD_DIR) -> dict[str, Any]:
    """The job as the API server would store it (unchanged for a kind crd/ does not define)."""
    schema = schema_of(job, crd_dir)
    return pruned(job, schema) if schema is not None else copy_json(job)
