"""Unknown fields: what the API server would prune from a custom resource, by path, so `run` can warn or refuse.

A structural CRD schema makes the API server drop every field it does not declare (pruning), and
server-side field validation reports each dropped field as `unknown field "<path>"`: a warning
under `fieldValidation=Warn` (`kubectl apply --validate=warn`), an error under `Strict` (kubectl's
default). The local cluster has no API server, so it reads the same schema from crd/ and computes
the same list, in the same order, following apiextensions-apiserver's pruning algorithm
(`pkg/apiserver/schema/pruning/algorithm.go`) and its ObjectMeta decoding;
tests/localcluster/test_apiserver_stand_ins.py compares it, case by case, with what kubectl prints against a real one:

- an object's keys outside `properties` are pruned, unless the node has `additionalProperties`
  (a map: every key is kept, each value checked against that schema) or
  `x-kubernetes-preserve-unknown-fields: true` (unknown keys kept and not looked into; declared
  `properties` below it are still checked);
- array items are checked against `items`;
- a value of another type than the schema says is pruned by shape, then refused by validation: the
  keys of a map where the schema has no `properties` (`spec.jobMode: {a: 1}`) are all unknown
  (`spec.jobMode.a`), and so are the keys of the objects in a list where the schema has no `items`
  (`spec.runPolicy: [{a: 1}]` gives `spec.runPolicy[0].a`); a scalar is never pruned;
- at the root, `apiVersion` and `kind` (strings) and `metadata` are always kept, and `metadata` is
  decoded as ObjectMeta: its unknown keys, nested ones included (`metadata.ownerReferences[0].x`),
  are reported first, in the order of a depth-first walk over sorted keys, and the pruned paths
  after them, sorted as strings; a metadata field of the wrong type (`labels: {a: 1}`) is not
  pruned but refused: kubectl cannot decode the manifest at all (`metadata_error`);
- a node with `x-kubernetes-embedded-resource: true` is treated as the root is, but its metadata's
  unknown paths come last (the server coerces embedded metadata after pruning), and a metadata
  field of the wrong type there is the server's error, not kubectl's (neither CRD has one).

Both CRDs' pod templates declare Kubernetes' PodTemplateSpec (scripts/gen_crd_pod_schema.py), so a
typo inside a template (`containers[0].arg`) is reported like one at the spec's level.

The server also fills in the schema's `default`s (`stored`), so the job Metacontroller sees has
them; the MXJob CRD has two (`spec.jobMode`, `spec.runPolicy`).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from datetime import datetime
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from .config import REPO_ROOT

CRD_DIR = REPO_ROOT / "crd"

PRESERVE = "x-kubernetes-preserve-unknown-fields"
EMBEDDED = "x-kubernetes-embedded-resource"
TYPE_META_FIELDS = ("apiVersion", "kind")

# metav1.ObjectMeta and the structs in it, as Go's JSON decoder reads them: field -> type, where a
# type is "string", "integer", "boolean", "time" (a metav1.Time: an RFC 3339 string), "any" (raw
# JSON), ("map", type), ("list", type) or a struct (a dict like these).
OWNER_REFERENCE: dict[str, Any] = {
    "apiVersion": "string", "kind": "string", "name": "string", "uid": "string",
    "controller": "boolean", "blockOwnerDeletion": "boolean",
}
MANAGED_FIELDS_ENTRY: dict[str, Any] = {
    "manager": "string", "operation": "string", "apiVersion": "string", "time": "time",
    "fieldsType": "string", "fieldsV1": "any", "subresource": "string",
}
OBJECT_META: dict[str, Any] = {
    "name": "string", "generateName": "string", "namespace": "string", "selfLink": "string", "uid": "string",
    "resourceVersion": "string", "generation": "integer", "creationTimestamp": "time", "deletionTimestamp": "time",
    "deletionGracePeriodSeconds": "integer", "labels": ("map", "string"), "annotations": ("map", "string"),
    "ownerReferences": ("list", OWNER_REFERENCE), "finalizers": ("list", "string"),
    "managedFields": ("list", MANAGED_FIELDS_ENTRY),
}
OBJECT_META_FIELDS = frozenset(OBJECT_META)
# Go's time.RFC3339 as metav1.Time parses it (fractional seconds allowed).
RFC3339 = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})")
INT64 = (-(2**63), 2**63 - 1)


FieldPath = tuple[str | int, ...]  # keys and list indexes from the resource's root
Embedded = list[tuple[FieldPath, list[FieldPath]]]  # (an embedded resource, its metadata's unknown paths)


def unknown_fields(obj: Mapping[str, Any], schema: Mapping[str, Any]) -> list[str]:
    """Every path (`spec.mxReplicaSpecs.Worker.replica`, `spec.items[0].x`) the API server would prune from obj,
    in the order it reports them: metadata's first, then the rest sorted.

    `schema` is the version's `openAPIV3Schema`; `obj` the whole custom resource.
    """
    meta, rest, embedded = _unknown_paths(obj, schema)
    return [show(path) for path in meta] + sorted(show(path) for path in rest) + [show(path) for path in embedded]


def pruned(obj: Mapping[str, Any], schema: Mapping[str, Any]) -> dict[str, Any]:
    """obj as the API server would store it: a deep copy without the fields unknown_fields names."""
    copy: dict[str, Any] = copy_json(obj)
    meta, rest, embedded = _unknown_paths(obj, schema)
    for path in [*meta, *rest, *embedded]:
        parent: Any = copy
        for step in path[:-1]:
            parent = parent[step]
        del parent[path[-1]]
    return copy


def defaulted(obj: Mapping[str, Any], schema: Mapping[str, Any]) -> dict[str, Any]:
    """A deep copy of obj with the schema's `default`s filled in where a field is absent, as the API
    server does on every write (structural defaulting: a default set here is defaulted in turn)."""
    copy: dict[str, Any] = copy_json(obj)
    _default(copy, schema)
    return copy


def stored(obj: Mapping[str, Any], schema: Mapping[str, Any]) -> dict[str, Any]:
    """obj as the API server stores it: pruned, then defaulted."""
    return defaulted(pruned(obj, schema), schema)


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


def metadata_error(obj: Mapping[str, Any]) -> str | None:
    """Why obj's metadata cannot be decoded as ObjectMeta (a field of the wrong type), or None.

    kubectl decodes every manifest's metadata before it sends anything, and refuses one that does
    not decode ("unable to decode ... cannot unmarshal"), whatever --validate says; like Go's
    decoder, this names the first such field in sorted-key order.
    """
    if "metadata" not in obj:
        return None
    return _meta_error(obj["metadata"], OBJECT_META, ("metadata",))


def _unknown_paths(obj: Mapping[str, Any], schema: Mapping[str, Any]) -> tuple[list[FieldPath], list[FieldPath], list[FieldPath]]:
    """(the root metadata's unknown paths, every pruned path, the embedded resources' metadata's), each in
    the server's order but the pruned ones, which it sorts."""
    meta = obj.get("metadata")
    meta_paths = list(_meta_paths(meta, OBJECT_META, ("metadata",))) if isinstance(meta, Mapping) else []
    embedded: Embedded = []
    rest = list(_prune(obj, {**schema, EMBEDDED: True}, (), embedded, root=True))
    embedded.sort(key=lambda resource: show(resource[0]))
    return meta_paths, rest, [path for _, paths in embedded for path in paths]


def _prune(value: Any, schema: Mapping[str, Any] | None, path: FieldPath, embedded: Embedded, *,
           root: bool = False) -> Iterator[FieldPath]:
    """algorithm.go's prune(): the paths it deletes from value under schema (None: no schema at all);
    the unknown paths of embedded resources' metadata go to `embedded`."""
    if schema is not None and schema.get(EMBEDDED) and not root and isinstance(value, Mapping):
        if isinstance(value.get("metadata"), Mapping):
            embedded.append((path, list(_meta_paths(value["metadata"], OBJECT_META, (*path, "metadata")))))
    if schema is not None and schema.get(PRESERVE):
        yield from _skip_prune(value, schema, path, embedded)
    elif isinstance(value, Mapping):
        if schema is None:
            for key in value:
                yield (*path, key)
            return
        properties = schema.get("properties") or {}
        additional = schema.get("additionalProperties")
        for key, item in value.items():
            child = (*path, key)
            if schema.get(EMBEDDED) and _kept_type_meta(key, item):
                continue
            if key in properties:
                yield from _prune(item, properties[key], child, embedded)
            elif isinstance(additional, Mapping):
                yield from _prune(item, additional, child, embedded)
            elif additional is True:
                yield from _prune(item, None, child, embedded)
            elif not (root and key in (*TYPE_META_FIELDS, "metadata")):
                yield child
    elif isinstance(value, list):
        items = schema.get("items") if schema is not None else None
        for index, item in enumerate(value):
            yield from _prune(item, items if isinstance(items, Mapping) else None, (*path, index), embedded)


def _skip_prune(value: Any, schema: Mapping[str, Any] | None, path: FieldPath, embedded: Embedded) -> Iterator[FieldPath]:
    """algorithm.go's skipPrune(): below preserve-unknown-fields, only declared fields are looked into."""
    if schema is None:
        return
    if isinstance(value, Mapping):
        properties = schema.get("properties") or {}
        additional = schema.get("additionalProperties")
        for key, item in value.items():
            if schema.get(EMBEDDED) and key in (*TYPE_META_FIELDS, "metadata"):
                continue
            if key in properties:
                yield from _prune(item, properties[key], (*path, key), embedded)
            elif isinstance(additional, Mapping):
                yield from _prune(item, additional, (*path, key), embedded)
    elif isinstance(value, list):
        items = schema.get("items")
        for index, item in enumerate(value):
            yield from _skip_prune(item, items if isinstance(items, Mapping) else None, (*path, index), embedded)


def _kept_type_meta(key: str, item: Any) -> bool:
    """An embedded resource keeps apiVersion and kind when they are strings, and its metadata (decoded apart)."""
    return (key in TYPE_META_FIELDS and isinstance(item, str)) or key == "metadata"


def _meta_paths(value: Any, kind: Any, path: FieldPath) -> Iterator[FieldPath]:
    """The keys Go's strict decoder finds unknown in value decoded as kind, depth first over sorted keys."""
    if isinstance(kind, dict) and isinstance(value, Mapping):
        for key in sorted(value):
            if key in kind:
                yield from _meta_paths(value[key], kind[key], (*path, key))
            else:
                yield (*path, key)
    elif isinstance(kind, tuple) and kind[0] == "list" and isinstance(value, list):
        for index, item in enumerate(value):
            yield from _meta_paths(item, kind[1], (*path, index))
    elif isinstance(kind, tuple) and kind[0] == "map" and isinstance(value, Mapping):
        for key in sorted(value):
            yield from _meta_paths(value[key], kind[1], (*path, key))


_JSON_TYPES = {dict: "an object", list: "an array", str: "a string", bool: "a boolean", int: "a number", float: "a number"}


def _meta_error(value: Any, kind: Any, path: FieldPath) -> str | None:
    if value is None:  # JSON null decodes into anything as the zero value
        return None
    found = _JSON_TYPES.get(type(value), type(value).__name__)
    where = show(path)
    if isinstance(kind, dict) or (isinstance(kind, tuple) and kind[0] == "map"):
        if not isinstance(value, Mapping):
            return f"{where} must be an object, not {found}"
        for key in sorted(value):
            sub = kind.get(key) if isinstance(kind, dict) else kind[1]
            if sub is not None and (problem := _meta_error(value[key], sub, (*path, key))):
                return problem
        return None
    if isinstance(kind, tuple):  # a list
        if not isinstance(value, list):
            return f"{where} must be an array, not {found}"
        for index, item in enumerate(value):
            if problem := _meta_error(item, kind[1], (*path, index)):
                return problem
        return None
    if kind == "string" and not isinstance(value, str):
        return f"{where} must be a string, not {found}"
    if kind == "boolean" and not isinstance(value, bool):
        return f"{where} must be a boolean, not {found}"
    if kind == "integer" and not (isinstance(value, int | float) and not isinstance(value, bool)
                                  and float(value).is_integer() and INT64[0] <= value <= INT64[1]):
        return f"{where} must be an integer, not {found if not isinstance(value, int | float) else value!r}"
    if kind == "time" and not (isinstance(value, str) and _is_rfc3339(value)):
        return f"{where} must be an RFC 3339 time (2006-01-02T15:04:05Z), not {value!r}"
    return None


def _is_rfc3339(text: str) -> bool:
    if not RFC3339.fullmatch(text):
        return False
    try:
        datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return False
    return True


def _default(value: Any, schema: Mapping[str, Any]) -> None:
    if isinstance(value, dict):
        properties = schema.get("properties") or {}
        additional = schema.get("additionalProperties")
        for key, sub in properties.items():
            if key not in value and "default" in sub:
                value[key] = copy_json(sub["default"])
        for key, item in value.items():
            if key in properties:
                _default(item, properties[key])
            elif isinstance(additional, Mapping):
                _default(item, additional)
    elif isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        for item in value:
            _default(item, schema["items"])


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
    """The job without its unknown fields (unchanged for a kind crd/ does not define)."""
    schema = schema_of(job, crd_dir)
    return pruned(job, schema) if schema is not None else copy_json(job)


def stored_job(job: Mapping[str, Any], crd_dir: Path = CRD_DIR) -> dict[str, Any]:
    """The job as the API server would store it: pruned and defaulted (unchanged for a kind crd/ does not define)."""
    schema = schema_of(job, crd_dir)
    return stored(job, schema) if schema is not None else copy_json(job)
