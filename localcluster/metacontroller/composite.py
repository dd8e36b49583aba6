"""One CompositeController's sync, as Metacontroller's `pkg/controller/composite` makes it.

A sync reads the parent from the parent informer's cache (informer.py) and its children from the
child caches, claims them (controllerref.py), asks the customize hook for related objects once per
parent generation and again when its answer is 20 minutes old (customize.py), calls the sync hook, checks the answer, then writes: children
one object at a time (manage_children.py), and the status replaced wholesale plus
`observedGeneration`, over a fresh read. Every API request goes through the client throttle
(throttle.py) when one is given. `Emulation` is stepped by its caller (the scenario tests); the
threaded loop is workers.py. Its `stale` mode makes the caches lag on purpose: "parent" shows the
status before the last write, "children" the previous sync's children.
"""

from __future__ import annotations

import copy
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, cast

from localcluster.config import ControllerConfig
from localcluster.store import Key, ObjectStore, StoreError, controller_reference, key_of
from localcluster.types import ChildRule, KubeObject, SyncRequest

from .apply import ApplyError, with_last_applied
from .controllerref import CONTROLLER_UID, claim, parent_selector, selector_matches
from .customize import RelatedRule, related_rules, select_related
from .errors import SyncError
from .informer import ParentCache
from .manage_children import object_to_put, ordered
from .throttle import ClientThrottle

# client-go's retry.DefaultBackoff, which RetryOnConflict gives the status write: 4 tries, the pauses
# between them 10 ms growing fivefold (its 10 % jitter left out).
STATUS_BACKOFF = (0.01, 0.05, 0.25, 0.0)
# How long a customize answer is kept: v4.17.2's customize/manager.go caches it by parent uid and
# generation with a 20-minute expiry counted from when it was asked (zcache; a read does not renew it).
CUSTOMIZE_TTL_SECONDS = 20 * 60.0

Stale = Literal["parent", "children"]


@dataclass
class Event:
    """What `kubectl describe` would list for the parent."""

    time: float
    parent: str
    type: str  # Normal | Warning
    reason: str
    message: str


@dataclass
class ParentState:
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
    # The customize hook's last answer: the parent generation it was asked for, when (the clock's
    # reading) and its rules. Metacontroller keeps one per parent uid and generation for 20 minutes:
    # a status change does not ask again, a new generation or the expiry does.
    related_rules: tuple[int, float, list[RelatedRule]] | None = None


