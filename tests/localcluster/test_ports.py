"""Ports picked free and taken before the process binds them (localcluster.ports): each starter
tries again on new ones. Real etcd, kube-apiserver, kube-scheduler and, given one, Metacontroller."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from helpers.engines import HOW_TO_GET_ONE, real_binary

from localcluster import ports
from localcluster.controlplane import kueue, processes
from localcluster.controlplane.processes import Component, ControlPlane
from localcluster.metacontroller import binary as metacontroller_binary
from localcluster.metacontroller.binary import MetacontrollerBinary


@contextmanager
def taken_port() -> Iterator[int]:
    """A port another process listens on, as one picked free can be by the time it is bound."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def handing_out(monkeypatch: pytest.MonkeyPatch, module: object, taken: int, at_call: int) -> list[int]:
    """Make `module.free_port` hand out `taken` on its `at_call`-th call (from 1); the ports it gave."""
    given: list[int] = []

    def free_port() -> int:
        given.append(taken if len(given) + 1 == at_call else ports.free_port())
        return given[-1]

    monkeypatch.setattr(module, "free_port", free_port)
    return given


def exited_with(tmp_path: Path, text: str) -> Component:
    log = tmp_path / "out.log"
    with log.open("wb") as out:
        process = subprocess.Popen([sys.executable, "-c", f"print({text!r})"], stdout=out, stderr=subprocess.STDOUT)
    process.wait()
    return Component("p", process, log)


@pytest.mark.parametrize(("text", "lost"), [
    ("listen tcp 127.0.0.1:4321: bind: address already in use", True),
    ("[Errno 98] Address already in use", True),
    ("open /etc/kubernetes/pki: permission denied", False),
], ids=["go-net", "python-socket", "another-error"])
def test_only_an_exit_that_says_the_address_was_in_use_counts_as_a_lost_port(tmp_path: Path, text: str, lost: bool):
    assert exited_with(tmp_path, text).lost_its_port() is lost


def test_a_running_process_has_not_lost_its_port(tmp_path: Path):
    log = tmp_path / "out.log"
    log.write_text("bind: address already in use\n")  # an old line: the process is still up
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert not Component("p", process, log).lost_its_port()
    finally:
        process.kill()
        process.wait()


# free_port's calls in ControlPlane.start: etcd's client and peer ports, the API server's, the scheduler's.
@pytest.mark.e2e
@pytest.mark.apiserver
@pytest.mark.parametrize(("component", "call"), [("etcd", 1), ("kube-apiserver", 3), ("kube-scheduler", 4)])
def test_a_control_plane_port_taken_before_its_process_binds_it_is_picked_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, component: str, call: int):
    with taken_port() as taken:
        given = handing_out(monkeypatch, processes, taken, call)
        with ControlPlane(workdir=tmp_path) as plane:
            assert given[call - 1] == taken  # it was handed out, and the component started on another
            assert len(given) == 5 + (component == "etcd"), given  # one more port for the one start again
            assert plane.kubectl("get", "--raw", "/readyz").stdout.strip() == "ok"
            log = (tmp_path / f"{component}.log").read_text()
            assert str(taken) not in log  # the log is the start that worked
            if component == "kube-apiserver":
                assert plane.port != taken


@pytest.mark.e2e
@pytest.mark.apiserver
@pytest.mark.real_metacontroller
def test_a_metacontroller_health_port_taken_before_it_binds_it_is_picked_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    found = real_binary()
    if found is None:
        pytest.skip(HOW_TO_GET_ONE)
    with ControlPlane(workdir=tmp_path / "cp") as plane, taken_port() as taken:
        given = handing_out(monkeypatch, metacontroller_binary, taken, 1)
        engine = MetacontrollerBinary(found, tmp_path / "mc")
        try:
            engine.start(plane)
            assert given[0] == taken and engine.health_port == given[1] != taken
            assert engine.running()
        finally:
            engine.stop()


@pytest.mark.e2e
@pytest.mark.apiserver
@pytest.mark.parametrize(("port", "call"), [("webhook", 1), ("health", 2)])
def test_a_kueue_port_taken_before_it_binds_it_is_picked_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                               port: str, call: int):
    problem = kueue.missing()
    if problem is not None:
        if os.environ.get("KUEUE") == "run":
            pytest.fail(f"KUEUE=run, but {problem}", pytrace=False)
        pytest.skip(f"not run against a real Kueue: {problem}")
    with ControlPlane(workdir=tmp_path / "cp") as plane, taken_port() as taken:
        given = handing_out(monkeypatch, kueue, taken, call)  # its webhook, health and metrics ports, in this order
        manager = kueue.Kueue(plane, tmp_path / "kueue")
        try:
            manager.start()  # returns once the API server gets answers from its webhooks: on the new port
            assert given[call - 1] == taken and len(given) == 6
            assert manager.webhook_port == given[3] != taken
        finally:
            manager.stop()
