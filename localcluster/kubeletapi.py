"""The kubelet's log endpoint, so `kubectl logs` works on the local cluster.

`kubectl logs POD` asks the API server, which opens `GET /containerLogs/<namespace>/<pod>/<container>`
on the node's kubelet (the Node's address and `status.daemonEndpoints.kubeletEndpoint.Port`), over
HTTPS. This serves exactly that from the process kubelet's log files, with the query parameters
kubectl sends most (`follow`, `tailLines`, `limitBytes`); it listens on loopback with a self-signed
certificate, which the API server does not verify unless told to (no --kubelet-certificate-authority).
"""

from __future__ import annotations

import datetime
import ipaddress
import ssl
import tempfile
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

# (namespace, pod, container) -> the log file, or None when there is no such container; and whether it still runs.
LogLookup = Callable[[str, str, str], "Path | None"]
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
        path = self.lookup(namespace, pod, container)
        if path is None:
            self._answer(request, 404, f"container {container} is not valid for pod {pod}".encode())
            return
        query = parse_qs(url.query)
        data = path.read_bytes() if path.exists() else b""
        if "tailLines" in query:
            lines = data.splitlines(keepends=True)
            count = int(query["tailLines"][0])
            data = b"".join(lines[-count:]) if count > 0 else b""
        if "limitBytes" in query:
            data = data[: int(query["limitBytes"][0])]
        follow = query.get("follow", ["false"])[0] == "true"
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
    def _answer(request: BaseHTTPRequestHandler, code: int, body: bytes) -> None:
        request.send_response(code)
        request.send_header("Content-Type", "text/plain")
        request.send_header("Content-Length", str(len(body)))
        request.end_headers()
        request.wfile.write(body)
