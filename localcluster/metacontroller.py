"""The Metacontroller stand-in: a CompositeController's sync loop over the in-memory store.

It follows Metacontroller v4.17's sync-hook contract (docs/localcluster.md): the exact request shape, claim
(adopt/release) by the selector, delete-first apply with the last-applied annotation and a
three-way merge per update strategy, status replaced wholesale plus observedGeneration, resync on
every parent or child change (its own status writes included) and on resyncAfterSeconds, no side
effects and exponential backoff on any failed sync. On top it watches for hot loops, which real
Metacontroller does not: a job whose status or children never settle is reported and no longer
synced, so a test or `run` ends instead of spinning.
"""

from __future__ import annotations

import copy
import heapq
import http.client
import json
import threading
import time
from dataclasses import dataclass, field
from typing import Any, cast
from urllib.parse import urlsplit

from .config import ControllerConfig
from .store import ADDED, DELETED, Store, StoreError, key_of
from .types import ChildRule, KubeObject, OwnerReference, SyncRequest

LAST_APPLIED = "metacontroller.k8s.io/last-applied-configuration"
CONTROLLER_UID = "controller-uid"
# List items are merged by the first of these keys that every item (in all three versions) has.
LIST_MERGE_KEYS = ("containerPort", "port", "mountPath", "name", "uid", "ip", "path")
SYSTEM_METADATA = ("uid", "resourceVersion", "generation", "creationTimestamp", "deletionTimestamp",
                   "deletionGracePeriodSeconds", "managedFields", "ownerReferences")
# Pod fields Kubernetes lets an update change; any other spec change is rejected with 422.
MUTABLE_POD_FIELDS = ("activeDeadlineSeconds", "tolerations", "terminationGracePeriodSeconds")


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
    syncs: int = 0
    writing_syncs: list[float] = field(default_factory=list)  # times of consecutive syncs that wrote something
    hot_loop: str | None = None
    last_error: str | None = None


@dataclass
class SyncOutcome:
    """What one sync did."""

    wrote: bool
    resync_after: float | None


def selector_matches(labels: dict[str, str] | None, selector: dict[str, str]) -> bool:
    """matchLabels semantics."""
    labels = labels or {}
    return all(labels.get(k) == v for k, v in selector.items())


def three_way_merge(observed: Any, last_applied: Any, desired: Any) -> Any:
    """merge(observed, lastApplied, desired) the way Metacontroller's apply does it."""
    if isinstance(desired, dict) and isinstance(observed, dict):
        last_map = last_applied if isinstance(last_applied, dict) else {}
        result = copy.deepcopy(observed)
        for key in last_map:
            if key not in desired:
                result.pop(key, None)
        for key, value in desired.items():
            result[key] = three_way_merge(observed.get(key), last_map.get(key), value)
        return result
    if isinstance(desired, list) and isinstance(observed, list):
        last = last_applied if isinstance(last_applied, list) else []
        merge_key = _list_merge_key(observed, last, desired)
        if merge_key is None:
            return copy.deepcopy(desired)
        wanted = {item[merge_key]: item for item in desired}
        previous = {item[merge_key]: item for item in last}
        merged: list[Any] = []
        for item in observed:
            k = item[merge_key]
            if k in wanted:
                merged.append(three_way_merge(item, previous.get(k), wanted.pop(k)))
            elif k not in previous:
                merged.append(copy.deepcopy(item))  # someone else's entry: keep it
        merged.extend(copy.deepcopy(item) for item in desired if item[merge_key] in wanted)
        return merged
    return copy.deepcopy(desired)


def _list_merge_key(*lists: list) -> str | None:
    items = [item for lst in lists for item in lst]
    if not items or not all(isinstance(item, dict) for item in items):
        return None
    for key in LIST_MERGE_KEYS:
        if all(key in item for item in items):
            return key
    return None


