"""Real MXNet under the real write order (Pods before their Services) and strict names: what a cluster shows.

ps-lite's workers and servers wait for a late scheduler name; the scheduler survives only because
the hook sets DMLC_USE_KUBERNETES=1 (it then binds 0.0.0.0). Without it, it takes its own name as a
literal bind address and exits 1 (`bind failed`) when the name does not resolve yet, as measured
with MXNet 1.9.1 (docs/localcluster.md, "DNS")."""
from __future__ import annotations

import http.client
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from helpers import yamlio
from helpers.cluster import why_it_ended
from helpers.engines import cluster_under

from hooks.mxjob.network import PER_JOB, SERVICE_ANNOTATION
from localcluster.cluster import LocalCluster, finished
from localcluster.controlplane.processes import ControlPlane
from localcluster.hooks_server import HooksServer
from localcluster.node.dns import strict_dns_unavailable

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "local" / "dist-train-digits.yaml"
pytestmark = [pytest.mark.e2e, pytest.mark.apiserver, pytest.mark.mxnet,
              pytest.mark.skipif(strict_dns_unavailable() is not None,
                                 reason=f"strict DNS cannot run here: {strict_dns_unavailable()}")]


@contextmanager
def hooks_without(variable: str, log: Path) -> Iterator[str]:
    """The real hooks server behind a proxy that drops one env variable from every container it answers."""
    hooks = HooksServer(log)
    hooks.start()
    backend = urlsplit(hooks.url)

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            conn = http.client.HTTPConnection(backend.hostname or "127.0.0.1", backend.port or 80, timeout=10)
            conn.request("POST", self.path, body=body, headers={"Content-Type": "application/json"})
            response = conn.getresponse()
            payload = response.read()
            if response.status == 200:
                answer = json.loads(payload)
                for child in answer.get("children") or []:
                    for container in (child.get("spec") or {}).get("containers") or []:
                        container["env"] = [e for e in container.get("env") or [] if e.get("name") != variable]
                payload = json.dumps(answer).encode()
            self.send_response(response.status)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        hooks.stop()


def test_the_digits_example_succeeds_with_the_real_write_order_and_strict_names(tmp_path: Path, cluster_plane: ControlPlane):
    with LocalCluster(tmp_path / "state", control_plane=cluster_plane) as cluster:
        assert cluster.dns.strict
        assert cluster.throttle.qps == 5.0  # Metacontroller's client rate
        cluster.submit(yamlio.load(EXAMPLE.read_text()))
        done = cluster.wait_finished("dist-train-digits", timeout=150)
        scheduler = cluster.log_path("dist-train-digits-scheduler-0").read_text()
        story = why_it_ended(cluster, done)
    assert finished(done) == "Succeeded", story
    assert "the scheduler is connected to 2 workers and 1 servers" in scheduler


def test_the_digits_example_succeeds_with_one_service_per_job(tmp_path: Path, cluster_plane: ControlPlane, metacontroller: str):
    """The per-job opt-in: one headless Service, every peer named `<pod>.<job>` (MX_CONFIG's urls,
    DMLC_PS_ROOT_URI), resolvable only once that Service exists and that pod runs, as in a cluster."""
    job = yamlio.load(EXAMPLE.read_text())
    job["metadata"]["annotations"] = {SERVICE_ANNOTATION: PER_JOB}
    with cluster_under(tmp_path / "state", metacontroller, control_plane=cluster_plane) as cluster:
        assert cluster.dns.strict
        cluster.submit(job)
        cluster.wait_for(lambda: len(cluster.pods("dist-train-digits")) == 4
                         and cluster.children_of("dist-train-digits", "v1", "Service"), 60, what="the pods and the Service")
        services = [s["metadata"]["name"] for s in cluster.children_of("dist-train-digits", "v1", "Service")]
        pods = cluster.pods("dist-train-digits")
        done = cluster.wait_finished("dist-train-digits", timeout=150)
        scheduler = cluster.log_path("dist-train-digits-scheduler-0").read_text()
    assert services == ["dist-train-digits"]
    for pod in pods:
        assert (pod["spec"]["hostname"], pod["spec"]["subdomain"]) == (pod["metadata"]["name"], "dist-train-digits")
        env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
        assert env["DMLC_PS_ROOT_URI"] == "dist-train-digits-scheduler-0.dist-train-digits"
    assert finished(done) == "Succeeded"
    assert "the scheduler is connected to 2 workers and 1 servers" in scheduler


def test_without_dmlc_use_kubernetes_the_scheduler_cannot_bind_its_late_name_and_the_job_fails(tmp_path: Path, cluster_plane: ControlPlane):
    with hooks_without("DMLC_USE_KUBERNETES", tmp_path / "hooks.log") as url, \
            LocalCluster(tmp_path / "state", control_plane=cluster_plane, hook_url=url) as cluster:
        cluster.submit(yamlio.load(EXAMPLE.read_text()))
        done = cluster.wait_finished("dist-train-digits", timeout=120)
        scheduler = cluster.log_path("dist-train-digits-scheduler-0").read_text()
    assert finished(done) == "Failed"
    assert "bind failed" in scheduler
