"""The hooks server's start-up when its port is taken before gunicorn binds it (real gunicorn)."""

from __future__ import annotations

import socket
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from localcluster.hooks_server import HooksServer

pytestmark = pytest.mark.e2e


@contextmanager
def listening(port: int) -> Iterator[socket.socket]:
    """Another process's server on `port`, as it can appear between the pick of a free port and the bind."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))
        sock.listen()
        yield sock


def test_a_picked_port_taken_before_gunicorn_binds_it_moves_the_server_to_another(tmp_path: Path):
    server = HooksServer(tmp_path / "hooks.log")
    taken = server.port
    with listening(taken):
        server.start()
        try:
            assert server.port != taken
            with urllib.request.urlopen(f"{server.url}/readyz", timeout=5) as answer:  # it answers where it moved
                assert answer.status == 200
        finally:
            server.stop()
    assert "Address already in use" in (tmp_path / "hooks.log").read_text()


def test_a_port_the_caller_chose_is_never_moved(tmp_path: Path):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        chosen = probe.getsockname()[1]
    server = HooksServer(tmp_path / "hooks.log", port=chosen)
    with listening(chosen), pytest.raises(RuntimeError, match="hooks server exited with 1"):
        server.start()
    assert server.port == chosen
