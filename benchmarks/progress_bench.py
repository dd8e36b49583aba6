"""What progress reporting costs at scale, on the real control plane: many jobs reporting at once.

Run from the repo root with the control plane built (`make controlplane`, or CONTROLPLANE_BIN=...):
`python benchmarks/progress_bench.py --jobs 1000` (docs/benchmarks.md, "What progress reporting
costs"). It starts a fresh etcd, kube-apiserver and kube-controller-manager, the hooks server
(gunicorn, the Dockerfile's command) and the Metacontroller emulation at `--client-qps`, with every
pod on the no-process node (Running without a process), and:

1. creates `--jobs` MXJobs of one Worker each with `runPolicy.progress: {}`, and waits until every
   pod runs and a round of syncs of every job writes nothing (settled);
2. reports for `--duration` seconds as the helper would, each job's `worker-0` once per
   `--interval` seconds, the jobs spread evenly over the interval: a JSON merge PATCH of the job's
   `<job>-progress` ConfigMap through the API server, as its pod makes it (with the admin client
   here: the pods' own clients are not Metacontroller's budget either way);
3. waits until every job's status.progress shows its last report (caught up).

It prints, per phase: the API server's requests by verb and resource (its own
`apiserver_request_total`), Metacontroller's client calls and their rate against `--client-qps`,
hook calls and their latency (the HTTP exchange, timed in the emulation) at p50 and p99, and the
hooks server's CPU per sync; and for the reports, the status writes and hook calls per report and
how long after the last report every status showed it. It asserts nothing about time.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import platform
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from typing import Any

import urllib3

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "benchmarks")]

from scale_bench import (  # noqa: E402
    CLIENT_BURST,
    NOPROCESS,
    CountingThrottle,
    by_request,
    hooks_cpu_seconds,
    pod_phases,
    resync_round,
    settle,
    writes,
)

from localcluster.cluster import LocalCluster  # noqa: E402


def reporting_job(name: str) -> dict[str, Any]:
    """An MXJob of one Worker (no process) that asks for progress; worker-0 is its reporter."""
    return {"apiVersion": "kubeflow.org/v1", "kind": "MXJob", "metadata": {"name": name, "namespace": "default"},
            "spec": {"jobMode": "MXTrain", "runPolicy": {"progress": {}}, "mxReplicaSpecs": {"Worker": {
                "replicas": 1, "restartPolicy": "Never", "template": {
                    "metadata": {"annotations": dict(NOPROCESS)},
                    "spec": {"containers": [{"name": "mxnet", "image": "mxnet/python:1.9.1_native_py3",
                                             "command": ["python", "train.py"]}]}}}}}}


class Reporters:
    """The jobs' reports: merge PATCHes of each `<job>-progress` entry `worker-0`, spread evenly."""

    def __init__(self, cluster: LocalCluster, names: list[str], interval: float):
        self.store: Any = cluster.store
        self.client = self.store.new_client()
        self.names, self.interval = names, interval
        self.sent: dict[str, int] = {}  # job -> last step sent
        self.failed = 0
        self.late: list[float] = []  # seconds each PATCH was sent after its slot (the sender's own lag)

    def patch(self, name: str, step: int) -> None:
        entry = {"attempt": 0, "step": step, "total": 1_000_000,
                 "time": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")}
        config = self.client.configuration
        headers = {"Accept": "application/json", "Content-Type": "application/merge-patch+json"}
        self.client.update_params_for_auth(headers, [], ["BearerToken"])
        response = self.client.rest_client.pool_manager.request(
            "PATCH", f"{config.host}/api/v1/namespaces/default/configmaps/{name}-progress",
            body=json.dumps({"data": {"worker-0": json.dumps(entry, separators=(",", ":"))}}), headers=headers,
            preload_content=True, timeout=urllib3.Timeout(connect=10, read=30), retries=False)
        if response.status >= 400:
            self.failed += 1
        else:
            self.sent[name] = step

    def run(self, duration: float) -> None:
        start = time.monotonic()
        slots = sorted((i * self.interval / len(self.names) + k * self.interval, name)
                       for i, name in enumerate(self.names) for k in range(int(duration // self.interval) or 1))
        steps = dict.fromkeys(self.names, 0)
        for at, name in slots:
            wait = start + at - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            else:
                self.late.append(-wait)
            steps[name] += 1
            self.patch(name, steps[name])


def caught_up(cluster: LocalCluster, sent: dict[str, int]) -> int:
    """How many jobs' status.progress shows the last step sent to them (read from the informer cache)."""
    store: Any = cluster.store
    shown = {job["metadata"]["name"]: ((job.get("status") or {}).get("progress") or {}).get("step")
             for job in store.list_shared("kubeflow.org/v1", "MXJob")}
    return sum(shown.get(name) == step for name, step in sent.items())


def run(jobs: int, *, qps: float, interval: float, duration: float, timeout: float,
        workdir: pathlib.Path) -> dict[str, Any]:
    row: dict[str, Any] = {"jobs": jobs, "qps": qps, "interval_s": interval, "duration_s": duration}
    names = [f"p-{i}" for i in range(jobs)]
    with LocalCluster(workdir, kubelet_mode="noprocess", client_qps=qps, client_burst=CLIENT_BURST) as cluster:
        assert cluster.control_plane is not None
        plane = cluster.control_plane
        counting = CountingThrottle(cluster.throttle)
        for controller in cluster.controllers.values():
            controller.throttle = counting  # type: ignore[assignment]

        def hook_calls() -> list[float]:
            return [s for c in cluster.controllers.values() for s in list(c.hook_seconds)]

        # 1. Create, until every pod runs and a round of syncs writes nothing.
        before, start = plane.request_counts(), time.monotonic()
        uids = {cluster.submit(reporting_job(name), clear_logs=False)["metadata"]["uid"] for name in names}
        while pod_phases(cluster, uids) != (jobs, jobs):
            if time.monotonic() - start > timeout:
                raise TimeoutError(f"{pod_phases(cluster, uids)} pods (all, Running) after {timeout:g} s")
            time.sleep(0.5)
        row["create_to_running_s"] = time.monotonic() - start
        settle(cluster, quiet=3.0, timeout=timeout)
        for _ in range(5):
            quiet = plane.request_counts()
            resync_round(cluster, uids)
            if not writes(by_request(plane.request_counts(), quiet)):
                break
        row["create_s"] = time.monotonic() - start
        created = plane.request_counts()
        row["create_requests"] = by_request(created, before)
        row["create_client_calls"] = counting.calls
        row["create_hook_calls"] = len(hook_calls())

        # 2. Report for `duration` seconds, then 3. wait until every status shows the last report.
        calls_before, hooks_before, cpu_before = counting.calls, len(hook_calls()), hooks_cpu_seconds(cluster)
        reporters = Reporters(cluster, names, interval)
        start = time.monotonic()
        reporters.run(duration)
        row["report_phase_s"] = time.monotonic() - start
        row["reports"] = sum(reporters.sent.values())
        row["report_failures"] = reporters.failed
        row["sender_late_p99_s"] = statistics.quantiles(reporters.late, n=100)[98] if len(reporters.late) >= 2 else 0.0
        last_sent = time.monotonic()
        while caught_up(cluster, reporters.sent) < len(reporters.sent):
            if time.monotonic() - last_sent > timeout:
                row["caught_up"] = f"{caught_up(cluster, reporters.sent)} of {len(reporters.sent)} after {timeout:g} s"
                break
            time.sleep(0.2)
        row["catch_up_s"] = time.monotonic() - last_sent
        settle(cluster, quiet=3.0, timeout=timeout)
        after = plane.request_counts()
        calls = hook_calls()[hooks_before:]
        row["report_requests"] = by_request(after, created)
        row["report_client_calls"] = counting.calls - calls_before
        row["report_hook_calls"] = len(calls)
        row["report_hook_p50_s"] = statistics.median(calls) if calls else 0.0
        row["report_hook_p99_s"] = statistics.quantiles(calls, n=100)[98] if len(calls) >= 2 else 0.0
        row["report_hooks_cpu_per_sync_s"] = (hooks_cpu_seconds(cluster) - cpu_before) / max(1, len(calls))
        row["errors"] = sorted({e for c in cluster.controllers.values() for u in uids if (e := c.last_error(u))})[:3]
    return row


def summary(row: dict[str, Any]) -> str:
    reports = max(1, row["reports"])
    requests = row["report_requests"]
    status_writes = sum(n for key, n in requests.items() if key.split()[0] in ("PUT", "PATCH") and "mxjobs/status" in key)
    patches = requests.get("PATCH configmaps", 0)
    elapsed = row["report_phase_s"] + row["catch_up_s"]
    lines = [
        f"- {row['jobs']:,} jobs created in {row['create_s']:,.1f} s (all Running at {row['create_to_running_s']:,.1f} s): "
        f"{writes(row['create_requests']):,} API writes, {row['create_client_calls']:,} Metacontroller client calls, "
        f"{row['create_hook_calls']:,} hook calls; requests: {json.dumps(row['create_requests'])}",
        f"- reports: {row['reports']:,} in {row['report_phase_s']:,.1f} s ({row['reports'] / max(row['report_phase_s'], 1e-9):.1f}/s; "
        f"each job every {row['interval_s']:g} s), {row['report_failures']} refused; the sender's lag p99 "
        f"{row['sender_late_p99_s']:.2f} s",
        f"- per report: {patches / reports:.2f} ConfigMap PATCH, {status_writes / reports:.2f} status writes, "
        f"{row['report_client_calls'] / reports:.2f} Metacontroller client calls, "
        f"{row['report_hook_calls'] / reports:.2f} hook calls",
        f"- Metacontroller's client: {row['report_client_calls']:,} calls in {elapsed:,.1f} s = "
        f"{row['report_client_calls'] / max(elapsed, 1e-9):.1f}/s against {row['qps']:g}/s",
        f"- every status showed its job's last report {row['catch_up_s']:.1f} s after the last report"
        + (f" (NOT caught up: {row['caught_up']})" if "caught_up" in row else ""),
        f"- hook calls while reporting: p50 {row['report_hook_p50_s'] * 1000:.1f} ms, p99 "
        f"{row['report_hook_p99_s'] * 1000:.1f} ms; hooks CPU per sync {row['report_hooks_cpu_per_sync_s'] * 1000:.1f} ms",
        f"- requests while reporting: {json.dumps(requests)}",
    ]
    if row["errors"]:
        lines.append(f"- sync errors: {row['errors']}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1000, help="reporting MXJobs (1000)")
    parser.add_argument("--client-qps", type=float, default=50.0, help="Metacontroller's client rate (50)")
    parser.add_argument("--interval", type=float, default=30.0, help="seconds between a job's reports (30, the helper's)")
    parser.add_argument("--duration", type=float, default=90.0, help="seconds of reporting (90)")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds per phase (1800)")
    parser.add_argument("--json", type=pathlib.Path, default=None, help="also write the row, requests included, here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="progress-bench-") as tmp:
        row = run(args.jobs, qps=args.client_qps, interval=args.interval, duration=args.duration,
                  timeout=args.timeout, workdir=pathlib.Path(tmp))
    print(f"{platform.python_implementation()} {platform.python_version()}, {os.cpu_count()} CPUs, "
          f"{datetime.now(UTC):%Y-%m-%d}; every pod on the no-process node; `{' '.join(sys.argv)}`\n")
    print(summary(row))
    if args.json:
        args.json.write_text(json.dumps(row, indent=1))


if __name__ == "__main__":
    main()
