"""The emulation run as Metacontroller runs a CompositeController: watch-driven workers.

Watch events put parent uids on a delaying work queue: a parent's own events, its children's (by
their controller reference, or their `controller-uid` label for an orphan), and related objects'
(by the customize hook's last answer). `workers` threads take one uid at a time and sync it
(composite.py), calling the hooks over HTTP (webhook.py). Whatever a sync raises, a hook failure
or an API error or anything else, the parent is retried after the workqueue's rate limiter
(5 ms·2ⁿ, capped at 1,000 s) and the worker goes on, as Metacontroller's processNextWorkItem does.
Every parent is also synced at every flush of the informer caches (`--cache-flush-interval`, 30
minutes) and, when it is shorter, every `resyncPeriodSeconds`. On top, what real Metacontroller does not do: a parent whose
status or children never settle is reported as a hot loop and no longer synced, so a test or `run`
ends instead of spinning.
"""

from __future__ import annotations

import threading
import time
import traceback
from typing import Any

from localcluster.config import ControllerConfig
from localcluster.metacontroller.delayqueue import DelayQueue
from localcluster.store import ADDED, DELETED, ObjectStore, controller_uid
from localcluster.types import KubeObject, SyncRequest

from . import webhook
from .composite import Emulation, Stale
from .controllerref import CONTROLLER_UID
from .errors import SyncError
from .throttle import ClientThrottle

# The controller workqueue's rate limiter (DefaultTypedControllerRateLimiter): 5 ms doubling, capped at 1,000 s.
RETRY_BACKOFF = (0.005, 1000.0)
# Metacontroller's --workers and --cache-flush-interval defaults.
WORKERS = 5
CACHE_FLUSH_SECONDS = 1800.0


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
        cache_flush_seconds: float = CACHE_FLUSH_SECONDS,
        service_dns: bool = False,
    ):
        super().__init__(store, config, self.call_hook, throttle=throttle, stale=stale, customize=self.call_customize)
        self.hook_base_url = hook_base_url.rstrip("/")
        # False: every hook is called at its path on hook_base_url, whatever host its URL names. True: at
        # the URL the CompositeController names, whose host must resolve as cluster DNS resolves it for
        # Metacontroller (webhook.endpoint); so a URL naming the wrong namespace fails, as in a cluster.
        self.service_dns = service_dns
        # A faster clock for tests: every delay of Metacontroller's own (retries, resync ticks) divided by it.
        self.backoff, self.time_scale = backoff, time_scale
        self.hot_loop_syncs, self.hot_loop_window = hot_loop_syncs, hot_loop_window
        self._queue: DelayQueue[str] = DelayQueue()
        self.hook_seconds: list[float] = []  # every hook call's duration (the HTTP exchange), for benchmarks
        self.sync_seconds: list[float] = []  # every successful sync's duration (reads, hook call, writes)
        self._stop = threading.Event()
        self._workers = [threading.Thread(target=self._work, name=f"metacontroller-{i}", daemon=True) for i in range(workers)]
        # The informers resync every parent at each cache flush; a resyncPeriodSeconds gets a timer of
        # its own only when it is shorter (informer.go's addHandler), a longer one is the flush's.
        periods = {float(cache_flush_seconds)} if cache_flush_seconds else set()
        if config.resync_period_seconds and (not cache_flush_seconds or config.resync_period_seconds < cache_flush_seconds):
            periods.add(float(config.resync_period_seconds))
        self._threads = self._workers + [
            threading.Thread(target=self._tick, args=(period,), name=f"metacontroller-resync-{period:g}s", daemon=True)
            for period in sorted(periods)]

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

    def alive_workers(self) -> int:
        """How many worker threads are running (all of them, until `stop`)."""
        return sum(1 for thread in self._workers if thread.is_alive())

    # --- queue -----------------------------------------------------------------------------------

    def _on_event(self, event: str, obj: KubeObject) -> None:
        meta = obj.get("metadata", {})
        if self.parents.is_parent(obj):
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
                and any(rule.matches(obj, state.key[0]) for rule in state.related_rules[2])]

    def enqueue(self, uid: str, delay: float = 0.0) -> None:
        """Sync a parent after `delay` seconds (the earliest request wins)."""
        self._queue.add(uid, delay)

    def on_resync_after(self, uid: str, seconds: float) -> None:
        self.enqueue(uid, seconds)

    def _tick(self, period_seconds: float) -> None:
        """Every period, every parent is synced again (resyncPeriodSeconds, or the informers' cache flush)."""
        period = period_seconds / self.time_scale
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
            self._failed(uid, str(err))
            return
        except Exception as err:  # an API error outside a write, a bug: logged and retried, never a dead worker
            traceback.print_exc()
            self._failed(uid, f"{err.__class__.__name__}: {err}")
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

    def _failed(self, uid: str, error: str) -> None:
        """A failed sync: a Warning event, and the parent back on the queue after the rate limiter's delay."""
        state = self._states.get(uid)
        if state is None:  # forgotten meanwhile (deleted)
            return
        state.failures += 1
        state.last_error = error
        state.writing_syncs.clear()
        self._event(state, "Warning", "SyncError", error)
        self.enqueue(uid, self.retry_delay(state.failures))

    # --- the hooks over HTTP ---------------------------------------------------------------------

    def call_hook(self, request: SyncRequest) -> dict[str, Any]:
        """POST the sync request; any non-200, timeout or malformed body is a SyncError."""
        return webhook.post(self._endpoint(self.config.hook_url, self.config.hook_path), request,
                            timeout=self.config.hook_timeout_seconds, hook="sync", timings=self.hook_seconds)

    def call_customize(self, request: dict[str, Any]) -> dict[str, Any]:
        """POST the customize request ({controller, parent}); failures as for the sync hook."""
        return webhook.post(self._endpoint(self.config.customize_url, self.config.customize_path or "/"), request,
                            timeout=self.config.hook_timeout_seconds, hook="customize")

    def _endpoint(self, url: str | None, path: str) -> str:
        """Where a hook call goes on this machine (see service_dns)."""
        if not self.service_dns or not url:
            return self.hook_base_url + path
        return webhook.endpoint(self.store, url, self.hook_base_url)
