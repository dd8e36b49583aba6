"""Metacontroller emulation: one CompositeController's sync (claim, request, hook, apply, status) and its loop.

The one emulation of Metacontroller v4.17 in this project; the local cluster runs it threaded over
HTTP (`MetacontrollerStandIn`) and the scenario tests step it by hand (`Emulation`, through
tests/helpers/mcsim.py and tests/helpers/chainersim.py), both driven by the shipped CompositeControllers. What it
does as the real one does (docs/localcluster.md has the table): the request shape; claiming
(adopt/release) by the selector; children written one object at a time, deletes first, then
grouped and sorted by group, version and kind, in no defined order within a kind, through a client
throttled like client-go's (5 requests/s, burst 10); Go's three-way merge of apply.go, duplicate
list keys included; status replaced wholesale plus observedGeneration, written over a fresh read;
retries after 5 ms·2ⁿ capped at 1,000 s; `resyncPeriodSeconds` as a periodic tick over every
parent; `resyncAfterSeconds` enqueued before the answer is applied; the customize hook asked once
per parent generation, its related objects sent in `related`, and a change of one syncing its
parent at once. Stale reads, as from real
informer caches, are a mode (`stale`): the hook sees a parent one status write behind its
children, or children one sync behind the parent. On top it watches for hot loops, which real
Metacontroller does not: a job whose status or children never settle is reported and no longer
synced, so a test or `run` ends instead of spinning.
"""

from __future__ import annotations

import copy
import http.client
import json
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, cast
from urllib.parse import urlsplit

from .config import KNOWN_KINDS, ControllerConfig
from .delayqueue import DelayQueue
from .store import ADDED, DELETED, Key, ObjectStore, StoreError, controller_reference, controller_uid, json_copy, key_of
from .types import ChildRule, KubeObject, SyncRequest

LAST_APPLIED = "metacontroller.k8s.io/last-applied-configuration"
CONTROLLER_UID = "controller-uid"
# apply.go's knownMergeKeys: a list whose items all carry one of these is merged as a map keyed by it.
LIST_MERGE_KEYS = ("containerPort", "port", "mountPath", "name", "uid", "ip", "path")
# manage_children.go: system fields taken back from the observed object after the merge.
SYSTEM_METADATA = ("selfLink", "uid", "resourceVersion", "generation", "creationTimestamp", "deletionTimestamp",
                   "deletionGracePeriodSeconds", "managedFields")
# Pod fields Kubernetes lets an update change; any other spec change is rejected with 422.
MUTABLE_POD_FIELDS = ("activeDeadlineSeconds", "tolerations", "terminationGracePeriodSeconds")
# The controller workqueue's rate limiter (DefaultTypedControllerRateLimiter): 5 ms doubling, capped at 1,000 s.
RETRY_BACKOFF = (0.005, 1000.0)
# Metacontroller's --client-go-qps and --client-go-burst defaults, and its --workers.
CLIENT_QPS, CLIENT_BURST, WORKERS = 5.0, 10, 5
Stale = Literal["parent", "children"]


class SyncError(Exception):
    """A failed sync: the hook call failed or its answer could not be applied."""


@dataclass
class Event:
    """What `kubectl describe` would list for the parent."""

    time: float
    parent: str
    type: str  # Normal | Warning
    reason: str
    message: str


@dataclass
class _ParentState:
    """Bookkeeping for one parent; none of it is visible to the hook."""

    key: tuple[str, str]
    failures: int = 0
    writing_syncs: list[float] = field(default_factory=list)  # times of consecutive syncs that wrote something
    hot_loop: str | None = None
    last_error: str | None = None
    status_behind: dict[str, Any] | None = None  # stale="parent": the status before the last write, not yet seen by the cache
    stale_pending: bool = False
    children_seen: dict[str, dict[str, KubeObject]] | None = None  # stale="children": the previous sync's view
    syncs: int = 0  # completed syncs, for tests that count what a resync costs
    # The customize hook's last answer and the parent generation it was asked for (Metacontroller
    # keeps one per parent uid and generation: a status change does not ask again).
    related_rules: tuple[int, list[RelatedRule]] | None = None


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


