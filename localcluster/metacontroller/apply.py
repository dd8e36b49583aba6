"""Go's three-way merge of Metacontroller's `pkg/dynamic/apply`, and the last-applied annotation.

What Metacontroller PUTs for a child it updates is `Merge(observed, lastApplied, desired)`: the
observed object, minus what the last applied object had and the desired one no longer has, plus
the desired object. Lists whose items all carry one of Go's known merge keys are merged as maps
keyed by it (stringified as Go's `%v` writes it, so duplicates collapse as they do in Go); other
lists, and values of another type than the observed one, are replaced. The last-applied object
travels in an annotation, written as Go's json.Marshal writes it; one that cannot be read is an
error of the sync, as in Metacontroller. Pure functions, no I/O.
"""

from __future__ import annotations

import json
from typing import Any

from localcluster.store import json_copy
from localcluster.types import KubeObject

LAST_APPLIED = "metacontroller.k8s.io/last-applied-configuration"
# apply.go's knownMergeKeys: a list whose items all carry one of these is merged as a map keyed by it.
LIST_MERGE_KEYS = ("containerPort", "port", "mountPath", "name", "uid", "ip", "path")


class ApplyError(ValueError):
    """The last-applied annotation cannot be read: the sync fails and is retried."""


def three_way_merge(observed: Any, last_applied: Any, desired: Any) -> Any:
    """apply.Merge(observed, lastApplied, desired): the object Metacontroller would PUT.

    As Go's: a value of another type than the observed one counts as absent (a map then loses the
    last-applied keys); list items are keyed by their stringified merge key, so two items with one
    key collapse into the last one, and every observed duplicate is written back as that item.
    """
    return json_copy(_merge(json_copy(observed), last_applied, desired))


def _merge(destination: Any, last: Any, desired: Any) -> Any:
    if isinstance(destination, dict):
        return _merge_object(destination, last if isinstance(last, dict) else {}, desired if isinstance(desired, dict) else {})
    if isinstance(destination, list):
        return _merge_array(destination, last if isinstance(last, list) else [], desired if isinstance(desired, list) else None)
    return desired


def _merge_object(destination: dict[str, Any], last: dict[str, Any], desired: dict[str, Any]) -> dict[str, Any]:
    for key in last:
        if key not in desired:
            destination.pop(key, None)
    for key, value in desired.items():
        destination[key] = _merge(destination.get(key), last.get(key), value)
    return destination


def _merge_array(destination: list[Any], last: list[Any], desired: list[Any] | None) -> Any:
    merge_key = _list_merge_key(destination, last, desired or [])
    if merge_key is None:
        return desired
    dest_map = _list_map(merge_key, destination)
    _merge_object(dest_map, _list_map(merge_key, last), _list_map(merge_key, desired or []))
    merged, added = [], set()
    for item in destination:  # observed order first; every observed duplicate gets the merged item
        key = go_merge_key(item[merge_key])
        if key in dest_map:
            merged.append(dest_map[key])
            added.add(key)
    for item in desired or []:
        key = go_merge_key(item[merge_key])
        if key not in added:
            merged.append(dest_map[key])
            added.add(key)
    return merged


def _list_map(merge_key: str, items: list[Any]) -> dict[str, Any]:
    return {go_merge_key(item[merge_key]): item for item in items}


def go_merge_key(value: Any) -> str:
    """A merge key value as Go's fmt %v writes it (53 and "53" are one key)."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "<nil>"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value) if isinstance(value, (int, float)) else json.dumps(value, sort_keys=True)


def _list_merge_key(*lists: list[Any]) -> str | None:
    common: set[str] | None = None
    for lst in lists:
        for item in lst:
            if not isinstance(item, dict):
                return None
            common = set(item) if common is None else common & set(item)
    if not common:
        return None
    return next((key for key in LIST_MERGE_KEYS if key in common), None)


def last_applied_json(obj: KubeObject) -> str:
    """The annotation value: the desired object as Go's json.Marshal writes it (compact, sorted keys)."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"))


def last_applied(obj: KubeObject) -> dict[str, Any]:
    """The object last applied to `obj`, from its annotation ({} without one); ApplyError when the
    annotation is not a JSON object (someone edited it by hand), as GetLastApplied fails in Go."""
    raw = (obj.get("metadata", {}).get("annotations") or {}).get(LAST_APPLIED)
    if not raw:
        return {}
    try:
        value = json.loads(raw)
    except ValueError as err:
        raise ApplyError(f"{obj.get('kind')} {obj['metadata'].get('name')}: the {LAST_APPLIED} annotation is not JSON: {err}") from err
    if not isinstance(value, dict):
        raise ApplyError(f"{obj.get('kind')} {obj['metadata'].get('name')}: the {LAST_APPLIED} annotation is not a JSON object")
    return value


def with_last_applied(obj: KubeObject) -> KubeObject:
    """A copy of `obj` carrying itself in the last-applied annotation (SetLastApplied)."""
    annotated: KubeObject = json_copy(obj)
    meta = annotated.setdefault("metadata", {})
    meta["annotations"] = {**(meta.get("annotations") or {}), LAST_APPLIED: last_applied_json(obj)}
    return annotated
