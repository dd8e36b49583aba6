"""Ownership of children, as Metacontroller's `pkg/dynamic/controllerref` claims them.

A parent's candidates are the objects of each child kind in its namespace that it controls or that
nobody controls. Of those, an owned object its selector still matches is kept; an owned one it no
longer matches is released (its ownerReference dropped, the object left alone); an orphan it
matches is adopted (a controller ownerReference added), unless the parent or the orphan is being
deleted. This module decides; the sync engine (composite.py) makes the writes. Pure functions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from localcluster.config import ControllerConfig
from localcluster.store import controller_reference, controller_uid, json_copy
from localcluster.types import KubeObject

CONTROLLER_UID = "controller-uid"
Action = Literal["keep", "adopt", "release"]


@dataclass(frozen=True)
class Claim:
    """What the parent does with one candidate: `obj` is the object as it should be written (adopt,
    release) or as observed (keep), a copy the caller may change."""

    action: Action
    obj: KubeObject


def selector_matches(labels: dict[str, str] | None, selector: dict[str, str]) -> bool:
    """matchLabels semantics."""
    labels = labels or {}
    return all(labels.get(k) == v for k, v in selector.items())


def parent_selector(config: ControllerConfig, parent: KubeObject) -> dict[str, str]:
    """The parent's label selector (generated from its uid, or spec.selector.matchLabels)."""
    if config.generate_selector:
        return {CONTROLLER_UID: parent["metadata"]["uid"]}
    return dict(parent.get("spec", {}).get("selector", {}).get("matchLabels", {}))


def claim(parent: KubeObject, selector: dict[str, str], candidate: KubeObject) -> Claim | None:
    """The parent's decision on one object of a child kind in its namespace; None when it leaves it
    alone (another controller's, or an orphan it may not or need not adopt)."""
    uid = parent["metadata"]["uid"]
    deleting = bool(parent["metadata"].get("deletionTimestamp"))
    owner = controller_uid(candidate)
    if owner is not None and owner != uid:
        return None  # another controller's
    meta = candidate["metadata"]
    matches = selector_matches(meta.get("labels"), selector)
    if owner is not None:
        if matches:
            return Claim("keep", json_copy(candidate))
        if deleting:
            return None  # a deleting parent releases nothing; its children are the garbage collector's
        released = json_copy(candidate)
        released["metadata"]["ownerReferences"] = [r for r in meta.get("ownerReferences", []) if r.get("uid") != uid]
        return Claim("release", released)
    if not matches or meta.get("deletionTimestamp") or deleting:
        return None  # a deleting parent adopts nothing (CanAdopt refuses), nor is a deleting orphan adopted
    adopted = json_copy(candidate)
    adopted["metadata"]["ownerReferences"] = list(meta.get("ownerReferences") or []) + [controller_reference(parent)]
    return Claim("adopt", adopted)