def selector_matches(labels: dict[str, str] | None, selector: dict[str, str]) -> bool:
    """matchLabels semantics."""
    labels = labels or {}
    return all(labels.get(k) == v for k, v in selector.items())


# --- Go's three-way merge (pkg/dynamic/apply/apply.go) ---------------------------------------------


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


def write_order(api_version: str, kind: str) -> tuple[str, str, str]:
    """Metacontroller's order of child groups: by API group (core first), version, then kind."""
    group, _, version = api_version.rpartition("/")
    return (group, version, kind)


class ClientThrottle:
    """client-go's token bucket: `burst` requests at once, then `qps` a second; shared by every controller."""

    def __init__(self, qps: float = CLIENT_QPS, burst: int = CLIENT_BURST):
        if qps <= 0 or burst < 1:
            raise ValueError("the client rate needs qps > 0 and burst >= 1")
        self.qps, self.burst = qps, burst
        self._tokens, self._last = float(burst), time.monotonic()
        self._lock = threading.Lock()

    def take(self) -> None:
        """Wait for one request's turn (reserved in order, slept outside the lock)."""
        with self._lock:
            now = time.monotonic()
            self._tokens = min(float(self.burst), self._tokens + (now - self._last) * self.qps)
            self._last = now
            self._tokens -= 1.0
            wait = -self._tokens / self.qps if self._tokens < 0 else 0.0
        if wait > 0:
            time.sleep(wait)


