"""Reading a Metacontroller sync request, whatever the job kind: the parent and its observed children.

Metacontroller deletes every observed child that an answer leaves out, so a request that cannot be
read raises InvalidRequest (the shell answers 4xx and Metacontroller changes nothing) instead of
being taken as "no children". The API server never sends objects of another shape, so a parent
whose identity is not strings, or an observed child whose fields the core reads are of the wrong
type, is a malformed request, checked here once so the core can read those fields without doubt.
"""
from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from hooks.shared.errors import InvalidRequest
from hooks.shared.identity import job_key
from hooks.shared.k8s import JSON, LAST_APPLIED
from hooks.shared.messages import cut, type_name

# What every kind reads of an observed child, in the format of a kind's OBSERVED_FIELDS (a leaf is
# the type the value must have, True any value, a dict an object of such fields, a one-element
# list an array of such objects). A kind that declares its own (hooks.kinds.OBSERVED_FIELDS) passes
# that to read_children instead, so what the shell decodes and what is checked here are one list.
GENERIC_OBSERVED_FIELDS: Mapping[str, Any] = {
    "metadata": {"name": str, "namespace": str, "uid": str, "labels": dict[str, str],
                 "annotations": dict[str, str]},
    "status": {},
}



class CheckedChildren(dict):  # type: ignore[type-arg]
    """A request's `children` whose observed objects a decoder has already checked against `fields`
    (hooks.server.wire decodes only those fields, typed, and refuses any of another type), so
    read_children need not walk them again: that walk was half of a large sync. Any other mapping is
    checked here, so the core refuses a malformed request alike with or without the shell."""

    def __init__(self, children: dict[str, Any], fields: Mapping[str, Any]):
        super().__init__(children)
        self.fields = fields


_ARTICLE = {"object": "an", "string": "a", "integer": "an", "string map": "a", "list of objects": "a"}


def read_parent(request: Any, *, api_version: str, kind: str) -> JSON:
    """The parent object of a sync request, checked to be of the kind this route serves."""
    if not isinstance(request, Mapping):
        raise InvalidRequest("the body must be a JSON object (a Metacontroller sync request)")
    parent = request.get("parent")
    if not isinstance(parent, Mapping):
        raise InvalidRequest(f"parent: required, the {kind} being synced")
    if parent.get("apiVersion") != api_version or parent.get("kind") != kind:
        raise InvalidRequest(f"parent: expected apiVersion {api_version} kind "
                             f"{kind}, got {_short(parent.get('apiVersion'))} {_short(parent.get('kind'))}")
    meta = parent.get("metadata")
    if not isinstance(meta, Mapping) or not isinstance(meta.get("name"), str) or not meta["name"]:
        raise InvalidRequest("parent.metadata.name: required, a non-empty string")
    for key in ("namespace", "uid"):
        if meta.get(key) is not None and not isinstance(meta[key], str):
            raise InvalidRequest(f"parent.metadata.{key}: must be a string, got {type_name(meta[key])}")
    return parent  # type: ignore[return-value]


def parent_key(parent: Mapping[str, Any]) -> str:
    """`namespace/name` of a parent read by read_parent, as messages name a job."""
    meta = parent["metadata"]
    return job_key(meta.get("namespace") or "default", meta["name"])


def read_children(request: Mapping[str, Any], keys: tuple[str, ...], *,
                  fields: Mapping[str, Any] = GENERIC_OBSERVED_FIELDS) -> list[Mapping[str, Any]]:
    """The observed children of each child rule, in the order of `keys`, each checked for shape.

    Every key must be there: Metacontroller sends one entry per child rule, even when empty, so a
    missing one is a CompositeController without that rule, whose children the hook would never
    see (reading them as absent would recreate, delete or forget what exists). `fields` are the
    fields the kind's core reads (checked for type when present).
    """
    tree = _shape_tree(fields)
    children = request.get("children")
    if not isinstance(children, Mapping):
        raise InvalidRequest("children: required, a map keyed by child kind "
                             f"({', '.join(keys)})")
    checked = isinstance(children, CheckedChildren) and children.fields is fields
    observed = []
    for key in keys:
        value = children.get(key)
        if value is None:
            kind, _, api_version = key.partition(".")
            raise InvalidRequest(f"children[{key}]: required: the CompositeController has no child rule "
                                 f"for {kind} {api_version}, which this hook needs; re-apply metacontroller/ "
                                 f"(kubectl apply -k) to install the shipped child rules")
        if not isinstance(value, Mapping):
            raise InvalidRequest(f"children[{key}]: must be a map of observed objects by name, got {type_name(value)}")
        for name, obj in value.items():
            if not checked:
                _check_child(f"children[{key}][{_short(name)}]", obj, tree)
            # Children are matched by name, so a child must not claim another one's.
            if (obj.get("metadata") or {}).get("name", name) != name:
                raise InvalidRequest(f"children[{key}][{_short(name)}].metadata.name: "
                                     f"must equal the key {_short(name)}")
        observed.append(value)
    return observed


