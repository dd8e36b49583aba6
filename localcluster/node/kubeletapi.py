"""The kubelet's log endpoint, so `kubectl logs` works on the local cluster.

`kubectl logs POD` asks the API server, which opens `GET /containerLogs/<namespace>/<pod>/<container>`
on the node's kubelet (the Node's address and `status.daemonEndpoints.kubeletEndpoint.Port`), over
HTTPS. This serves exactly that from the process kubelet's log files, with the query parameters
kubectl sends most (`follow`, `tailLines`, `limitBytes`, `previous`); it listens on loopback with a
self-signed certificate, which the API server does not verify unless told to (no
--kubelet-certificate-authority).

A log file holds every pod of its name, one after another (`localcluster run` reads why an earlier
one failed from it), and every restart of each container. A real kubelet keeps one log per container
instance, so this serves what it would: the current instance of the current pod's container, and with
`previous=true` the instance before it in the same pod.
"""

from __future__ import annotations

import datetime
import ipaddress
import re
import ssl
import tempfile
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import NamedTuple
from urllib.parse import parse_qs, unquote, urlsplit

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


class ContainerLog(NamedTuple):
    """A container's log file and where the pod's status says the container is."""

    path: Path
    # The number in the kubelet's `start #N` line of the instance that runs or ran last (its restartCount).
    restarts: int
    # Why it has not started yet (ContainerCreating, PodInitializing); None once it has.
    waiting: str | None = None


# (namespace, pod, container) -> its log, or None when there is no such container; and whether it still runs.
LogLookup = Callable[[str, str, str], "ContainerLog | None"]
Running = Callable[[str, str], bool]
FOLLOW_POLL_SECONDS = 0.2


def _self_signed(directory: Path) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localcluster-kubelet")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=30))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                                                        x509.DNSName("localhost")]), critical=False)
            .sign(key, hashes.SHA256()))
    cert_path, key_path = directory / "kubelet.crt", directory / "kubelet.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path


def instance_log(data: bytes, pod: str, container: str, restarts: int, *, previous: bool = False) -> bytes:
    """The part of a log file one container instance wrote: from the kubelet's `start #<restarts>` line
    of this pod's container (the last one: an earlier pod of the same name wrote the ones before) to the
    end; with `previous`, from the `start #<restarts - 1>` line before it up to it."""
    start = re.compile(rb"^=== localcluster: pod " + re.escape(pod.encode()) + rb" container "
                       + re.escape(container.encode()) + rb" start #(\d+) ", re.M)
    starts = [(m.start(), int(m.group(1))) for m in start.finditer(data)]
    current = max((i for i, (_, n) in enumerate(starts) if n == restarts), default=None)
    if current is None:
        return b""
    if not previous:
        return data[starts[current][0]:]
    if current == 0 or starts[current - 1][1] != restarts - 1:
        return b""
    return data[starts[current - 1][0]:starts[current][0]]


class KubeletLogServer:
    """HTTPS on 127.0.0.1:<port>: `/containerLogs/...` from the process kubelet's files; `/healthz`."""

    def __init__(self, lookup: LogLookup, running: Running):
        self.lookup, self.running = lookup, running
        self._tmp = tempfile.TemporaryDirectory(prefix="kubelet-")
        cert, key = _self_signed(Path(self._tmp.name))
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: object) -> None:  # quiet: the API server polls
                pass

            def do_GET(self) -> None:
                server.handle(self)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        self.httpd.socket = context.wrap_socket(self.httpd.socket, server_side=True)
        self.port = int(self.httpd.server_address[1])
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="kubelet-logs", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self._tmp.cleanup()

    def handle(self, request: BaseHTTPRequestHandler) -> None:
        url = urlsplit(request.path)
        parts = [unquote(p) for p in url.path.strip("/").split("/")]
        if parts == ["healthz"]:
            self._answer(request, 200, b"ok")
            return
        if len(parts) != 4 or parts[0] != "containerLogs":
            self._answer(request, 404, b"the local cluster's kubelet serves only /containerLogs/<namespace>/<pod>/<container>")
            return
        _, namespace, pod, container = parts
        found = self.lookup(namespace, pod, container)
        if found is None:
            self._answer(request, 404, f"container {container} is not valid for pod {pod}".encode())
            return
        query = parse_qs(url.query)
        previous = query.get("previous", ["false"])[0] == "true"
        problem = self._unavailable(found, pod, container, previous=previous)
        if problem:
            self._answer(request, 400, problem.encode())
            return
        path = found.path
        data = instance_log(path.read_bytes() if path.exists() else b"", pod, container, found.restarts, previous=previous)
        if "tailLines" in query:
            lines = data.splitlines(keepends=True)
            count = int(query["tailLines"][0])
            data = b"".join(lines[-count:]) if count > 0 else b""
        if "limitBytes" in query:
            data = data[: int(query["limitBytes"][0])]
        follow = query.get("follow", ["false"])[0] == "true" and not previous
        request.send_response(200)
        request.send_header("Content-Type", "text/plain")
        if not follow:
            request.send_header("Content-Length", str(len(data)))
        request.end_headers()
        try:
            request.wfile.write(data)
            request.wfile.flush()
            offset = path.stat().st_size if path.exists() else 0
            while follow and self.running(namespace, pod):
                time.sleep(FOLLOW_POLL_SECONDS)
                if path.exists() and path.stat().st_size > offset:
                    with path.open("rb") as handle:
                        handle.seek(offset)
                        chunk = handle.read()
                    offset += len(chunk)
                    request.wfile.write(chunk)
                    request.wfile.flush()
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError):
            pass  # the client went away

    @staticmethod
    def _unavailable(found: ContainerLog, pod: str, container: str, *, previous: bool) -> str | None:
        """The kubelet's words when there is no such log to serve (the API server answers them as a 400)."""
        if previous and found.restarts == 0:
            return f'previous terminated container "{container}" in pod "{pod}" not found'
        if not previous and found.waiting is not None:
            return f'container "{container}" in pod "{pod}" is waiting to start: {found.waiting}'
        return None

    @staticmethod
    def _answer(request: BaseHTTPRequestHandler, code: int, body: bytes) -> None:
        request.send_response(code)
        request.send_header("Content-Type", "text/plain")
        request.send_header("Content-Length", str(len(body)))
        request.end_headers()
        request.wfile.write(body)
