"""The client throttle of Metacontroller's one API client (client-go's token bucket).

Metacontroller makes every API request through one dynamic client limited to `--client-go-qps`
(5 a second) with bursts of `--client-go-burst` (10), shared by all its controllers: a burst goes
through at once, then requests wait their turn. The local cluster makes one `ClientThrottle` and
hands it to every controller it runs, so a thousand-pod job pays the same write time as on a real
cluster.
"""

from __future__ import annotations

import threading
import time

# Metacontroller's --client-go-qps and --client-go-burst defaults.
CLIENT_QPS, CLIENT_BURST = 5.0, 10


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
