"""Fixtures every test folder shares: the real control plane, started once per session.

Tests marked `apiserver` use it. Each isolates itself in a namespace of its own (`namespace`), so
they can share one etcd; a test's local cluster runs on it too (`cluster_plane`). `make test
CONTROLPLANE=skip` skips them (make says so loudly); anything else makes a missing build a
failure, not a skip, so a green run always means the server saw them.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest
from helpers.engines import EMULATION, HOW_TO_GET_ONE, REAL, real_binary
from helpers.metacontroller_writes import Admission, install, new_namespace
from helpers.shared_plane import clear_local_clusters

from localcluster.controlplane.processes import ControlPlane, ControlPlaneError

_STARTED: list[ControlPlane] = []
_WORKER_STARTUPS: list[dict[str, float]] = []


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get("CONTROLPLANE") != "skip":
        return
    skip = pytest.mark.skip(reason="CONTROLPLANE=skip: not run against a real API server")
    for item in items:
        if "apiserver" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def control_plane() -> Iterator[ControlPlane]:
    plane = ControlPlane()
    try:
        plane.start()
    except ControlPlaneError as exc:
        pytest.fail(f"the real control plane did not start: {exc}", pytrace=False)
    _STARTED.append(plane)
    try:
        yield plane
    finally:
        plane.stop()


@pytest.fixture
def cluster_plane(control_plane: ControlPlane) -> ControlPlane:
    """The session's control plane for one test's LocalCluster (`LocalCluster(control_plane=...)`),
    cleared of what earlier local clusters left on it (helpers/shared_plane.py). The install comes
    first, so every test meets the CRDs as the install leaves them, whatever ran before."""
    install(control_plane)
    clear_local_clusters(control_plane)
    return control_plane


@pytest.fixture
def namespace(control_plane: ControlPlane) -> Iterator[str]:
    """A fresh namespace with its `default` ServiceAccount (pods are refused until it exists)."""
    name = f"t-{uuid.uuid4().hex[:10]}"
    control_plane.kubectl("create", "namespace", name)
    control_plane.kubectl("wait", "--for=create", "serviceaccount/default", "-n", name, "--timeout=30s")
    yield name
    control_plane.kubectl("delete", "namespace", name, "--wait=false", check=False)


@pytest.fixture(scope="session")
def admission(request: pytest.FixtureRequest) -> Admission | None:
    """The real server's verdict on a hook's children (helpers/metacontroller_writes.py), for tests
    that also run without a server: under CONTROLPLANE=skip it is None and they leave that check out."""
    if os.environ.get("CONTROLPLANE") == "skip":
        return None
    plane: ControlPlane = request.getfixturevalue("control_plane")
    install(plane)
    return Admission(plane, new_namespace(plane, "admission"))


@pytest.fixture(params=[EMULATION, pytest.param(REAL, marks=pytest.mark.real_metacontroller)])
def metacontroller(request: pytest.FixtureRequest) -> str:
    """What syncs the test's jobs, for `LocalCluster(metacontroller=...)`: the emulation, then a real
    Metacontroller binary (helpers/engines.py); without METACONTROLLER_BIN the real run skips, saying
    how to get one."""
    if request.param == EMULATION:
        return EMULATION
    binary = real_binary()
    if binary is None:
        pytest.skip(HOW_TO_GET_ONE)
    return str(binary)


def pytest_sessionfinish(session: pytest.Session) -> None:
    """A test process of `make test` (pytest-xdist) hands its control planes' start-up times to the
    main process, which prints them."""
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:
        workeroutput["control_plane_startup"] = [plane.startup_seconds for plane in _STARTED]


def pytest_testnodedown(node: object, error: object) -> None:
    _WORKER_STARTUPS.extend(getattr(node, "workeroutput", {}).get("control_plane_startup", []))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    real = {outcome: [r for r in terminalreporter.stats.get(outcome, []) if "real_metacontroller" in getattr(r, "keywords", {})]
            for outcome in ("passed", "failed", "skipped", "error")}
    if any(real.values()):
        binary = real_binary()
        terminalreporter.write_line(f"under the real Metacontroller ({binary or 'METACONTROLLER_BIN unset'}): "
                                    + ", ".join(f"{len(reports)} {outcome}" for outcome, reports in real.items()))
    for startup in [plane.startup_seconds for plane in _STARTED] + _WORKER_STARTUPS:
        times = ", ".join(f"{name} {seconds:.1f} s" for name, seconds in startup.items())
        terminalreporter.write_line(f"real control plane started in: {times}")