_TREES: dict[int, tuple[Mapping[str, Any], dict[str, Any]]] = {}


def _shape_tree(fields: Mapping[str, Any]) -> dict[str, Any]:
    """A fields declaration as a tree {field: (JSON type, subtree)}, built once per declaration."""
    cached = _TREES.get(id(fields))
    if cached is None or cached[0] is not fields:
        cached = (fields, {key: _node(shape) for key, shape in fields.items() if shape is not True})
        _TREES[id(fields)] = cached
    return cached[1]


def _node(shape: Any) -> tuple[str, dict[str, Any]]:
    if isinstance(shape, list):
        return "list of objects", _shape_tree(shape[0])
    if isinstance(shape, Mapping):
        return "object", _shape_tree(shape)
    names = {str: "string", int: "integer", dict[str, str]: "string map"}
    return names[shape], {}


def _check_child(path: str, obj: Any, tree: dict[str, Any]) -> None:
    if not isinstance(obj, dict):
        raise InvalidRequest(f"{path}: must be an object, got {type_name(obj)}")
    _check_fields(path, obj, tree)


def _check_fields(path: str, obj: dict[str, Any], tree: dict[str, Any]) -> None:
    """Every field of `tree` present in `obj` has its type; parents of the wrong type stop the walk."""
    # This runs over every observed child of every sync, so it only builds a path on an error.
    for key, (expected, subtree) in tree.items():
        value = obj.get(key)
        if value is None:
            continue
        if not _has_type(value, expected):
            raise InvalidRequest(f"{path}.{key}: must be {_ARTICLE[expected]} {expected}, got {type_name(value)}")
        if not subtree:
            continue
        if expected == "object":
            _check_fields(f"{path}.{key}", value, subtree)
        else:  # a list of objects
            for i, item in enumerate(value):
                _check_fields(f"{path}.{key}[{i}]", item, subtree)


def _has_type(value: Any, expected: str) -> bool:
    # Exact JSON types: the request is decoded JSON, and isinstance against the Mapping ABC cost
    # more than the rest of a sync.
    if expected == "object":
        return isinstance(value, dict)
    if expected == "string":
        return isinstance(value, str)
    if expected == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if expected == "string map":
        return isinstance(value, dict) and all(isinstance(v, str) for v in value.values())
    return isinstance(value, list) and all(isinstance(v, dict) for v in value)  # list of objects


def as_last_applied(key: str, name: str, obj: Mapping[str, Any]) -> JSON:
    """The observed child `name` of the child rule `key` ("Pod.v1") as Metacontroller last
    applied it, so keeping it changes nothing."""
    meta = {**(obj.get("metadata") or {}), "name": name}
    text = (meta.get("annotations") or {}).get(LAST_APPLIED)
    if text:
        try:
            applied = json.loads(text)
        except (ValueError, RecursionError):  # RecursionError: nesting too deep to be a real object
            applied = None
        applied_meta = applied.get("metadata") if isinstance(applied, dict) else None
        if isinstance(applied, dict) and isinstance(applied_meta, dict) and applied_meta.get("name") == name:
            return applied
    # No usable record (created by an older Metacontroller?): keep the identity, which is all
    # Metacontroller needs to leave an existing child alone.
    # Every child rule is OnDelete or InPlace, and a three-way merge leaves alone what neither the
    # last-applied record nor the answer names, so the identity changes nothing. (The shell may
    # hand over observed children without their spec, so the spec is never copied from them.)
    kind, _, api_version = key.partition(".")
    return {"apiVersion": api_version, "kind": kind,
            "metadata": {k: meta[k] for k in ("name", "namespace", "labels") if k in meta}}


def _short(value: Any) -> str:
    return cut(value if isinstance(value, str) else repr(value), 80)
