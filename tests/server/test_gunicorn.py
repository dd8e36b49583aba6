"""The real server command: gunicorn with hooks/gunicorn_conf.py, two workers, on loopback."""

from __future__ import annotations

import http.client
import importlib
import json
import os
import pathlib
import shutil
import signal
import socket
import subprocess
import sys
import time

import pytest
from helpers.requests import mxjob_sync_request
from prometheus_client import CollectorRegistry
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.parser import text_string_to_metric_families

REPO = pathlib.Path(__file__).resolve().parents[2]
GUNICORN = pathlib.Path(sys.executable).with_name("gunicorn")
STARTUP_TIMEOUT = 30.0


def mxjob_request(name: str) -> dict:
    """A valid sync request for a new single-worker MXJob."""
    template = {"spec": {"containers": [{"name": "mxnet", "image": "mxjob/digits:1"}]}}
    return mxjob_sync_request({
        "apiVersion": "kubeflow.org/v1", "kind": "MXJob",
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}", "generation": 1},
        "spec": {"mxReplicaSpecs": {"Worker": {"replicas": 1, "template": template}}}})


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def call(port: int, method: str, path: str, body: bytes | None = None, content_type: str = "application/json"):
    """One request on a fresh connection (so the kernel may hand it to either worker)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        headers = {"Connection": "close"}
        if body is not None:
            headers["Content-Type"] = content_type
        conn.request(method, path, body=body, headers=headers)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


class Server:
    """A running gunicorn and where its metrics and stderr go."""

    def __init__(self, proc: subprocess.Popen, port: int, metrics_dir: pathlib.Path, stderr: pathlib.Path):
        self.proc, self.port, self.metrics_dir, self.stderr = proc, port, metrics_dir, stderr

    def log_lines(self) -> list[str]:
        return [line for line in self.stderr.read_text().splitlines() if line.strip()]


@pytest.fixture
def server(tmp_path):
    metrics_dir = tmp_path / "metrics"
    metrics_dir.mkdir()
    # A leftover from an earlier run: the server must clear it, or old counts would add up.
    (metrics_dir / "counter_1.db").write_bytes(b"stale")
    stderr_path = tmp_path / "stderr.log"
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in {"PORT", "GUNICORN_CMD_ARGS"}}
    env.update(PROMETHEUS_MULTIPROC_DIR=str(metrics_dir), WEB_CONCURRENCY="2")
    with stderr_path.open("wb") as stderr:
        proc = subprocess.Popen(
            [str(GUNICORN), "--config", "python:hooks.server.gunicorn_conf", "--bind", f"127.0.0.1:{port}",
             "hooks.server.app:create_app()"],
            cwd=REPO, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=stderr,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while True:
            if proc.poll() is not None:
                pytest.fail(f"gunicorn exited with {proc.returncode}:\n{stderr_path.read_text()}")
            try:
                if call(port, "GET", "/healthz")[0] == 200:
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"gunicorn did not answer /healthz in {STARTUP_TIMEOUT}s:\n{stderr_path.read_text()}")
            time.sleep(0.1)
        yield Server(proc, port, metrics_dir, stderr_path)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)  # its own session: only this server's processes
                proc.wait(timeout=5)


def ok_count_per_worker(metrics_dir: pathlib.Path, scratch: pathlib.Path) -> dict[str, float]:
    """Each worker's own count of ok syncs, read from its value file alone."""
    counts = {}
    for path in metrics_dir.glob("counter_*.db"):
        alone = scratch / path.stem
        alone.mkdir(exist_ok=True)
        shutil.copy(path, alone / path.name)
        registry = CollectorRegistry()
        MultiProcessCollector(registry, path=str(alone))
        counts[path.stem] = registry.get_sample_value("job_hooks_syncs_total", {"kind": "MXJob", "outcome": "ok"}) or 0.0
    return counts


def scrape(port: int) -> dict[tuple[str, tuple], float]:
    status, body = call(port, "GET", "/metrics")
    assert status == 200
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(body.decode()) for s in family.samples}


