"""A line-by-line port of Metacontroller v4.17.2's pkg/dynamic/apply/apply.go Merge, for a differential test.

Written for this project from reading the Go source; it keeps Go's shapes on purpose: the merge
mutates a deep copy of observed in place; a comma-ok type assertion that fails yields a nil map or
slice (so a value of another type counts as absent, never as an error); list maps are Go maps keyed
by fmt's %v of the merge key; and the list is rebuilt from the observed items first (duplicates
included), then the desired ones not yet added. localcluster/metacontroller.py has its own,
idiomatic implementation; tests/test_emulation.py checks that the two agree.
"""
from __future__ import annotations

import copy
from typing import Any

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
