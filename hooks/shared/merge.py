"""Metacontroller's list merge: the key it merges a list of objects by, and the items it would collapse.

Metacontroller applies an InPlace child with its own three-way merge (pkg/dynamic/apply/apply.go,
v4.17), not Kubernetes' strategic merge: a list whose items are all objects is merged as a map
keyed by the first of MERGE_KEYS that every item has, the key's value turned into a string. So a
Service's ports merge by `port` alone (not port and protocol), a container's ports by
`containerPort`, env by `name`, volumeMounts by `mountPath`. Two items with one key value collapse:
each becomes a copy of the last, so the API server refuses the object on every later sync (a
Service port listed twice) or a pod template silently changes. A list of an InPlace child must
therefore never hold two items with one key value; the spec checks refuse templates that would.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

MERGE_KEYS = ("containerPort", "port", "mountPath", "name", "uid", "ip", "path")  # apply.go knownMergeKeys


def merge_key(items: list[Any]) -> str | None:
    """The key Metacontroller merges `items` by, or None when it replaces the list whole."""
    if not items or not all(isinstance(item, Mapping) for item in items):
        return None
    common = set(items[0]).intersection(*items[1:])
    return next((key for key in MERGE_KEYS if key in common), None)


def collapsed(items: list[Any]) -> list[tuple[int, str, Any]]:
    """Each item whose key value an earlier item already has: (its index, the key, the value)."""
    key = merge_key(items)
    if key is None:
        return []
    seen: set[str] = set()
    found = []
    for index, item in enumerate(items):
        text = _go_string(item[key])
        if text in seen:
            found.append((index, key, item[key]))
        seen.add(text)
    return found


def _go_string(value: Any) -> str:
    """The value as Go's fmt "%v" prints it, which is how the merge compares non-string keys."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)
