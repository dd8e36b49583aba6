"""The process kubelet alone, over a plain object store (no API server, no Metacontroller), for the
tests of what it does to a pod's processes: pods created straight into the store, bound to its node."""
from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from helpers.objectstore import ObjectBag
from localcluster.node.dns import ClusterDNS
from localcluster.node.kubelet import ProcessKubelet


@contextmanager
def bare_kubelet(logs: Path) -> Iterator[ProcessKubelet]:
    """A started ProcessKubelet writing its logs to `logs`; stopped on exit."""
    store = ObjectBag()
    kubelet = ProcessKubelet(store, ClusterDNS(store, strict=False), logs)
    kubelet.start()
    try:
        yield kubelet
    finally:
        kubelet.stop()


def wait_for(check: Callable[[], object], seconds: float, what: str) -> object:
    """Poll `check` until it returns something truthy (returned); AssertionError after `seconds`."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out after {seconds} s waiting for {what}")


def phase(kubelet: ProcessKubelet, name: str) -> str:
    """The pod's phase in the store ("" before the kubelet wrote one, or once it is gone)."""
    return str(((kubelet.store.get("v1", "Pod", "default", name) or {}).get("status") or {}).get("phase", ""))