def last_applied_json(obj: KubeObject) -> str:
    """The annotation value: the desired object as Go's json.Marshal writes it (compact, sorted keys)."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"))


class MetacontrollerStandIn:
    """Runs the sync loop of one CompositeController against a hook over HTTP."""

    def __init__(
        self,
        store: Store,
        config: ControllerConfig,
        hook_base_url: str,
        *,
        workers: int = 4,
        backoff: tuple[float, float] = (0.05, 5.0),
        hot_loop_syncs: int = 25,
        hot_loop_window: float = 10.0,
    ):
        self.store, self.config = store, config
        self.hook_base_url = hook_base_url.rstrip("/")
        self.backoff = backoff
        self.hot_loop_syncs, self.hot_loop_window = hot_loop_syncs, hot_loop_window
        self.events: list[Event] = []
        self.requests: list[SyncRequest] = []  # every request sent, when record_requests is set
        self.record_requests = False
        self._states: dict[str, _ParentState] = {}
        self._queue: list[tuple[float, str]] = []
        self._due: dict[str, float] = {}
        self._processing: set[str] = set()
        self._dirty: set[str] = set()
        self._cond = threading.Condition()
        self._stop = False
        self._threads = [threading.Thread(target=self._work, name=f"metacontroller-{i}", daemon=True) for i in range(workers)]

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
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        for thread in self._threads:
            thread.join(timeout=self.config.hook_timeout_seconds + 2)

    # --- reads for the CLI and tests -------------------------------------------------------------

    def hot_loop(self, uid: str) -> str | None:
        """The hot-loop report for a parent, if one was raised."""
        state = self._states.get(uid)
        return state.hot_loop if state else None

    def last_error(self, uid: str) -> str | None:
        """The last sync error of a parent (cleared by a successful sync)."""
        state = self._states.get(uid)
        return state.last_error if state else None

    def sync_count(self, uid: str) -> int:
        """How many hook calls were made for a parent."""
        state = self._states.get(uid)
        return state.syncs if state else 0

    def events_for(self, name: str) -> list[Event]:
        """Events about one parent, oldest first."""
        return [e for e in list(self.events) if e.parent == name]

    # --- queue -----------------------------------------------------------------------------------

    def _on_event(self, event: str, obj: KubeObject) -> None:
        meta = obj.get("metadata", {})
        if obj.get("apiVersion") == self.config.parent_api_version and obj.get("kind") == self.config.parent_kind:
            uid = meta["uid"]
            if event == DELETED:
                self._states.pop(uid, None)
                return
            self._states.setdefault(uid, _ParentState(key=(meta["namespace"], meta["name"])))
            self.enqueue(uid)
            return
        if self.config.rule_for(obj.get("apiVersion", ""), obj.get("kind", "")) is None:
            return
        owners = {ref["uid"] for ref in meta.get("ownerReferences", []) if ref.get("controller")}
        if self.config.generate_selector and not owners:
            # An orphan: whoever's selector it matches may adopt it.
            owners = {meta.get("labels", {}).get(CONTROLLER_UID, "")}
        for uid in owners:
            if uid in self._states:
                self.enqueue(uid)

    def enqueue(self, uid: str, delay: float = 0.0) -> None:
        """Sync a parent after `delay` seconds (the earliest request wins)."""
        due = time.monotonic() + delay
        with self._cond:
            if uid in self._processing:
                if delay == 0.0:
                    self._dirty.add(uid)
                    return
            if uid in self._due and self._due[uid] <= due:
                return
            self._due[uid] = due
            heapq.heappush(self._queue, (due, uid))
            self._cond.notify()

    def _next(self) -> str | None:
        with self._cond:
            while not self._stop:
                now = time.monotonic()
                while self._queue and (self._queue[0][1] not in self._due or self._due[self._queue[0][1]] != self._queue[0][0]):
                    heapq.heappop(self._queue)  # superseded entry
                if self._queue and self._queue[0][0] <= now and self._queue[0][1] not in self._processing:
                    _, uid = heapq.heappop(self._queue)
                    del self._due[uid]
                    self._processing.add(uid)
                    return uid
                timeout = (self._queue[0][0] - now) if self._queue else None
                self._cond.wait(timeout=max(0.005, timeout) if timeout is not None else 0.5)
            return None

    def _done(self, uid: str) -> None:
        with self._cond:
            self._processing.discard(uid)
            if uid in self._dirty:
                self._dirty.discard(uid)
                self._due[uid] = time.monotonic()
                heapq.heappush(self._queue, (self._due[uid], uid))
            self._cond.notify_all()

    def _work(self) -> None:
        while (uid := self._next()) is not None:
            try:
                self._handle(uid)
            finally:
                self._done(uid)

    def _handle(self, uid: str) -> None:
        state = self._states.get(uid)
        if state is None or state.hot_loop:
            return
        try:
            outcome = self.sync(uid)
        except SyncError as err:
            state.failures += 1
            state.last_error = str(err)
            state.writing_syncs.clear()
            self._event(state, "Warning", "SyncError", str(err))
            first, cap = self.backoff
            self.enqueue(uid, min(cap, first * 2 ** (state.failures - 1)))
            return
        state.failures = 0
        state.last_error = None
        now = time.monotonic()
        if outcome.wrote:
            state.writing_syncs = [t for t in state.writing_syncs if now - t <= self.hot_loop_window] + [now]
            if len(state.writing_syncs) >= self.hot_loop_syncs:
                state.hot_loop = (
                    f"hot loop: {len(state.writing_syncs)} syncs in a row within {self.hot_loop_window:g}s each changed "
                    "the status or the children; the hook's answer is not a fixed point"
                )
                self._event(state, "Warning", "HotLoop", state.hot_loop)
                return
        else:
            state.writing_syncs.clear()
        resync = outcome.resync_after
        if self.config.resync_period_seconds:
            resync = min(resync or float("inf"), float(self.config.resync_period_seconds))
        if resync is not None and resync > 0:
            self.enqueue(uid, resync)

    def _event(self, state: _ParentState, type_: str, reason: str, message: str) -> None:
        self.events.append(Event(time.time(), state.key[1], type_, reason, message))

    # --- one sync --------------------------------------------------------------------------------

    def _find_parent(self, uid: str) -> KubeObject | None:
        state = self._states.get(uid)
        if state is None:
            return None
        parent = self.store.get(self.config.parent_api_version, self.config.parent_kind, *state.key)
        if parent is None or parent["metadata"]["uid"] != uid:
            return None
        return parent

    def selector(self, parent: KubeObject) -> dict[str, str]:
        """The parent's label selector (generated, or spec.selector.matchLabels)."""
        if self.config.generate_selector:
            return {CONTROLLER_UID: parent["metadata"]["uid"]}
        return dict(parent.get("spec", {}).get("selector", {}).get("matchLabels", {}))

    def _owner_ref(self, parent: KubeObject) -> OwnerReference:
        return OwnerReference(
            apiVersion=parent["apiVersion"], kind=parent["kind"], name=parent["metadata"]["name"],
            uid=parent["metadata"]["uid"], controller=True, blockOwnerDeletion=True,
        )

    def claim_children(self, parent: KubeObject) -> dict[str, dict[str, KubeObject]]:
        """Observed children per rule: owned ones that match, plus adopted orphans; release the rest."""
        uid, namespace = parent["metadata"]["uid"], parent["metadata"]["namespace"]
        selector = self.selector(parent)
        children: dict[str, dict[str, KubeObject]] = {}
        for rule in self.config.children:
            found: dict[str, KubeObject] = {}
            for obj in self.store.list(rule["apiVersion"], rule["kind"], namespace):
                meta = obj["metadata"]
                refs = meta.get("ownerReferences", [])
                controller = next((r for r in refs if r.get("controller")), None)
                matches = selector_matches(meta.get("labels"), selector)
                if controller is not None and controller.get("uid") != uid:
                    continue  # another controller's
                if controller is not None and not matches:
                    if not meta.get("deletionTimestamp"):  # release: drop our ownerRef, keep the object
                        meta["ownerReferences"] = [r for r in refs if r.get("uid") != uid]
                        self._try_update(obj)
                    continue
                if controller is None:
                    if not matches or meta.get("deletionTimestamp"):
                        continue
                    meta["ownerReferences"] = refs + [self._owner_ref(parent)]  # adopt
                    obj = self._try_update(obj) or obj
                found[obj["metadata"]["name"]] = obj
            children[self.config.child_key(rule)] = found
        return children

    def _try_update(self, obj: KubeObject) -> KubeObject | None:
        try:
            return self.store.update(obj)
        except StoreError:
            return None

    def build_request(self, parent: KubeObject, children: dict[str, dict[str, KubeObject]]) -> SyncRequest:
        """The sync hook request body (hook version v1)."""
        return SyncRequest(controller=copy.deepcopy(self.config.raw), parent=parent, children=children, related={}, finalizing=False)

    def call_hook(self, request: SyncRequest) -> dict[str, Any]:
        """POST the request; any non-200, timeout or malformed body is a SyncError."""
        url = urlsplit(self.hook_base_url + self.config.hook_path)
        body = json.dumps(request).encode()
        conn = http.client.HTTPConnection(url.hostname or "127.0.0.1", url.port or 80, timeout=self.config.hook_timeout_seconds)
        try:
            conn.request("POST", url.path or "/", body=body, headers={"Content-Type": "application/json"})
            response = conn.getresponse()
            payload = response.read()
        except (OSError, http.client.HTTPException) as err:
            raise SyncError(f"sync hook call failed: {err.__class__.__name__}: {err}") from err
        finally:
            conn.close()
        if response.status != 200:
            snippet = payload[:300].decode(errors="replace")
            raise SyncError(f"sync hook answered HTTP {response.status}: {snippet}")
        try:
            answer = json.loads(payload)
        except ValueError as err:
            raise SyncError(f"sync hook answer is not JSON: {err}") from err
        if not isinstance(answer, dict):
            raise SyncError(f"sync hook answer is a JSON {type(answer).__name__}, not an object")
        return answer

    def _desired(self, parent: KubeObject, answer: dict[str, Any]) -> dict[tuple, tuple[ChildRule, KubeObject]]:
        """Normalised desired children by key; a bad one fails the whole sync before any change."""
        children = answer.get("children")
        if children is None:
            children = []  # as Metacontroller: a missing or null list means "no children"
        if not isinstance(children, list):
            raise SyncError("sync hook answer: children is not a list")
        selector = self.selector(parent)
        namespace = parent["metadata"]["namespace"]
        desired: dict[tuple, tuple[ChildRule, KubeObject]] = {}
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

    def sync(self, uid: str) -> SyncOutcome:
        """One sync: call the hook, then apply its answer (children first, then status)."""
        parent = self._find_parent(uid)
        if parent is None or parent["metadata"].get("deletionTimestamp"):
            return SyncOutcome(False, None)  # no finalize hook: the garbage collector does the rest
        observed_by_rule = self.claim_children(parent)
        request = self.build_request(parent, observed_by_rule)
        state = self._states[uid]
        state.syncs += 1
        if self.record_requests:
            self.requests.append(copy.deepcopy(request))
        answer = self.call_hook(request)
        desired = self._desired(parent, answer)
        status = answer.get("status")
        if status is None:
            status = {}
        if not isinstance(status, dict):
            raise SyncError("sync hook answer: status is not an object")
        resync = answer.get("resyncAfterSeconds")
        if resync is not None and not isinstance(resync, (int, float)):
            raise SyncError("sync hook answer: resyncAfterSeconds is not a number")

        observed = {key_of(obj): obj for objs in observed_by_rule.values() for obj in objs.values()}
        wrote, errors = self._apply_children(parent, observed, desired)
        new_status = {**status, "observedGeneration": parent["metadata"]["generation"]}
        try:
            wrote = self.store.update_status(parent["apiVersion"], parent["kind"], *self._states[uid].key, new_status) or wrote
        except StoreError as err:
            errors.append(f"status update: {err}")
        if errors:
            raise SyncError("applying the sync answer failed: " + "; ".join(errors))
        return SyncOutcome(wrote, float(resync) if resync is not None else None)

    def _apply_children(self, parent: KubeObject, observed: dict, desired: dict) -> tuple[bool, list[str]]:
        """Delete, create and update children; returns (anything written, errors)."""
        wrote, errors = False, []
        with self.store.batch():
            for key, obj in observed.items():
                if key not in desired and not obj["metadata"].get("deletionTimestamp"):
                    try:
                        self.store.delete(*key)
                        wrote = True
                    except StoreError as err:
                        if err.code != 404:
                            errors.append(f"delete {key[1]} {key[3]}: {err}")
            for key, (rule, child) in desired.items():
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
            meta["ownerReferences"] = refs + [self._owner_ref(parent)]
        if self.store.get(*key_of(child)) is not None:
            # Still there, owned by nobody we can claim (or terminating for Recreate): not an error.
            return False
        try:
            self.store.create(child)
        except StoreError as err:
            if err.code != 409:
                raise
            return False
        return True

    def _update(self, rule: ChildRule, observed: KubeObject, desired: KubeObject) -> bool:
        if observed["metadata"].get("deletionTimestamp"):
            return False
        last_raw = observed["metadata"].get("annotations", {}).get(LAST_APPLIED)
        last = json.loads(last_raw) if last_raw else {}
        desired_annotated = copy.deepcopy(desired)
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
        if method == "Recreate":
            self.store.delete(*key_of(observed))  # created again by a later sync, once it is gone
            return True
        if observed["kind"] == "Pod" and observed["apiVersion"] == "v1":
            _check_pod_update(observed, merged)
        self.store.update(merged)
        return True


def _check_pod_update(old: KubeObject, new: KubeObject) -> None:
    """The API server's Pod update validation: only images and a few fields may change (else 422)."""

    def comparable(pod: KubeObject) -> dict:
        spec = copy.deepcopy(pod.get("spec", {}))
        for name in MUTABLE_POD_FIELDS:
            spec.pop(name, None)
        for container in spec.get("containers", []) + spec.get("initContainers", []):
            container.pop("image", None)
        return spec

    if comparable(old) != comparable(new):
        raise StoreError(422, "Invalid", f"Pod {old['metadata']['name']}: pod updates may not change fields other than "
                                         "image, activeDeadlineSeconds, tolerations")
