"""Reading a Metacontroller sync request, whatever the job kind: the parent and its observed children.

Metacontroller deletes every observed child that an answer leaves out, so a request that cannot be
read raises InvalidRequest (the shell answers 4xx and Metacontroller changes nothing) instead of
being taken as "no children".
"""
from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from hooks.shared.errors import InvalidRequest
from hooks.shared.k8s import JSON, LAST_APPLIED


def read_parent(request: Any, *, api_version: str, kind: str) -> JSON:
    """The parent object of a sync request, checked to be of the kind this route serves."""
    if not isinstance(request, Mapping):
        raise InvalidRequest("the body must be a JSON object (a Metacontroller sync request)")
    parent = request.get("parent")
    if not isinstance(parent, Mapping):
        raise InvalidRequest(f"parent: required, the {kind} being synced")
    if parent.get("apiVersion") != api_version or parent.get("kind") != kind:
        raise InvalidRequest(f"parent: expected apiVersion {api_version} kind "
                             f"{kind}, got {parent.get('apiVersion')} {parent.get('kind')}")
    if not isinstance(parent.get("metadata"), Mapping) or not parent["metadata"].get("name"):
        raise InvalidRequest("parent.metadata.name: required")
    return parent  # type: ignore[return-value]


def read_children(request: Mapping[str, Any], keys: tuple[str, ...]) -> list[Mapping[str, Any]]:
    """The observed children of each child rule, in the order of `keys`."""
    children = request.get("children")
    if not isinstance(children, Mapping):
        raise InvalidRequest("children: required, a map keyed by child kind "
                             f"({', '.join(keys)})")
    observed = []
    for key in keys:
        # Metacontroller always sends one entry per child rule; a missing one would make us
        # believe the children do not exist.
        value = children.get(key)
        if not isinstance(value, Mapping):
            raise InvalidRequest(f"children[{key}]: required, a map of observed objects by name")
        observed.append(value)
    return observed


def as_last_applied(obj: Mapping[str, Any]) -> JSON:
    """The object as Metacontroller last applied it, so keeping it changes nothing."""
    meta = obj.get("metadata") or {}
    text = (meta.get("annotations") or {}).get(LAST_APPLIED)
    if text:
        try:
            applied = json.loads(text)
            if isinstance(applied, dict) and applied.get("metadata", {}).get("name"):
                return applied
        except ValueError:
            pass
    # No usable record (created by an older Metacontroller?): keep the identity, which is all
    # Metacontroller needs to leave an existing child alone.
    # Every child rule is OnDelete or InPlace, and a three-way merge leaves alone what neither the
    # last-applied record nor the answer names, so the identity changes nothing.
    keep_meta = {k: meta[k] for k in ("name", "namespace", "labels") if k in meta}
    return {"apiVersion": obj.get("apiVersion"), "kind": obj.get("kind"), "metadata": keep_meta}
