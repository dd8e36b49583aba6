"""The customize hook's related objects, as Metacontroller's `pkg/controller/common/customize` keeps them.

A CompositeController that declares a customize hook is asked, once per parent uid and generation,
which other objects its parent depends on (`relatedResources`); those objects are sent in every
sync request's `related` map, and a change of one syncs its parent at once. This module reads an
answer into `RelatedRule`s (refusing, as a failed sync, what the emulation cannot select with) and
selects with them. Pure functions over objects handed in.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from localcluster.config import KNOWN_KINDS, RELATED_KINDS
from localcluster.store import json_copy
from localcluster.types import KubeObject

from .controllerref import selector_matches
from .errors import SyncError


@dataclass(frozen=True)
class RelatedRule:
    """One entry of a customize answer's relatedResources, as the emulation selects with it."""

    api_version: str
    kind: str
    match_labels: dict[str, str] | None  # None: no label selector (every object)
    names: tuple[str, ...] = ()

    def matches(self, obj: KubeObject, namespace: str) -> bool:
        """Whether an object is one this rule relates to a parent in `namespace` (hook version v1)."""
        meta = obj.get("metadata", {})
        if (obj.get("apiVersion"), obj.get("kind")) != (self.api_version, self.kind) or meta.get("namespace") != namespace:
            return False
        if self.names:
            return meta.get("name") in self.names
        return self.match_labels is None or selector_matches(meta.get("labels"), self.match_labels)

    @property
    def key(self) -> str:
        """The rule's key in the request's `related` map (`Pod.v1`)."""
        return f"{self.kind}.{self.api_version}"


def related_rules(answer: Any, namespace: str) -> list[RelatedRule]:
    """The rules of a customize answer for a parent in `namespace`; SyncError for a bad answer."""
    if not isinstance(answer, dict):
        raise SyncError(f"customize hook answer is a JSON {type(answer).__name__}, not an object")
    return [related_rule(rule, namespace) for rule in answer.get("relatedResources") or []]


def related_rule(rule: Any, namespace: str) -> RelatedRule:
    """One relatedResources entry; what the emulation cannot select with fails the sync, as an
    invalid rule does in Metacontroller (determineSelectionType)."""
    if not isinstance(rule, dict):
        raise SyncError(f"customize hook answer: a related rule is not an object: {str(rule)[:200]}")
    kind = {**KNOWN_KINDS, **RELATED_KINDS}.get((rule.get("apiVersion", ""), rule.get("resource", "")))
    if kind is None:
        raise SyncError(f"customize hook answer: related {rule.get('apiVersion')}/{rule.get('resource')} is not emulated")
    selector, names = rule.get("labelSelector"), tuple(rule.get("names") or ())
    if names and selector is not None:
        raise SyncError("customize hook answer: a related rule cannot have both names and labelSelector")
    if rule.get("namespace") not in (None, "", namespace):
        # Hook version v1: a namespaced parent's related objects live in its own namespace.
        raise SyncError(f"customize hook answer: related namespace {rule['namespace']} differs from the parent's {namespace}")
    if rule.get("namespaceSelector") is not None or (selector or {}).get("matchExpressions"):
        raise SyncError("customize hook answer: namespaceSelector and matchExpressions are not emulated")
    labels = None if selector is None else dict(selector.get("matchLabels") or {})
    return RelatedRule(rule["apiVersion"], kind, labels, names)


def select_related(rules: list[RelatedRule], namespace: str,
                   objects_of: Any) -> dict[str, dict[str, KubeObject]]:
    """The request's `related` map: per rule, its type's key (present even when nothing matches),
    then each matching object in `namespace` by name (copies). `objects_of(api_version, kind)` lists
    the cached objects of a kind in the namespace."""
    related: dict[str, dict[str, KubeObject]] = {}
    for rule in rules:
        group = related.setdefault(rule.key, {})
        found: Iterable[KubeObject] = objects_of(rule.api_version, rule.kind)
        for obj in found:
            if rule.matches(obj, namespace):
                group[obj["metadata"]["name"]] = json_copy(obj)
    return related
