"""A line-by-line port of Metacontroller v4.17.2's pkg/dynamic/apply/apply.go Merge, for a differential test,
and of the update it computes from it (pkg/controller/common/manage_children.go ApplyUpdate).

Written for this project from reading the Go source; it keeps Go's shapes on purpose: the merge
mutates a deep copy of observed in place; a comma-ok type assertion that fails yields a nil map or
slice (so a value of another type counts as absent, never as an error); list maps are Go maps keyed
by fmt's %v of the merge key; and the list is rebuilt from the observed items first (duplicates
included), then the desired ones not yet added. localcluster/metacontroller/apply.py has its own,
idiomatic implementation; tests/localcluster/test_emulation.py checks that the two agree.
"""
from __future__ import annotations

import copy
import json
from typing import Any

LAST_APPLIED = "metacontroller.k8s.io/last-applied-configuration"
# manage_children.go objectMetaSystemFields: taken back from the observed object after the merge.
OBJECT_META_SYSTEM_FIELDS = ("selfLink", "uid", "resourceVersion", "generation", "creationTimestamp",
                             "deletionTimestamp", "deletionGracePeriodSeconds", "managedFields")
KNOWN_MERGE_KEYS = ["containerPort", "port", "mountPath", "name", "uid", "ip", "path"]


def Merge(observed: dict, last_applied: dict | None, desired: dict) -> dict:
    destination = copy.deepcopy(observed)  # runtime.DeepCopyJSON
    merge("", destination, last_applied, desired)
    return destination


def merge(field_path: str, destination: Any, last_applied: Any, desired: Any) -> Any:
    if isinstance(destination, dict):
        last_val = last_applied if isinstance(last_applied, dict) else None  # lastVal, ok := ...(map)
        des_val = desired if isinstance(desired, dict) else None
        return merge_object(field_path, destination, last_val, des_val)
    if isinstance(destination, list):
        last_list = last_applied if isinstance(last_applied, list) else None
        des_list = desired if isinstance(desired, list) else None
        return merge_array(field_path, destination, last_list, des_list)
    return desired


def merge_object(field_path: str, destination: dict, last_applied: dict | None, desired: dict | None) -> dict:
    for key in last_applied or {}:
        if key not in (desired or {}):
            destination.pop(key, None)  # delete(destination, key)
    for key, des_val in (desired or {}).items():
        destination[key] = merge(f"{field_path}[{key}]", destination.get(key), (last_applied or {}).get(key), des_val)
    return destination


def merge_array(field_path: str, destination: list, last_applied: list | None, desired: list | None) -> Any:
    merge_key = detect_list_map_key(destination, last_applied or [], desired or [])
    if merge_key != "":
        return merge_list_map(field_path, merge_key, destination, last_applied or [], desired or [])
    return desired


def merge_list_map(field_path: str, merge_key: str, destination: list, last_applied: list, desired: list) -> list:
    dest_map = make_list_map(merge_key, destination)
    last_map = make_list_map(merge_key, last_applied)
    des_map = make_list_map(merge_key, desired)
    merge_object(field_path, dest_map, last_map, des_map)
    dest_list: list = []
    added: dict[str, bool] = {}
    for item in destination:
        key = string_merge_key(item[merge_key])
        if key in dest_map:
            dest_list.append(dest_map[key])
            added[key] = True
    for item in desired:
        key = string_merge_key(item[merge_key])
        if not added.get(key):
            dest_list.append(dest_map.get(key))
            added[key] = True
    return dest_list


def make_list_map(merge_key: str, items: list) -> dict:
    res: dict = {}
    for item in items:
        res[string_merge_key(item[merge_key])] = item
    return res


def string_merge_key(val: Any) -> str:
    if isinstance(val, str):
        return val
    if isinstance(val, bool):
        return "true" if val else "false"
    if isinstance(val, float) and val.is_integer():
        return str(int(val))  # k8s' json.Unmarshal turns whole numbers into int64
    return str(val)


def detect_list_map_key(*lists: list) -> str:
    common_keys: dict[str, bool] | None = None
    for lst in lists:
        for item in lst:
            if not isinstance(item, dict):
                return ""
            if common_keys is None:
                common_keys = {key: True for key in item}
                continue
            for key in list(common_keys):
                if key not in item:
                    del common_keys[key]
    for key in KNOWN_MERGE_KEYS:
        if (common_keys or {}).get(key):
            return key
    return ""


# --- pkg/controller/common/manage_children.go and pkg/dynamic/apply/apply.go's annotation helpers ------


def go_json_marshal(value: Any) -> str:
    """encoding/json.Marshal of decoded JSON: map keys sorted, compact, UTF-8, and <, >, & escaped as
    \\u003c, \\u003e, \\u0026 (Go's HTML-safe default; a rsh agent script is full of them)."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    for char, escaped in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"),
                          ("\u2028", "\\u2028"), ("\u2029", "\\u2029")):
        text = text.replace(char, escaped)
    return text


def set_last_applied(obj: dict, last_applied: dict) -> None:
    """apply.SetLastApplied: the annotation holds json.Marshal(lastApplied)."""
    annotations = obj.setdefault("metadata", {}).get("annotations") or {}
    annotations[LAST_APPLIED] = go_json_marshal(last_applied)
    obj["metadata"]["annotations"] = annotations


def get_last_applied(obj: dict) -> dict | None:
    """apply.GetLastApplied: None when the annotation is absent or empty."""
    raw = ((obj.get("metadata") or {}).get("annotations") or {}).get(LAST_APPLIED, "")
    return json.loads(raw) if raw else None


def nullify_last_applied_annotation(obj: dict) -> None:
    annotations = (obj.get("metadata") or {}).get("annotations")
    if annotations and LAST_APPLIED in annotations:
        del annotations[LAST_APPLIED]


def revert_field(new: dict, orig: dict, *path: str) -> None:
    """revertField: the field as it was in orig, or absent if it was absent there."""
    node: Any = orig
    for part in path:
        if not isinstance(node, dict) or part not in node:
            parent: Any = new
            for step in path[:-1]:
                parent = parent.get(step) if isinstance(parent, dict) else None
            if isinstance(parent, dict):
                parent.pop(path[-1], None)
            return
        node = node[part]
    target = new
    for part in path[:-1]:
        if not isinstance(target.get(part), dict):
            target[part] = {}
        target = target[part]
    target[path[-1]] = copy.deepcopy(node)


def ApplyUpdate(orig: dict, update: dict) -> dict:
    """The object Metacontroller v4.17.2 PUTs for an observed child `orig` and the hook's `update`
    (it PUTs only when this differs from orig, and only under InPlace)."""
    update = copy.deepcopy(update)
    last_applied = get_last_applied(orig)
    nullify_last_applied_annotation(update)
    new = Merge(orig, last_applied, update)
    for name in OBJECT_META_SYSTEM_FIELDS:
        revert_field(new, orig, "metadata", name)
    revert_field(new, orig, "status")
    set_last_applied(new, update)
    return new
