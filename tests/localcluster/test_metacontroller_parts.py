"""The Metacontroller emulation's parts, each alone (localcluster/metacontroller/): no store, no threads."""
from __future__ import annotations

import copy
import random
from typing import Any, cast

import pytest

from localcluster.metacontroller.apply import LAST_APPLIED, ApplyError, last_applied, with_last_applied
from localcluster.metacontroller.controllerref import claim
from localcluster.metacontroller.informer import ParentCache
from localcluster.metacontroller.manage_children import object_to_put, ordered
from localcluster.store import ADDED, DELETED, MODIFIED
from localcluster.types import KubeObject

PARENT = cast(KubeObject, {"apiVersion": "kubeflow.org/v1", "kind": "MXJob",
                           "metadata": {"name": "mx", "namespace": "ns", "uid": "p1"}})
SELECTOR = {"controller-uid": "p1"}


def _pod(labels: dict[str, str], owner: str | None = None, **meta: Any) -> KubeObject:
    refs = [{"apiVersion": "kubeflow.org/v1", "kind": "MXJob", "name": "x", "uid": owner, "controller": True}] if owner else []
    return cast(KubeObject, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "labels": labels,
                                                                            "ownerReferences": refs, **meta}})


@pytest.mark.parametrize(("candidate", "deleting", "action"), [
    (_pod(SELECTOR, "p1"), False, "keep"),
    (_pod(SELECTOR, "p1"), True, "keep"),
    (_pod({}, "p1"), False, "release"),
    (_pod({}, "p1"), True, None),  # a deleting parent releases nothing
    (_pod(SELECTOR), False, "adopt"),
    (_pod(SELECTOR), True, None),  # nor adopts
    (_pod(SELECTOR, deletionTimestamp="2026-01-01T00:00:00Z"), False, None),  # a deleting orphan is not adopted
    (_pod({}), False, None),
    (_pod(SELECTOR, "someone-else"), False, None),
])
def test_a_parent_keeps_releases_or_adopts_a_candidate(candidate: KubeObject, deleting: bool, action: str | None):
    parent = cast(KubeObject, {**PARENT, "metadata": {**PARENT["metadata"], **({"deletionTimestamp": "t"} if deleting else {})}})
    before = copy.deepcopy(candidate)
    decision = claim(parent, SELECTOR, candidate)
    assert candidate == before  # the decision is a copy; the cached object is never changed
    assert (decision.action if decision else None) == action
    if decision is not None and decision.action != "keep":
        owners = [r["uid"] for r in decision.obj["metadata"]["ownerReferences"]]
        assert owners == (["p1"] if decision.action == "adopt" else [])


def test_an_unreadable_last_applied_annotation_is_an_apply_error():
    def annotated(value: str) -> KubeObject:
        return cast(KubeObject, {"kind": "Service", "metadata": {"name": "s", "annotations": {LAST_APPLIED: value}}})

    assert last_applied(cast(KubeObject, {"metadata": {"name": "s"}})) == {}
    assert last_applied(annotated('{"a":1}')) == {"a": 1}
    for broken in ("{not json", "[1]"):
        with pytest.raises(ApplyError, match="Service s"):
            last_applied(annotated(broken))


def test_an_update_that_changes_nothing_is_not_written():
    desired = cast(KubeObject, {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s", "labels": {"a": "1"}},
                                "spec": {"clusterIP": "None"}})
    observed = with_last_applied(desired)
    observed["metadata"].update(uid="u", resourceVersion="7")
    observed["spec"]["ports"] = []  # a server default the merge keeps
    assert object_to_put(observed, desired) is None
    changed = object_to_put(observed, cast(KubeObject, {**desired, "metadata": {"name": "s", "labels": {"a": "2"}}}))
    assert changed is not None and changed["metadata"]["labels"] == {"a": "2"} and changed["metadata"]["resourceVersion"] == "7"


def test_writes_are_grouped_by_group_version_and_kind_whatever_the_shuffle():
    keys = [("batch/v1", "Job", "ns", "j"), ("v1", "Service", "ns", "s"), ("v1", "Pod", "ns", "b"), ("v1", "Pod", "ns", "a"),
            ("apps/v1", "StatefulSet", "ns", "w")]
    for seed in range(5):
        assert [k[1] for k in ordered(keys, random.Random(seed))] == ["Pod", "Pod", "Service", "StatefulSet", "Job"]


def test_the_parent_cache_holds_what_the_watch_delivered_and_forgets_a_deleted_parent():
    cache = ParentCache("kubeflow.org/v1", "MXJob")
    cache.on_event(ADDED, PARENT)
    cache.on_event(ADDED, cast(KubeObject, {**_pod(SELECTOR), "metadata": {"name": "p", "uid": "p1"}}))  # not a parent
    newer = cast(KubeObject, {**PARENT, "status": {"n": 1}})
    cache.on_event(MODIFIED, newer)
    got = cache.get("p1")
    assert got == newer and got is not newer  # a copy
    cache.seed(PARENT)  # an initial list does not replace what the watch delivered
    assert cache.get("p1") == newer
    cache.on_event(DELETED, newer)
    assert cache.get("p1") is None