def test_two_workers_serve_syncs_and_metrics_add_up_across_them(server, tmp_path):
    assert not (server.metrics_dir / "counter_1.db").exists()

    sent = {"ok": 0, "bad_request": 0}
    deadline = time.monotonic() + 30
    # Keep sending until both workers have answered syncs, so the totals below span two processes.
    while len([c for c in ok_count_per_worker(server.metrics_dir, tmp_path).values() if c > 0]) < 2:
        assert time.monotonic() < deadline, "every sync went to one worker"
        for _ in range(5):
            status, body = call(server.port, "POST", "/sync", json.dumps(mxjob_request(f"job{sent['ok']}")).encode())
            assert status == 200, body
            assert json.loads(body)["children"]
            sent["ok"] += 1
        status, body = call(server.port, "POST", "/sync", b"hello", content_type="text/plain")
        assert status == 400 and b"Content-Type" in body
        sent["bad_request"] += 1

    # Whichever worker answers the scrape, it reports the sum over both.
    for _ in range(6):
        samples = scrape(server.port)
        assert samples[("job_hooks_syncs_total", (("kind", "MXJob"), ("outcome", "ok")))] == sent["ok"]
        assert samples[("job_hooks_syncs_total", (("kind", "MXJob"), ("outcome", "bad_request")))] == sent["bad_request"]
        assert samples[("job_hooks_syncs_total", (("kind", "MXJob"), ("outcome", "error")))] == 0
        assert samples[("job_hooks_sync_duration_seconds_count", (("kind", "MXJob"),))] == sum(sent.values())


def test_the_server_logs_only_json_lines_one_per_sync(server):
    for name in ("alpha", "beta"):
        assert call(server.port, "POST", "/sync", json.dumps(mxjob_request(name)).encode())[0] == 200
    assert call(server.port, "GET", "/healthz")[0] == 200
    assert call(server.port, "GET", "/readyz")[0] == 200
    time.sleep(0.2)  # let the workers' writes reach the file

    entries = [json.loads(line) for line in server.log_lines()]  # fails on any non-JSON line
    syncs = [e for e in entries if e.get("logger") == "hooks.server.app"]
    assert sorted(e["name"] for e in syncs) == ["alpha", "beta"]
    assert all(e["outcome"] == "ok" and e["status"] == 200 and e["children"] == 3 for e in syncs)  # pod, service, config map
    assert any(e.get("logger") == "gunicorn.error" for e in entries)  # gunicorn's own lines are JSON too


# --- the settings themselves -------------------------------------------------------------------

@pytest.fixture
def load_conf(monkeypatch, tmp_path):
    """Re-import hooks.server.gunicorn_conf under the given environment."""
    def load(**env):
        for name in ("PORT", "WEB_CONCURRENCY", "GUNICORN_THREADS"):
            monkeypatch.delenv(name, raising=False)
        # Given, so that importing the settings does not make (and export) a metrics directory of its own.
        monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path / "conf-metrics"))
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        import hooks.server.gunicorn_conf
        return importlib.reload(hooks.server.gunicorn_conf)
    yield load
    import hooks.server.gunicorn_conf
    monkeypatch.undo()
    with pytest.MonkeyPatch.context() as restoring:
        restoring.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path / "conf-metrics"))
        importlib.reload(hooks.server.gunicorn_conf)


@pytest.mark.parametrize(
    ("env", "port", "workers"),
    [
        pytest.param({}, "8080", 2, id="defaults"),
        pytest.param({"PORT": "9000", "WEB_CONCURRENCY": "4"}, "9000", 4, id="from-env"),
    ],
)
def test_settings_follow_the_environment(load_conf, env, port, workers):
    conf = load_conf(**env)
    assert conf.bind == conf.listen_addresses(port, ipv6=conf.ipv6_listening())
    assert all(address.endswith(f":{port}") for address in conf.bind)
    assert conf.workers == workers


# --- IPv4 and IPv6 ----------------------------------------------------------------------------

@pytest.mark.parametrize(
    ("ipv6", "bind"),
    [
        pytest.param("dual", ["[::]:8080"], id="dual-stack-socket"),        # Linux's default (bindv6only=0)
        pytest.param("separate", ["0.0.0.0:8080", "[::]:8080"], id="v6only"),  # net.ipv6.bindv6only=1
        pytest.param("none", ["0.0.0.0:8080"], id="ipv6-disabled"),
    ],
)
def test_listens_on_both_families_where_the_node_has_them(load_conf, ipv6, bind):
    assert load_conf().listen_addresses("8080", ipv6=ipv6) == bind


class _RefusingSocket:
    """socket.socket where the kernel has no IPv6 (ipv6.disable=1): AF_INET6 is refused."""

    def __init__(self, family: int, *args, **kwargs):
        if family == socket.AF_INET6:
            raise OSError(97, "Address family not supported by protocol")
        raise AssertionError("only the IPv6 probe opens a socket")


def test_without_ipv6_the_server_binds_ipv4_only(load_conf, monkeypatch):
    conf = load_conf()
    monkeypatch.setattr(conf.socket, "socket", _RefusingSocket)
    assert conf.ipv6_listening() == "none"
    monkeypatch.setattr(conf.socket, "has_ipv6", False)
    assert conf.ipv6_listening() == "none"


def test_loading_the_settings_survives_a_kernel_without_ipv6(load_conf, monkeypatch):
    monkeypatch.setattr(socket, "socket", _RefusingSocket)
    assert load_conf().bind == ["0.0.0.0:8080"]