class Emulation:
    """One CompositeController's sync against the store, stepped by the caller; `hook` answers a request."""

    hook_serialises = False  # True when `hook` only reads the request (sends it as JSON)

    def __init__(
        self,
        store: ObjectStore,
        config: ControllerConfig,
        hook: Callable[[SyncRequest], dict[str, Any]],
        *,
        throttle: ClientThrottle | None = None,
        stale: Stale | None = None,
        order_seed: int | None = None,
        customize: Callable[[dict[str, Any]], Any] | None = None,
    ):
        self.store, self.config, self.hook = store, config, hook
        # The customize hook, called only when the controller declares one (config.customize_path).
        self.customize = customize if config.customize_path else None
        self.throttle = throttle
        self.stale = stale
        self._random = random.Random(order_seed)
        self.events: list[Event] = []
        self._states: dict[str, _ParentState] = {}

    # --- reads for the CLI and tests -------------------------------------------------------------

    def hot_loop(self, uid: str) -> str | None:
        """The hot-loop report for a parent, if one was raised."""
        state = self._states.get(uid)
        return state.hot_loop if state else None

    def syncs(self, uid: str) -> int:
        """How many syncs of a parent have completed."""
        state = self._states.get(uid)
        return state.syncs if state else 0

    def last_error(self, uid: str) -> str | None:
        """The last sync error of a parent (cleared by a successful sync)."""
        state = self._states.get(uid)
        return state.last_error if state else None

    def _event(self, state: _ParentState, type_: str, reason: str, message: str) -> None:
        self.events.append(Event(time.time(), state.key[1], type_, reason, message))

    def _api_call(self) -> None:
        if self.throttle is not None:
            self.throttle.take()

    def track(self, parent: KubeObject) -> str:
        """Start following a parent (the informer's add); its uid."""
        meta = parent["metadata"]
        self._states.setdefault(meta["uid"], _ParentState(key=(meta["namespace"], meta["name"])))
        return meta["uid"]

    def forget(self, uid: str) -> None:
        """The parent is gone (the informer's delete)."""
        self._states.pop(uid, None)

    # --- one sync --------------------------------------------------------------------------------

    def _find_parent(self, uid: str) -> KubeObject | None:
        state = self._states.get(uid)
        if state is None:
            return None
        parent = self.store.get(self.config.parent_api_version, self.config.parent_kind, *state.key)
        if parent is None or parent["metadata"]["uid"] != uid:
            return None
        if self.stale == "parent" and state.stale_pending:
            # The parent informer has not delivered our last status write yet: the older status.
            state.stale_pending = False
            if state.status_behind is None:
                parent.pop("status", None)
            else:
                parent["status"] = copy.deepcopy(state.status_behind)
        return parent

    def selector(self, parent: KubeObject) -> dict[str, str]:
        """The parent's label selector (generated, or spec.selector.matchLabels)."""
        if self.config.generate_selector:
            return {CONTROLLER_UID: parent["metadata"]["uid"]}
        return dict(parent.get("spec", {}).get("selector", {}).get("matchLabels", {}))

    def claim_children(self, parent: KubeObject) -> dict[str, dict[str, KubeObject]]:
        """Observed children per rule: owned ones that match, plus adopted orphans; release the rest."""
        uid, namespace = parent["metadata"]["uid"], parent["metadata"]["namespace"]
        selector = self.selector(parent)
        children: dict[str, dict[str, KubeObject]] = {}
        for rule in self.config.children:
            found: dict[str, KubeObject] = {}
            # Only this parent's children and orphans are copied: in a namespace of thousands of
            # children, copying every one of them on every sync of every parent was most of the cost.
            for shared in self.store.list_shared(rule["apiVersion"], rule["kind"], namespace):
                owner = controller_uid(shared)
                if owner is not None and owner != uid:
                    continue  # another controller's
                obj = json_copy(shared)
                meta = obj["metadata"]
                matches = selector_matches(meta.get("labels"), selector)
                if owner is not None and not matches:
                    if not parent["metadata"].get("deletionTimestamp"):  # release: drop our ownerRef, keep the object
                        meta["ownerReferences"] = [r for r in meta.get("ownerReferences", []) if r.get("uid") != uid]
                        self._claim_write(obj)
                    continue
                if owner is None:
                    if not matches or meta.get("deletionTimestamp") or parent["metadata"].get("deletionTimestamp"):
                        continue  # a deleting parent adopts nothing (CanAdopt refuses)
                    meta["ownerReferences"] = meta.get("ownerReferences", []) + [controller_reference(parent)]  # adopt
                    obj = self._claim_write(obj)
                found[obj["metadata"]["name"]] = obj
            children[self.config.child_key(rule)] = found
        return children

    def _claim_write(self, obj: KubeObject) -> KubeObject:
        """Adopt or release; a failure aborts the sync before the hook is called, as ClaimChildren does."""
        self._api_call()
        try:
            return self.store.update(obj)
        except StoreError as err:
            raise SyncError(f"claiming {obj['kind']} {obj['metadata']['name']}: {err}") from err

    def build_request(self, parent: KubeObject, children: dict[str, dict[str, KubeObject]],
                      related: dict[str, dict[str, KubeObject]] | None = None) -> SyncRequest:
        """The sync hook request body (hook version v1)."""
        return SyncRequest(controller=copy.deepcopy(self.config.raw), parent=parent, children=children,
                           related=related if related is not None else {}, finalizing=False)

    # --- related objects (the customize hook) ----------------------------------------------------

    def related_rules(self, parent: KubeObject) -> list[RelatedRule]:
        """The customize hook's rules for a parent, asked once per generation (customize/manager.go
        caches the answer by parent uid and generation); a failed call or a bad answer fails the sync."""
        if self.customize is None:
            return []
        state = self._states[parent["metadata"]["uid"]]
        generation = parent["metadata"].get("generation", 0)
        if state.related_rules is not None and state.related_rules[0] == generation:
            return state.related_rules[1]
        answer = self.customize({"controller": copy.deepcopy(self.config.raw), "parent": copy.deepcopy(parent)})
        if not isinstance(answer, dict):
            raise SyncError(f"customize hook answer is a JSON {type(answer).__name__}, not an object")
        rules = [self._related_rule(rule, parent["metadata"]["namespace"]) for rule in answer.get("relatedResources") or []]
        state.related_rules = (generation, rules)
        return rules

    @staticmethod
    def _related_rule(rule: Any, namespace: str) -> RelatedRule:
        """One relatedResources entry; what the emulation cannot select with fails the sync, as an
        invalid rule does in Metacontroller (determineSelectionType)."""
        if not isinstance(rule, dict):
            raise SyncError(f"customize hook answer: a related rule is not an object: {str(rule)[:200]}")
        kind = KNOWN_KINDS.get((rule.get("apiVersion", ""), rule.get("resource", "")))
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

    def related_objects(self, parent: KubeObject) -> dict[str, dict[str, KubeObject]]:
        """The request's `related` map: per rule, its type's key (`Pod.v1`, present even when nothing
        matches), then each matching object in the parent's namespace by name."""
        namespace = parent["metadata"]["namespace"]
        related: dict[str, dict[str, KubeObject]] = {}
        for rule in self.related_rules(parent):
            group = related.setdefault(f"{rule.kind}.{rule.api_version}", {})
            for obj in self.store.list_shared(rule.api_version, rule.kind, namespace):
                if rule.matches(obj, namespace):
                    group[obj["metadata"]["name"]] = json_copy(obj)
        return related

    def _desired(self, parent: KubeObject, answer: dict[str, Any]) -> dict[Key, tuple[ChildRule, KubeObject]]:
        """Normalised desired children by key; a bad one fails the whole sync before any change."""
        children = answer.get("children")
        if children is None:
            children = []  # as Metacontroller: a missing or null list means "no children"
        if not isinstance(children, list):
            raise SyncError("sync hook answer: children is not a list")
        selector = self.selector(parent)
        namespace = parent["metadata"]["namespace"]
        desired: dict[Key, tuple[ChildRule, KubeObject]] = {}
        for child in children:
            if not isinstance(child, dict) or not child.get("metadata", {}).get("name"):
                raise SyncError(f"sync hook answer: a child has no metadata.name: {str(child)[:200]}")
            rule = self.config.rule_for(child.get("apiVersion", ""), child.get("kind", ""))
            if rule is None:
                raise SyncError(f"sync hook answer: {child.get('kind')}.{child.get('apiVersion')} is not a declared child resource")
            child = copy.deepcopy(child)
            meta = child["metadata"]
            if meta.get("namespace") not in (None, "", namespace):
                raise SyncError(f"sync hook answer: child {meta['name']} is in namespace {meta['namespace']}, not the parent's {namespace}")
            meta["namespace"] = namespace
            if self.config.generate_selector:
                meta.setdefault("labels", {}).setdefault(CONTROLLER_UID, parent["metadata"]["uid"])
            if not selector_matches(meta.get("labels"), selector):
                raise SyncError(
                    f"sync hook answer: {child['kind']} {meta['name']} has labels {meta.get('labels')} that do not match "
                    f"the parent's selector {selector}; Metacontroller refuses to manage it"
                )
            desired[key_of(cast(KubeObject, child))] = (rule, cast(KubeObject, child))  # a repeated key: the last one wins
        return desired

    def on_resync_after(self, uid: str, seconds: float) -> None:
        """The answer asked for another sync after `seconds` (the loop enqueues it; a stepped test ignores it)."""

    def sync(self, uid: str) -> bool:
        """One sync: call the hook, then apply its answer (children first, then status); whether it wrote anything."""
        parent = self._find_parent(uid)
        if parent is None:
            return False
        # A parent held by a finalizer or deleted in the foreground: without a finalize hook the sync
        # hook is still called (finalizing: false) and its status written, but children are no longer
        # managed; the garbage collector removes them (composite/controller.go in v4.17.2).
        deleting = bool(parent["metadata"].get("deletionTimestamp"))
        state = self._states[uid]
        fresh = self.claim_children(parent)
        observed_by_rule = fresh
        if self.stale == "children":
            # The child informers lag: this sync sees (and applies against) the previous sync's view.
            observed_by_rule = state.children_seen if state.children_seen is not None else fresh
            state.children_seen = fresh
        related = self.related_objects(parent)
        # A hook that serialises the request (over HTTP) cannot change it: no copy needed.
        request = self.build_request(copy.deepcopy(parent),
                                     observed_by_rule if self.hook_serialises else copy.deepcopy(observed_by_rule),
                                     related)
        answer = self.hook(request)
        if not isinstance(answer, dict):
            raise SyncError(f"sync hook answer is a JSON {type(answer).__name__}, not an object")
        desired = self._desired(parent, answer)
        status = answer.get("status")
        if status is None:
            status = {}
        if not isinstance(status, dict):
            raise SyncError("sync hook answer: status is not an object")
        resync = answer.get("resyncAfterSeconds")
        if resync is not None and (not isinstance(resync, (int, float)) or isinstance(resync, bool)):
            raise SyncError("sync hook answer: resyncAfterSeconds is not a number")
        if resync is not None and resync > 0:
            self.on_resync_after(uid, float(resync))  # before the apply, so it survives a failed one

        observed = {key_of(obj): obj for objs in observed_by_rule.values() for obj in objs.values()}
        wrote, errors = (False, []) if deleting else self._apply_children(parent, observed, desired)
        try:
            wrote = self._write_status(parent, state, {**status, "observedGeneration": parent["metadata"]["generation"]}) or wrote
        except StoreError as err:
            if err.code != 404:  # a parent deleted meanwhile: nothing to write, as Metacontroller
                errors.append(f"status update: {err}")
        if errors:
            raise SyncError("applying the sync answer failed: " + "; ".join(errors))
        return wrote

    def _write_status(self, parent: KubeObject, state: _ParentState, status: dict[str, Any]) -> bool:
        """AtomicStatusUpdate: a fresh GET, then an update unless equal (over whatever is newer)."""
        self._api_call()
        current = self.store.get(parent["apiVersion"], parent["kind"], *state.key)
        if current is None or current["metadata"]["uid"] != parent["metadata"]["uid"]:
            # Gone, or deleted and created again under the same name: this status is not the new job's.
            raise StoreError(404, "NotFound", f"{parent['kind']} {state.key[1]!r} (uid {parent['metadata']['uid']}) not found")
        if current.get("status") == status:
            return False
        self._api_call()
        written = self.store.update_status(parent["apiVersion"], parent["kind"], *state.key, status)
        if written:
            state.status_behind, state.stale_pending = current.get("status"), True
        return written

    def _ordered(self, keys: list[Key]) -> list[Key]:
        """Grouped and sorted by group, version and kind; in no defined order within a kind."""
        shuffled = list(keys)
        self._random.shuffle(shuffled)
        return sorted(shuffled, key=lambda key: write_order(key[0], key[1]))  # sorted() is stable

    def _apply_children(self, parent: KubeObject, observed: dict[Key, KubeObject],
                        desired: dict[Key, tuple[ChildRule, KubeObject]]) -> tuple[bool, list[str]]:
        """Delete, then create and update, one object at a time; returns (anything written, errors)."""
        wrote, errors = False, []
        doomed = [key for key, obj in observed.items() if key not in desired and not obj["metadata"].get("deletionTimestamp")]
        for key in self._ordered(doomed):
            self._api_call()
            try:
                current = self.store.get(*key)
                if current is not None and current["metadata"]["uid"] == observed[key]["metadata"]["uid"]:  # Preconditions{UID}
                    self.store.delete(*key)
                    wrote = True
            except StoreError as err:
                if err.code != 404:
                    errors.append(f"delete {key[1]} {key[3]}: {err}")
        for key in self._ordered(list(desired)):
            rule, child = desired[key]
            try:
                if key not in observed:
                    wrote = self._create(parent, child) or wrote
                else:
                    wrote = self._update(rule, observed[key], child) or wrote
            except StoreError as err:
                errors.append(f"{key[1]} {key[3]}: {err}")
        return wrote, errors

    def _create(self, parent: KubeObject, child: KubeObject) -> bool:
        meta = child["metadata"]
        annotations = dict(meta.get("annotations") or {})
        annotations[LAST_APPLIED] = last_applied_json(child)
        meta["annotations"] = annotations
        refs = meta.get("ownerReferences") or []
        if not any(ref.get("uid") == parent["metadata"]["uid"] for ref in refs):
            meta["ownerReferences"] = refs + [controller_reference(parent)]
        self._api_call()
        try:
            self.store.create(child)
        except StoreError as err:
            if err.code != 409:
                raise
            return False  # still there (a stale view, or terminating for Recreate): AlreadyExists is swallowed
        return True

    def _update(self, rule: ChildRule, observed: KubeObject, desired: KubeObject) -> bool:
        if observed["metadata"].get("deletionTimestamp"):
            return False
        last_raw = observed["metadata"].get("annotations", {}).get(LAST_APPLIED)
        last = json.loads(last_raw) if last_raw else {}
        desired_annotated = json_copy(desired)
        desired_annotated["metadata"].setdefault("annotations", {})[LAST_APPLIED] = last_applied_json(desired)
        merged = three_way_merge(observed, last, desired_annotated)
        observed_meta: dict[str, Any] = dict(observed["metadata"])
        merged_meta: dict[str, Any] = merged["metadata"]
        for field_name in SYSTEM_METADATA:
            if field_name in observed_meta:
                merged_meta[field_name] = copy.deepcopy(observed_meta[field_name])
            else:
                merged_meta.pop(field_name, None)
        if "status" in observed:
            merged["status"] = copy.deepcopy(observed["status"])
        if merged == observed:
            return False
        method = rule["updateStrategy"]
        if method == "OnDelete":
            return False
        self._api_call()
        if method == "Recreate":
            self.store.delete(*key_of(observed))  # created again by a later sync, once it is gone
            return True
        if observed["kind"] == "Pod" and observed["apiVersion"] == "v1":
            _check_pod_update(observed, merged)
        try:
            self.store.update(merged)
        except StoreError as err:
            if err.code in (404, 409):
                return False  # gone or changed meanwhile: the next sync sees it (swallowed, as InPlace does)
            raise
        return True


