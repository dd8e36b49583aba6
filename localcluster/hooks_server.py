"""The real hooks server, started as in the Dockerfile (gunicorn) on a free loopback port, and a fault proxy."""

from __future__ import annotations

import http.client
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from localcluster.config import REPO_ROOT
from localcluster.ports import LOOPBACK, PORT_ATTEMPTS, free_port, says_port_taken

# The Dockerfile's command, plus a loopback --bind (the default binds 0.0.0.0:8080).
SERVER_ARGS = ["--config", "python:hooks.server.gunicorn_conf", "hooks.server.app:create_app()"]


def gunicorn_command() -> list[str]:
    """gunicorn from this environment (the venv's script, or `python -m gunicorn`)."""
    script = Path(sys.executable).parent / "gunicorn"
    return [str(script)] if script.exists() else [sys.executable, "-m", "gunicorn"]


class PortTaken(Exception):
    """The port picked for the hooks server was taken before gunicorn could bind it."""


class HooksServer:
    """gunicorn serving hooks.server.app on 127.0.0.1:<port>; start, stop and restart on the same port."""

    def __init__(self, log_path: Path, port: int | None = None, *, startup_timeout: float = 30.0,
                 settings: dict[str, str] | None = None):
        """`settings`: hooks server settings (docs/hooks-server.md) the environment does not set already."""
        self.port = port or free_port()
        # A port picked here may be taken before gunicorn binds it (by any process's outgoing
        # connection, or another test process's server): then the first start picks another.
        self._may_move = port is None
        self.log_path = Path(log_path)
        self.startup_timeout = startup_timeout
        self.settings = settings or {}
        self._process: subprocess.Popen[bytes] | None = None
        self._metrics_dir: str | None = None

    @property
    def url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    def start(self) -> None:
        """Start gunicorn and wait until /readyz answers 200; on a free port taken meanwhile, on another."""
        for attempt in range(1, PORT_ATTEMPTS + 1):
            try:
                self._start_once()
            except PortTaken as taken:
                if attempt == PORT_ATTEMPTS:
                    raise RuntimeError(f"hooks server: {attempt} free ports were taken before gunicorn bound them; "
                                       f"see {self.log_path}") from taken
                self.port = free_port()
                continue
            self._may_move = False  # once served, restarts keep the port
            return

    def _start_once(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log_start = self.log_path.stat().st_size if self.log_path.exists() else 0
        # Made per start and removed by stop, so no run leaves a metrics directory behind.
        self._metrics_dir = tempfile.mkdtemp(prefix="mxjob-hooks-metrics-")
        env = {**self.settings, **os.environ, "PROMETHEUS_MULTIPROC_DIR": self._metrics_dir}
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
        with self.log_path.open("a") as log:
            self._process = subprocess.Popen(
                gunicorn_command() + SERVER_ARGS + ["--bind", f"{LOOPBACK}:{self.port}"],
                cwd=REPO_ROOT, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                code = self._process.returncode
                # gunicorn retries a taken --bind address for 5 s, then exits 1.
                if self._may_move and says_port_taken(self._log_since(log_start)):
                    self.stop()
                    raise PortTaken(self.port)
                raise RuntimeError(f"hooks server exited with {code}; see {self.log_path}")
            if self._ready():
                return
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"hooks server not ready after {self.startup_timeout:g}s; see {self.log_path}")

    def _log_since(self, offset: int) -> str:
        with self.log_path.open("rb") as log:
            log.seek(offset)
            return log.read().decode(errors="replace")

    def _ready(self) -> bool:
        try:
            conn = http.client.HTTPConnection(LOOPBACK, self.port, timeout=1)
            conn.request("GET", "/readyz")
            ok = conn.getresponse().status == 200
            conn.close()
            return ok
        except OSError:
            return False

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM (gunicorn drains), SIGKILL after `timeout`."""
        process, self._process = self._process, None
        try:
            if process is None or process.poll() is not None:
                return
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        finally:
            if self._metrics_dir is not None:
                shutil.rmtree(self._metrics_dir, ignore_errors=True)
                self._metrics_dir = None

    def kill(self) -> None:
        """SIGKILL the server's process group now (`stop` still reaps it and cleans up)."""
        process = self._process
        if process is not None and process.poll() is None:
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def restart(self) -> None:
        """Stop and start again on the same port (a rolling restart of the hooks Deployment, in small)."""
        self.stop()
        self.start()


class FaultProxy:
    """A loopback HTTP proxy in front of the hooks server that can answer errors for a while, and counts
    the sync requests each parent gets (by uid), whichever Metacontroller sends them: the tests' way to
    see a sync happen under the real engine as under the emulation."""

    def __init__(self, backend_url: str, address: tuple[str, int] = (LOOPBACK, 0)):
        """`address`: where it listens (a free loopback port by default; a Service's port on an address of
        its own when a real Metacontroller reaches the hooks by a Service name: LocalCluster(service_dns=True))."""
        self.backend_url = backend_url.rstrip("/")
        self._fail_until = 0.0
        self._fail_status = 500
        self.failed_requests = 0
        self._syncs: Counter[str] = Counter()
        self._lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                if self.path.endswith("/sync"):
                    proxy._count(body)
                if time.monotonic() < proxy._fail_until:
                    proxy.failed_requests += 1
                    self._reply(proxy._fail_status, b'{"error": "injected fault"}')
                    return
                host, _, port = proxy.backend_url.split("://", 1)[1].partition(":")
                try:
                    conn = http.client.HTTPConnection(host, int(port), timeout=15)
                    conn.request("POST", self.path, body=body, headers={"Content-Type": "application/json"})
                    response = conn.getresponse()
                    self._reply(response.status, response.read())
                    conn.close()
                except OSError as err:
                    self._reply(502, str(err).encode())

            def _reply(self, status: int, payload: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer(address, Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> None:
        self._thread.start()

    def _count(self, body: bytes) -> None:
        try:
            uid = json.loads(body)["parent"]["metadata"]["uid"]
        except (ValueError, KeyError, TypeError):
            return  # not a sync request the hooks would accept either; nothing to count
        with self._lock:
            self._syncs[str(uid)] += 1

    def syncs(self, uid: str) -> int:
        """How many sync requests for the parent with this uid have passed (failed ones included)."""
        with self._lock:
            return self._syncs[uid]

    def fail_for(self, seconds: float, status: int = 500) -> None:
        """Answer `status` to every request for the next `seconds`."""
        self._fail_status = status
        self._fail_until = time.monotonic() + seconds

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