def test_the_probe_reads_the_kernels_dual_stack_setting(load_conf):
    if not _has_ipv6_loopback():
        pytest.skip("this machine has no IPv6 loopback")
    with open("/proc/sys/net/ipv6/bindv6only") as sysctl:
        v6only = sysctl.read().strip() == "1"
    assert load_conf().ipv6_listening() == ("separate" if v6only else "dual")


def _has_ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as probe:
            probe.bind(("::1", 0))
    except OSError:
        return False
    return True


def test_the_server_answers_on_ipv4_and_ipv6_loopback(tmp_path):
    """The image's command, unchanged (no --bind): its own bind answers on 127.0.0.1 and ::1."""
    if not _has_ipv6_loopback():
        pytest.skip("this machine has no IPv6 loopback; the IPv4-only branch is tested above")
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in {"GUNICORN_CMD_ARGS"}}
    env.update(PORT=str(port), WEB_CONCURRENCY="1", PROMETHEUS_MULTIPROC_DIR=str(tmp_path / "metrics"))
    proc = subprocess.Popen(
        [str(GUNICORN), "--config", "python:hooks.server.gunicorn_conf", "hooks.server.app:create_app()"],
        cwd=REPO, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + STARTUP_TIMEOUT
        answered: set[str] = set()
        while answered != {"127.0.0.1", "::1"}:
            assert proc.poll() is None, "gunicorn exited"
            assert time.monotonic() < deadline, f"answered only on {answered or 'nothing'}"
            for host in {"127.0.0.1", "::1"} - answered:
                if _healthz(host, port):
                    answered.add(host)
            time.sleep(0.1)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)


def _healthz(host: str, port: int) -> bool:
    try:
        connection = http.client.HTTPConnection(host, port, timeout=2)
        connection.request("GET", "/healthz")
        return connection.getresponse().status == 200
    except OSError:
        return False


def test_a_stuck_worker_is_only_replaced_after_metacontrollers_hook_timeout(load_conf):
    conf = load_conf()
    assert conf.timeout > 10  # Metacontroller's default hook timeout
    assert os.path.isdir(conf.worker_tmp_dir) and os.access(conf.worker_tmp_dir, os.W_OK)


def test_startup_empties_the_metrics_directory_but_keeps_it(load_conf, monkeypatch, tmp_path):
    conf = load_conf()
    metrics_dir = tmp_path / "metrics"
    metrics_dir.mkdir()
    (metrics_dir / "counter_41.db").write_bytes(b"old")
    (metrics_dir / "histogram_41.db").write_bytes(b"old")
    (metrics_dir / "README").write_text("not ours")
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(metrics_dir))
    conf.on_starting(None)
    assert sorted(p.name for p in metrics_dir.iterdir()) == ["README"]


def test_startup_creates_a_missing_metrics_directory(load_conf, monkeypatch, tmp_path):
    conf = load_conf()
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path / "new" / "metrics"))
    conf.on_starting(None)
    assert (tmp_path / "new" / "metrics").is_dir()


def test_started_by_hand_without_a_metrics_dir_the_workers_still_add_up(tmp_path):
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in {"PORT", "GUNICORN_CMD_ARGS", "PROMETHEUS_MULTIPROC_DIR"}}
    env.update(WEB_CONCURRENCY="2", TMPDIR=str(scratch))
    proc = subprocess.Popen(
        [str(GUNICORN), "--config", "python:hooks.server.gunicorn_conf", "--bind", f"127.0.0.1:{port}",
         "hooks.server.app:create_app()"],
        cwd=REPO, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while not list(scratch.glob("mxjob-hooks-metrics-*")) or not _answers(port):
            assert proc.poll() is None and time.monotonic() < deadline, "gunicorn did not start"
            time.sleep(0.1)
        (metrics_dir,) = scratch.glob("mxjob-hooks-metrics-*")
        sent = 0
        while len([c for c in ok_count_per_worker(metrics_dir, tmp_path).values() if c > 0]) < 2:
            assert time.monotonic() < deadline + 30, "every sync went to one worker"
            assert call(port, "POST", "/sync", json.dumps(mxjob_request(f"job-{sent}")).encode())[0] == 200
            sent += 1
        for _ in range(4):  # whichever worker answers the scrape, the total is the same
            assert scrape(port)[("job_hooks_syncs_total", (("kind", "MXJob"), ("outcome", "ok")))] == sent
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
    assert list(scratch.iterdir()) == []  # its own metrics directory is gone with it


def _answers(port: int) -> bool:
    try:
        return call(port, "GET", "/healthz")[0] == 200
    except OSError:
        return False