class MetacontrollerStandIn(Emulation):
    """The emulation run as Metacontroller runs it: watch-driven workers calling a hook over HTTP."""

    hook_serialises = True

    def __init__(
        self,
        store: ObjectStore,
        config: ControllerConfig,
        hook_base_url: str,
        *,
        workers: int = WORKERS,
        backoff: tuple[float, float] = RETRY_BACKOFF,
        time_scale: float = 1.0,
        throttle: ClientThrottle | None = None,
        stale: Stale | None = None,
        hot_loop_syncs: int = 25,
        hot_loop_window: float = 10.0,
        service_dns: bool = False,
    ):
        super().__init__(store, config, self.call_hook, throttle=throttle, stale=stale, customize=self.call_customize)
        self.hook_base_url = hook_base_url.rstrip("/")
        # False: every hook is called at its path on hook_base_url, whatever host its URL names. True: at
        # the URL the CompositeController names, whose host must resolve as cluster DNS resolves it for
        # Metacontroller (a Service of the store, on the URL's port), the hooks server standing in for
        # that Service's endpoints; so a URL naming the wrong namespace fails, as in a cluster.
        self.service_dns = service_dns
        # A faster clock for tests: every delay of Metacontroller's own (retries, resync ticks) divided by it.
        self.backoff, self.time_scale = backoff, time_scale
        self.hot_loop_syncs, self.hot_loop_window = hot_loop_syncs, hot_loop_window
        self._queue: DelayQueue[str] = DelayQueue()
        self.hook_seconds: list[float] = []  # every hook call's duration (the HTTP exchange), for benchmarks
        self.sync_seconds: list[float] = []  # every successful sync's duration (reads, hook call, writes)
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._work, name=f"metacontroller-{i}", daemon=True) for i in range(workers)]
        if config.resync_period_seconds:
            self._threads.append(threading.Thread(target=self._tick, name="metacontroller-resync", daemon=True))

    # --- lifecycle -------------------------------------------------------------------------------

    def start(self) -> None:
        """Watch the store and start the workers."""
        self.store.watch(self._on_event)
        for parent in self.store.list(self.config.parent_api_version, self.config.parent_kind):
            self._on_event(ADDED, parent)
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        """Stop the workers (an in-flight hook call finishes first)."""
        self._stop.set()
        self._queue.stop()
        for thread in self._threads:
            if thread.is_alive():
                thread.join(timeout=self.config.hook_timeout_seconds + 2)

    # --- queue -----------------------------------------------------------------------------------

    def _on_event(self, event: str, obj: KubeObject) -> None:
        meta = obj.get("metadata", {})
        if obj.get("apiVersion") == self.config.parent_api_version and obj.get("kind") == self.config.parent_kind:
            if event == DELETED:
                self.forget(meta["uid"])
                return
            self.enqueue(self.track(obj))
            return
        # A related object changed: every parent whose rules select it is synced at once
        # (customize/manager.go: onRelatedAdd/Update/Delete enqueue without delay).
        for uid in self._related_parents(obj):
            self.enqueue(uid)
        if self.config.rule_for(obj.get("apiVersion", ""), obj.get("kind", "")) is None:
            return
        owner = controller_uid(obj)
        owners = {owner} if owner else set()
        if self.config.generate_selector and not owners:
            # An orphan: whoever's selector it matches may adopt it.
            owners = {meta.get("labels", {}).get(CONTROLLER_UID, "")}
        for uid in owners:
            if uid in self._states:
                self.enqueue(uid)

    def _related_parents(self, obj: KubeObject) -> list[str]:
        """The tracked parents whose last customize answer selects this object."""
        namespace = obj.get("metadata", {}).get("namespace")
        return [uid for uid, state in list(self._states.items())
                if state.related_rules is not None and state.key[0] == namespace
                and any(rule.matches(obj, state.key[0]) for rule in state.related_rules[1])]

    def enqueue(self, uid: str, delay: float = 0.0) -> None:
        """Sync a parent after `delay` seconds (the earliest request wins)."""
        self._queue.add(uid, delay)

    def on_resync_after(self, uid: str, seconds: float) -> None:
        self.enqueue(uid, seconds)

    def _tick(self) -> None:
        """resyncPeriodSeconds: every period, every parent is synced again (the informer's resync)."""
        period = float(self.config.resync_period_seconds or 0) / self.time_scale
        while not self._stop.wait(period):
            for uid in list(self._states):
                self.enqueue(uid)

    def _work(self) -> None:
        while (uid := self._queue.get()) is not None:
            try:
                self._handle(uid)
            finally:
                self._queue.done(uid)

    def retry_delay(self, failures: int) -> float:
        """The rate limiter's delay before retry number `failures` (1 for the first), on this clock."""
        first, cap = self.backoff
        return min(cap, first * 2.0 ** min(failures - 1, 64)) / self.time_scale

    def _handle(self, uid: str) -> None:
        state = self._states.get(uid)
        if state is None or state.hot_loop:
            return
        start = time.monotonic()
        try:
            wrote = self.sync(uid)
        except SyncError as err:
            state.failures += 1
            state.last_error = str(err)
            state.writing_syncs.clear()
            self._event(state, "Warning", "SyncError", str(err))
            self.enqueue(uid, self.retry_delay(state.failures))
            return
        state.failures = 0
        state.last_error = None
        self.sync_seconds.append(time.monotonic() - start)
        state.syncs += 1
        now = time.monotonic()
        if wrote:
            state.writing_syncs = [t for t in state.writing_syncs if now - t <= self.hot_loop_window] + [now]
            if len(state.writing_syncs) >= self.hot_loop_syncs:
                state.hot_loop = (
                    f"hot loop: {len(state.writing_syncs)} syncs in a row within {self.hot_loop_window:g}s each changed "
                    "the status or the children; the hook's answer is not a fixed point"
                )
                self._event(state, "Warning", "HotLoop", state.hot_loop)
        else:
            state.writing_syncs.clear()

    # --- the hook over HTTP ----------------------------------------------------------------------

    def call_hook(self, request: SyncRequest) -> dict[str, Any]:
        """POST the sync request; any non-200, timeout or malformed body is a SyncError."""
        return self._post(self._endpoint(self.config.hook_url, self.config.hook_path), request, "sync")

    def call_customize(self, request: dict[str, Any]) -> dict[str, Any]:
        """POST the customize request ({controller, parent}); failures as for the sync hook."""
        return self._post(self._endpoint(self.config.customize_url, self.config.customize_path or "/"), request, "customize")

    def _endpoint(self, url: str | None, path: str) -> str:
        """Where a hook call goes on this machine (see service_dns); a URL whose host names no Service is a SyncError."""
        if not self.service_dns or not url:
            return self.hook_base_url + path
        named = urlsplit(url)
        port = named.port or (443 if named.scheme == "https" else 80)
        service = resolve_service(self.store, named.hostname or "")
        if service is None:
            # What Metacontroller's HTTP client reports for a name cluster DNS does not know.
            raise SyncError(f'Post "{url}": dial tcp: lookup {named.hostname}: no such host')
        if port not in [p.get("port") for p in service.get("spec", {}).get("ports", [])]:
            raise SyncError(f'Post "{url}": dial tcp {named.hostname}:{port}: connect: connection refused')
        return self.hook_base_url + (named.path or "/")

    def _post(self, target: str, request: Any, hook: str) -> dict[str, Any]:
        url = urlsplit(target)
        body = json.dumps(request).encode()
        conn = http.client.HTTPConnection(url.hostname or "127.0.0.1", url.port or 80, timeout=self.config.hook_timeout_seconds)
        start = time.monotonic()
        try:
            conn.request("POST", url.path or "/", body=body, headers={"Content-Type": "application/json"})
            response = conn.getresponse()
            payload = response.read()
        except (OSError, http.client.HTTPException) as err:
            raise SyncError(f"{hook} hook call failed: {err.__class__.__name__}: {err}") from err
        finally:
            conn.close()
            if hook == "sync":
                # What Metacontroller's hook timeout counts: the exchange, not the encoding around it.
                self.hook_seconds.append(time.monotonic() - start)
        if response.status != 200:
            snippet = payload[:300].decode(errors="replace")
            raise SyncError(f"{hook} hook answered HTTP {response.status}: {snippet}")
        try:
            answer = json.loads(payload)
        except ValueError as err:
            raise SyncError(f"{hook} hook answer is not JSON: {err}") from err
        if not isinstance(answer, dict):
            raise SyncError(f"{hook} hook answer is a JSON {type(answer).__name__}, not an object")
        return answer


