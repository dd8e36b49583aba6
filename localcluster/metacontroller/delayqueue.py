"""The work queue of the Metacontroller stand-in: client-go's delaying workqueue, in small.

A key is handed to one worker at a time; adding a key that is waiting keeps the earlier due time;
adding a key that is being processed marks it dirty, so it is processed once more right after.
Several events for one key collapse into one pass (level-triggered controllers).
"""

from __future__ import annotations

import heapq
import threading
import time
from collections.abc import Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)


class DelayQueue(Generic[K]):
    """Keys due at a time; `get` blocks until one is due and no other worker holds it."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, K]] = []
        self._due: dict[K, float] = {}
        self._processing: set[K] = set()
        self._dirty: set[K] = set()
        self._cond = threading.Condition()
        self._stopped = False
        self._seq = 0  # ties broken by insertion order; keys need not be comparable

    def add(self, key: K, delay: float = 0.0) -> None:
        """Process `key` after `delay` seconds (the earliest request wins)."""
        due = time.monotonic() + max(0.0, delay)
        with self._cond:
            if key in self._processing and delay <= 0.0:
                self._dirty.add(key)
                return
            if key in self._due and self._due[key] <= due:
                return
            self._push(key, due)

    def _push(self, key: K, due: float) -> None:
        self._due[key] = due
        self._seq += 1
        heapq.heappush(self._heap, (due, self._seq, key))
        self._cond.notify_all()

    def get(self) -> K | None:
        """The next due key, now held by the caller until `done`; None once stopped."""
        with self._cond:
            while not self._stopped:
                now = time.monotonic()
                while self._heap and self._due.get(self._heap[0][2]) != self._heap[0][0]:
                    heapq.heappop(self._heap)  # superseded by an earlier due time, or already taken
                ready = [entry for entry in self._heap if entry[0] <= now and entry[2] not in self._processing]
                if ready:
                    entry = min(ready)
                    self._heap.remove(entry)
                    heapq.heapify(self._heap)
                    del self._due[entry[2]]
                    self._processing.add(entry[2])
                    return entry[2]
                timeout = (self._heap[0][0] - now) if self._heap else 0.5
                self._cond.wait(timeout=min(0.5, max(0.002, timeout)))
            return None

    def done(self, key: K) -> None:
        """The caller finished with `key`; a dirty key is due again at once."""
        with self._cond:
            self._processing.discard(key)
            if key in self._dirty:
                self._dirty.discard(key)
                self._push(key, time.monotonic())
            self._cond.notify_all()

    def stop(self) -> None:
        """Wake every waiting worker; `get` returns None from now on."""
        with self._cond:
            self._stopped = True
            self._cond.notify_all()