class Emulation:
    """One CompositeController's sync against a store, stepped by the caller; `hook` answers a request."""

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
        customize_ttl: float = CUSTOMIZE_TTL_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.store, self.config, self.hook = store, config, hook
        # The customize hook, called only when the controller declares one (config.customize_path).
        self.customize = customize if config.customize_path else None
        # The customize answer's lifetime and the clock it is measured on (a test's own, to expire it).
        self.customize_ttl, self.clock = customize_ttl, clock
        self.throttle = throttle
        self.stale = stale
        self._random = random.Random(order_seed)
        self.events: list[Event] = []
        self._states: dict[str, ParentState] = {}
        self.parents = ParentCache(config.parent_api_version, config.parent_kind)
        store.watch(self.parents.on_event)

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

    def _event(self, state: ParentState, type_: str, reason: str, message: str) -> None:
        self.events.append(Event(time.time(), state.key[1], type_, reason, message))

    def _api_call(self) -> None:
        """Wait for the throttle's turn of one API request."""
        if self.throttle is not None:
            self.throttle.take()

    def track(self, parent: KubeObject) -> str:
        """Start following a parent (the informer's add); its uid."""
        meta = parent["metadata"]
        self.parents.seed(parent)
        self._states.setdefault(meta["uid"], ParentState(key=(meta["namespace"], meta["name"])))
        return meta["uid"]

    def forget(self, uid: str) -> None:
        """The parent is gone (the informer's delete)."""
        self._states.pop(uid, None)

    # --- one sync --------------------------------------------------------------------------------

    def _cached_parent(self, uid: str) -> KubeObject | None:
        """The parent as the informer's cache has it (no API request), older still in stale="parent" mode."""
        state = self._states.get(uid)
        parent = self.parents.get(uid) if state is not None else None
        if parent is None or state is None:
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
        return parent_selector(self.config, parent)

    def claim_children(self, parent: KubeObject) -> dict[str, dict[str, KubeObject]]:
        """Observed children per rule: owned ones that match, plus adopted orphans; release the rest."""
        namespace = parent["metadata"]["namespace"]
        selector = self.selector(parent)
        children: dict[str, dict[str, KubeObject]] = {}
        for rule in self.config.children:
            found: dict[str, KubeObject] = {}
            # Only this parent's children and orphans are copied (claim copies): in a namespace of
            # thousands of children, copying every one of them on every sync of every parent was most of the cost.
            for candidate in self.store.list_shared(rule["apiVersion"], rule["kind"], namespace):
                decision = claim(parent, selector, candidate)
                if decision is None:
                    continue
                if decision.action == "release":
                    self._claim_write(decision.obj)
                    continue
                obj = self._claim_write(decision.obj) if decision.action == "adopt" else decision.obj
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
        """The customize hook's rules for a parent, asked once per generation and again once the answer
        is `customize_ttl` old (customize/manager.go caches it by parent uid and generation for 20
        minutes); a failed call or a bad answer fails the sync and is not kept."""
        if self.customize is None:
            return []
        state = self._states[parent["metadata"]["uid"]]
        generation = parent["metadata"].get("generation", 0)
        if state.related_rules is not None:
            asked_for, kept_since, kept = state.related_rules
            if asked_for == generation and self.clock() - kept_since <= self.customize_ttl:
                return kept
        answer = self.customize({"controller": copy.deepcopy(self.config.raw), "parent": copy.deepcopy(parent)})
        rules = related_rules(answer, parent["metadata"]["namespace"])
        state.related_rules = (generation, self.clock(), rules)  # kept from the answer on, as zcache's Set
        return rules

    def related_objects(self, parent: KubeObject) -> dict[str, dict[str, KubeObject]]:
        """The request's `related` map, from the caches."""
        namespace = parent["metadata"]["namespace"]
        return select_related(self.related_rules(parent), namespace,
                              lambda api_version, kind: self.store.list_shared(api_version, kind, namespace))

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
            if not isinstance(child, dict) or not isinstance(child.get("metadata"), dict) or not child["metadata"].get("name"):
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

    def _observe(self, uid: str, parent: KubeObject) -> dict[str, dict[str, KubeObject]]:
        """The children this sync shows the hook and applies against (the previous sync's in stale="children" mode)."""
        state = self._states[uid]
        fresh = self.claim_children(parent)
        if self.stale != "children":
            return fresh
        # The child informers lag: this sync sees (and applies against) the previous sync's view.
        observed = state.children_seen if state.children_seen is not None else fresh
        state.children_seen = fresh
        return observed

    def sync(self, uid: str) -> bool:
        """One sync: call the hook, then apply its answer (children first, then status); whether it wrote anything."""
        parent = self._cached_parent(uid)
        if parent is None:
            return False
        # A parent held by a finalizer or deleted in the foreground: without a finalize hook the sync
        # hook is still called (finalizing: false) and its status written, but children are no longer
        # managed; the garbage collector removes them (composite/controller.go in v4.17.2).
        deleting = bool(parent["metadata"].get("deletionTimestamp"))
        state = self._states[uid]
        observed_by_rule = self._observe(uid, parent)
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
            # observedGeneration is the generation of the parent this sync read (the cached one), as Metacontroller's.
            wrote = self._write_status(parent, state, {**status, "observedGeneration": parent["metadata"]["generation"]}) or wrote
        except StoreError as err:
            if err.code != 404:  # a parent deleted meanwhile: nothing to write, as Metacontroller
                errors.append(f"status update: {err}")
        if errors:
            raise SyncError("applying the sync answer failed: " + "; ".join(errors))
        return wrote

    def _write_status(self, parent: KubeObject, state: ParentState, status: dict[str, Any]) -> bool:
        """AtomicStatusUpdate: a fresh GET, then an update unless equal (over whatever is newer), tried
        4 times with client-go's DefaultBackoff (STATUS_BACKOFF) between conflicts; a conflict left after
        that is dropped, not a failed sync: the change that caused it syncs the parent again (v4.17.2,
        `pkg/dynamic/clientset/clientset.go` and `updateParentStatus`'s caller)."""
        for attempt, pause in enumerate(STATUS_BACKOFF):
            self._api_call()
            current = self.store.get(parent["apiVersion"], parent["kind"], *state.key)
            if current is None or current["metadata"]["uid"] != parent["metadata"]["uid"]:
                # Gone, or deleted and created again under the same name: this status is not the new job's.
                raise StoreError(404, "NotFound", f"{parent['kind']} {state.key[1]!r} (uid {parent['metadata']['uid']}) not found")
            if current.get("status") == status:
                return False
            self._api_call()
            try:
                written = self.store.update_status(parent["apiVersion"], parent["kind"], *state.key, status,
                                                   current=current, attempts=1)
            except StoreError as err:
                if err.code != 409:
                    raise
                if attempt + 1 < len(STATUS_BACKOFF):
                    time.sleep(pause)
                continue
            if written:
                state.status_behind, state.stale_pending = current.get("status"), True
            return written
        return False

    def _apply_children(self, parent: KubeObject, observed: dict[Key, KubeObject],
                        desired: dict[Key, tuple[ChildRule, KubeObject]]) -> tuple[bool, list[str]]:
        """Delete, then create and update, one object at a time; returns (anything written, errors)."""
        wrote, errors = False, []
        doomed = [key for key, obj in observed.items() if key not in desired and not obj["metadata"].get("deletionTimestamp")]
        for key in ordered(doomed, self._random):
            self._api_call()
            try:
                # Only the child observed: another of the same name, created meanwhile, fails the uid
                # precondition with a 409, an error of this sync (so it is retried), as Metacontroller's is.
                self.store.delete(*key, uid=observed[key]["metadata"]["uid"])
                wrote = True
            except StoreError as err:
                if err.code != 404:
                    errors.append(f"delete {key[1]} {key[3]}: {err}")
        for key in ordered(list(desired), self._random):
            rule, child = desired[key]
            try:
                if key not in observed:
                    wrote = self._create(parent, child) or wrote
                else:
                    wrote = self._update(rule, observed[key], child) or wrote
            except (StoreError, ApplyError) as err:
                errors.append(f"{key[1]} {key[3]}: {err}")
        return wrote, errors

    def _create(self, parent: KubeObject, child: KubeObject) -> bool:
        child = with_last_applied(child)
        meta = child["metadata"]
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
        merged = object_to_put(observed, desired)  # first, as Metacontroller: an unreadable annotation fails the sync
        if merged is None or observed["metadata"].get("deletionTimestamp"):
            return False
        method = rule["updateStrategy"]
        if method == "OnDelete":
            return False
        self._api_call()
        if method == "Recreate":
            self.store.delete(*key_of(observed))  # created again by a later sync, once it is gone
            return True
        try:
            self.store.update(merged)
        except StoreError as err:
            if err.code in (404, 409):
                return False  # gone or changed meanwhile: the next sync sees it (swallowed, as InPlace does)
            raise
        return True
