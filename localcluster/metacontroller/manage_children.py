"""How Metacontroller's `pkg/controller/common/manage_children.go` writes a sync's children.

Children are written one object at a time: deletes first, then creates and updates, each grouped
and sorted by API group (core first), version and kind, in no defined order within a kind. A child
is created with its last-applied annotation; an existing one is updated with the three-way merge
(apply.py) of what is observed, what was last applied and what is desired, its system metadata and
status taken back from the observed object, and written only when that changes it. This module
holds the pure parts (the order, the object to PUT); the sync engine (composite.py) makes the calls.
"""

from __future__ import annotations

import copy
import random
from typing import Any, cast

from localcluster.store import Key
from localcluster.types import KubeObject

from .apply import last_applied, three_way_merge, with_last_applied

# System fields taken back from the observed object after the merge.
SYSTEM_METADATA = ("selfLink", "uid", "resourceVersion", "generation", "creationTimestamp", "deletionTimestamp",
                   "deletionGracePeriodSeconds", "managedFields")


def write_order(api_version: str, kind: str) -> tuple[str, str, str]:
    """Metacontroller's order of child groups: by API group (core first), version, then kind."""
    group, _, version = api_version.rpartition("/")
    return (group, version, kind)


def ordered(keys: list[Key], rng: random.Random) -> list[Key]:
    """Grouped and sorted by group, version and kind; in no defined order within a kind (`rng` shuffles)."""
    shuffled = list(keys)
    rng.shuffle(shuffled)
    return sorted(shuffled, key=lambda key: write_order(key[0], key[1]))  # sorted() is stable


def object_to_put(observed: KubeObject, desired: KubeObject) -> KubeObject | None:
    """The object an update PUTs for `desired` over `observed`, or None when the merge changes
    nothing. ApplyError (apply.py) when the observed last-applied annotation cannot be read."""
    merged: dict[str, Any] = three_way_merge(observed, last_applied(observed), with_last_applied(desired))
    observed_meta: dict[str, Any] = dict(observed["metadata"])
    merged_meta: dict[str, Any] = merged["metadata"]
    for field_name in SYSTEM_METADATA:
        if field_name in observed_meta:
            merged_meta[field_name] = copy.deepcopy(observed_meta[field_name])
        else:
            merged_meta.pop(field_name, None)
    if "status" in observed:
        merged["status"] = copy.deepcopy(observed["status"])
    return None if merged == observed else cast(KubeObject, merged)