# The suffixes cluster DNS accepts after `<service>.<namespace>` (cluster domain cluster.local).
SERVICE_DNS_SUFFIXES = (".svc.cluster.local", ".svc", "")


def resolve_service(store: ObjectStore, host: str) -> KubeObject | None:
    """The Service a host name resolves to in cluster DNS (`<service>.<namespace>[.svc[.cluster.local]]`),
    or None when it names none that exists."""
    for suffix in SERVICE_DNS_SUFFIXES:
        if host.endswith(suffix):
            name, dot, namespace = host[: len(host) - len(suffix)].partition(".")
            if dot and name and namespace and "." not in namespace:
                return store.get("v1", "Service", namespace, name)
    return None


def _check_pod_update(old: KubeObject, new: KubeObject) -> None:
    """The API server's Pod update validation: only images and a few fields may change (else 422)."""

    def comparable(pod: KubeObject) -> dict[str, Any]:
        spec = copy.deepcopy(pod.get("spec", {}))
        for name in MUTABLE_POD_FIELDS:
            spec.pop(name, None)
        for container in spec.get("containers", []) + spec.get("initContainers", []):
            container.pop("image", None)
        return spec

    if comparable(old) != comparable(new):
        raise StoreError(422, "Invalid", f"Pod {old['metadata']['name']}: pod updates may not change fields other than "
                                         "image, activeDeadlineSeconds, tolerations")
