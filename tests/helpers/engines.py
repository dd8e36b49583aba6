"""The two Metacontrollers an end-to-end test can run under: the project's emulation and a real
Metacontroller v4.17.2 binary (METACONTROLLER_BIN; `.ci/run` passes one when CI has it).

A test takes the `metacontroller` fixture (tests/conftest.py) and hands it to
`LocalCluster(metacontroller=...)`; it then runs once per engine, the real one marked
`real_metacontroller`. What a test may ask of either engine is here: how many syncs a parent got
(counted by the fault proxy in front of the hooks, whichever engine sends them) and waiting for
more, which is how a settled job's resyncs are counted under both.
"""

from __future__ import annotations

import contextlib
import copy
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from localcluster.cluster import LocalCluster
from localcluster.config import ControllerConfig, load_controller_configs, parse_composite_controller
from localcluster.types import KubeObject

ENV = "METACONTROLLER_BIN"
EMULATION, REAL = "emulation", "real"
HOW_TO_GET_ONE = (
    f"no real Metacontroller: set {ENV} to a Metacontroller v4.17.2 binary to run this test under it "
    "(git clone -b v4.17.2 https://github.com/metacontroller/metacontroller && cd metacontroller && "
    "CGO_ENABLED=0 go build -o metacontroller ./pkg/cmd/metacontroller; docs/localcluster.md)")


def real_binary() -> Path | None:
    """The binary METACONTROLLER_BIN names, or None when it names none (an unusable path is an error:
    a CI that meant to run the real engine must not quietly skip it)."""
    value = os.environ.get(ENV, "")
    if not value:
        return None
    path = Path(value)
    if not path.is_file() or not os.access(path, os.X_OK):
        raise FileNotFoundError(f"{ENV}={value}: no executable file there")
    return path.resolve()


def with_resync(seconds: int, configs: list[ControllerConfig] | None = None) -> list[ControllerConfig]:
    """The shipped CompositeControllers with `resyncPeriodSeconds: seconds`: both engines then resync
    every settled parent that often, which a test counts without reaching into either."""
    changed = []
    for config in configs or load_controller_configs():
        raw = copy.deepcopy(config.raw)
        raw["spec"]["resyncPeriodSeconds"] = seconds
        changed.append(parse_composite_controller(raw, config.source))
    return changed


def syncs(cluster: LocalCluster, job: KubeObject) -> int:
    """Sync requests the job has had so far (the cluster needs `fault_proxy=True`)."""
    assert cluster.proxy is not None, "LocalCluster(fault_proxy=True) counts the syncs"
    return cluster.proxy.syncs(job["metadata"]["uid"])


def wait_syncs(cluster: LocalCluster, job: KubeObject, more: int, timeout: float = 30.0) -> int:
    """Wait for `more` syncs of the job after now (its resync period brings them); the count then."""
    start = syncs(cluster, job)
    return cluster.wait_for(lambda: (n := syncs(cluster, job)) >= start + more and n, timeout,
                            what=f"{more} more syncs of {job['metadata']['name']}")


@contextlib.contextmanager
def cluster_under(state_dir: Path, metacontroller: str, **options: Any) -> Iterator[LocalCluster]:
    """A started LocalCluster under `metacontroller` (the fixture's value), the fault proxy counting
    syncs. Under the real engine its log must hold no error line at the end: a sync that failed, a
    right it lacked, a hook answer it refused."""
    with LocalCluster(state_dir, metacontroller=metacontroller, fault_proxy=True, **options) as cluster:
        yield cluster
        binary = cluster.metacontroller_binary
        if binary is not None:
            assert binary.errors() == [], f"errors in {binary.log}:\n" + "\n".join(binary.errors()[:5])
