"""A short load test: concurrent clients against the real gunicorn command on 127.0.0.1.

Run from the repo root: `python benchmarks/load_bench.py [--seconds 10] [--clients 8]`. For each
workload it starts gunicorn twice, once with the real app and once with the same stack answering a
fixed body (the core replaced by a constant: the overhead floor of gunicorn, Flask, JSON and
logging), runs the clients for a bounded time and prints a markdown table: requests/s, p50/p99
latency, status codes seen, and the workers' RSS before and after. Workloads: `steady` (the sync
of a running 50-replica job) and `hostile` (every body in tests/fuzz_repro/, in turn). It asserts
nothing about time.
"""
from __future__ import annotations

import argparse
import http.client
import itertools
import json
import os
import pathlib
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from datetime import UTC, datetime
from typing import Any

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from sync_bench import steady_state_request  # noqa: E402

FIXED_ANSWER = {"status": {}, "children": []}


def fixed_app() -> Any:
    """The hooks app with the MXJob core replaced by a constant answer: the overhead floor."""
    from dataclasses import replace

    from hooks.kinds import KINDS, MXJOB
    from hooks.server.app import create_app

    def fixed(request: Any, *, now: Any) -> Any:
        return FIXED_ANSWER

    return create_app(kinds=tuple(replace(kind, sync=fixed) if kind is MXJOB else kind for kind in KINDS))


def workload(name: str) -> list[bytes]:
    if name == "steady":
        return [json.dumps(steady_state_request(50, datetime(2026, 3, 1, 9, 5, tzinfo=UTC))).encode()]
    return [p.read_bytes() for p in sorted((REPO / "tests" / "fuzz_repro").rglob("*.json"))
            if not p.name.endswith(".meta.json")]


class Server:
    def __init__(self, app: str, workers: int):
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = sock.getsockname()[1]
        env = {k: v for k, v in os.environ.items() if k not in {"PROMETHEUS_MULTIPROC_DIR", "PORT"}}
        self.proc = subprocess.Popen(
            [str(pathlib.Path(sys.executable).with_name("gunicorn")), "--config",
             "python:hooks.server.gunicorn_conf", "--bind", f"127.0.0.1:{self.port}",
             "--workers", str(workers), "--pythonpath", "benchmarks", app],
            cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True)
        deadline = time.monotonic() + 30
        while True:
            try:
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
                conn.request("GET", "/healthz")
                if conn.getresponse().status == 200:
                    return
            except OSError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    self.stop()
                    raise SystemExit("gunicorn did not start") from None
                time.sleep(0.1)

    def worker_rss_mib(self) -> list[float]:
        """VmRSS of each worker (the master's children), from /proc."""
        rss = []
        for status in pathlib.Path("/proc").glob("[0-9]*/status"):
            try:
                fields = dict(line.split(":", 1) for line in status.read_text().splitlines() if ":" in line)
            except OSError:
                continue
            if fields.get("PPid", "").strip() == str(self.proc.pid) and "VmRSS" in fields:
                rss.append(int(fields["VmRSS"].split()[0]) / 1024)
        return sorted(rss)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)


def run_clients(port: int, bodies: list[bytes], *, clients: int, seconds: float) -> dict[str, Any]:
    latencies: list[float] = []
    codes: Counter[int] = Counter()
    lock = threading.Lock()
    stop_at = time.monotonic() + seconds

    def client(offset: int) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        mine, seen = [], Counter()
        for body in itertools.islice(itertools.cycle(bodies), offset, None):
            if time.monotonic() >= stop_at:
                break
            start = time.perf_counter()
            conn.request("POST", "/sync", body=body, headers={"Content-Type": "application/json"})
            response = conn.getresponse()
            response.read()
            mine.append(time.perf_counter() - start)
            seen[response.status] += 1
            if response.getheader("Connection", "").lower() == "close":
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        conn.close()
        with lock:
            latencies.extend(mine)
            codes.update(seen)

    started = time.monotonic()
    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - started
    latencies.sort()
    return {"rps": len(latencies) / elapsed,
            "p50_ms": latencies[len(latencies) // 2] * 1000,
            "p99_ms": latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] * 1000,
            "codes": dict(sorted(codes.items()))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="load duration per run")
    parser.add_argument("--clients", type=int, default=8, help="concurrent keep-alive clients")
    parser.add_argument("--workers", type=int, default=2, help="gunicorn workers (the Deployment's)")
    parser.add_argument("--workloads", default="steady,hostile")
    args = parser.parse_args()
    print(f"{args.clients} clients, {args.seconds:g} s per run, {args.workers} gunicorn workers, "
          f"{os.cpu_count()} CPUs\n")
    print("| workload | app | requests/s | p50 (ms) | p99 (ms) | status codes | worker RSS before → after (MiB) |")
    print("|---|---|---:|---:|---:|---|---|")
    for name in args.workloads.split(","):
        bodies = workload(name)
        for label, app in (("hooks", "hooks.server.app:create_app()"),
                           ("fixed answer", "load_bench:fixed_app()")):
            server = Server(app, args.workers)
            try:
                # Every worker serves a few requests first, so "before" is a warm worker.
                run_clients(server.port, bodies, clients=args.workers * 2, seconds=1)
                before = server.worker_rss_mib()
                result = run_clients(server.port, bodies, clients=args.clients, seconds=args.seconds)
                after = server.worker_rss_mib()
            finally:
                server.stop()
            rss = f"{', '.join(f'{r:.0f}' for r in before)} → {', '.join(f'{r:.0f}' for r in after)}"
            print(f"| {name} ({len(bodies)} bodies) | {label} | {result['rps']:,.0f} | "
                  f"{result['p50_ms']:.1f} | {result['p99_ms']:.1f} | {result['codes']} | {rss} |",
                  flush=True)


if __name__ == "__main__":
    main()
