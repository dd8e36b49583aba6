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
   here: the pods' own clients are not Metacontroller's budget either way). `--senders` threads
   send them, each with its own client and kept-alive connections, each taking the next report due,
   so one slow PATCH does not hold back the schedule;
3. waits until every job's status.progress shows its last report (caught up).

It prints, per phase: the API server's requests by verb and resource (its own
`apiserver_request_total`), Metacontroller's client calls and their rate against `--client-qps`,
hook calls and their latency (the HTTP exchange, timed in the emulation) at p50 and p99, and the
hooks server's CPU per sync; and for the reports, the status writes and hook calls per report and
how long after the last report every status showed it. It asserts nothing about time, but it checks
that it offered the load it was asked for: when the reports went out slower than `--jobs` /
`--interval` per second (the senders fell behind), it says so first and last in its output, in
capitals, and exits with status 1, so such a run cannot pass for one that offered the load.
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
import threading
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


# A run offered the load when its reports went out at this share of the planned rate or more.
OFFERED_SHARE = 0.95


def schedule(jobs: int, interval: float, duration: float) -> list[tuple[float, int, int]]:
    """Every report as (seconds from the start, job index, step), in time order.

    Each job reports once per `interval` for `duration // interval` rounds (at least one), the jobs
    spread evenly over the interval, so the planned rate is `jobs / interval` per second.
    """
    rounds = max(1, int(duration // interval))
    return sorted((k * interval + i * interval / jobs, i, k + 1) for k in range(rounds) for i in range(jobs))


def offered_load(jobs: int, interval: float, sent: int, seconds: float) -> dict[str, Any]:
    """The rate the reports went out at against the planned `jobs / interval`, and whether it was offered."""
    planned = jobs / interval
    offered = sent / max(seconds, 1e-9)
    return {"planned_per_s": planned, "offered_per_s": offered, "offered": offered >= OFFERED_SHARE * planned}


class Reporters:
    """The jobs' reports: merge PATCHes of each `<job>-progress` entry `worker-0`, spread evenly.

    `senders` threads share the schedule: each takes the next report due, sleeps until its time and
    sends it with its own client (urllib3 keeps its connection alive), so the reports keep their
    schedule while a PATCH waits on a loaded API server; one thread did not (13.3 of 33 reports/s).
    """

    def __init__(self, cluster: LocalCluster, names: list[str], interval: float, senders: int):
        store: Any = cluster.store
        self.clients = [store.new_client() for _ in range(senders)]
        self.names, self.interval = names, interval
        self.sent: dict[str, int] = {}  # job -> last step sent
        self.attempts = 0
        self.failed = 0
        self.late: list[float] = []  # seconds each PATCH was sent after its slot, 0 when on time (the sender's own lag)
        self._lock = threading.Lock()
        self._due: list[tuple[float, int, int]] = []

    def patch(self, client: Any, name: str, step: int) -> None:
        entry = {"attempt": 0, "step": step, "total": 1_000_000,
                 "time": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")}
        config = client.configuration
        headers = {"Accept": "application/json", "Content-Type": "application/merge-patch+json"}
        client.update_params_for_auth(headers, [], ["BearerToken"])
        try:
            response = client.rest_client.pool_manager.request(
                "PATCH", f"{config.host}/api/v1/namespaces/default/configmaps/{name}-progress",
                body=json.dumps({"data": {"worker-0": json.dumps(entry, separators=(",", ":"))}}), headers=headers,
                preload_content=True, timeout=urllib3.Timeout(connect=10, read=30), retries=False)
            ok = response.status < 400
        except urllib3.exceptions.HTTPError:
            ok = False  # a refused or timed-out report is counted, as the helper would drop it
        with self._lock:
            self.attempts += 1
            if ok:
                self.sent[name] = step
            else:
                self.failed += 1

    def send(self, client: Any, start: float) -> None:
        while True:
            with self._lock:
                if not self._due:
                    return
                at, index, step = self._due.pop()
            wait = start + at - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            self.late.append(max(0.0, -wait))
            self.patch(client, self.names[index], step)

    def run(self, duration: float) -> None:
        self._due = schedule(len(self.names), self.interval, duration)[::-1]  # popped from the end: earliest first
        start = time.monotonic()
        threads = [threading.Thread(target=self.send, args=(client, start), name=f"reporter-{n}", daemon=True)
                   for n, client in enumerate(self.clients)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()


def caught_up(cluster: LocalCluster, sent: dict[str, int]) -> int:
    """How many jobs' status.progress shows the last step sent to them (read from the informer cache)."""
    store: Any = cluster.store
    shown = {job["metadata"]["name"]: ((job.get("status") or {}).get("progress") or {}).get("step")
             for job in store.list_shared("kubeflow.org/v1", "MXJob")}
    return sum(shown.get(name) == step for name, step in sent.items())


def run(jobs: int, *, qps: float, interval: float, duration: float, senders: int, timeout: float,
        workdir: pathlib.Path) -> dict[str, Any]:
    row: dict[str, Any] = {"jobs": jobs, "qps": qps, "interval_s": interval, "duration_s": duration,
                           "senders": senders}
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
        reporters = Reporters(cluster, names, interval, senders)
        start = time.monotonic()
        reporters.run(duration)
        row["report_phase_s"] = time.monotonic() - start
        row["reports_sent"] = reporters.attempts
        row["reports"] = reporters.attempts - reporters.failed
        row["report_failures"] = reporters.failed
        row["sender_late_p99_s"] = statistics.quantiles(reporters.late, n=100)[98] if len(reporters.late) >= 2 else 0.0
        row["sender_late_max_s"] = max(reporters.late, default=0.0)
        row.update(offered_load(jobs, interval, reporters.attempts, row["report_phase_s"]))
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


def not_offered(row: dict[str, Any]) -> str | None:
    """The loud line for a run whose senders fell behind, or None when it offered the planned load."""
    if row["offered"]:
        return None
    return (f"!!! THIS RUN DID NOT OFFER THE PLANNED LOAD: reports went out at {row['offered_per_s']:.1f}/s, "
            f"not the planned {row['planned_per_s']:.1f}/s ({row['jobs']:,} jobs every {row['interval_s']:g} s; "
            f"{row['offered_per_s'] / row['planned_per_s']:.0%}, under {OFFERED_SHARE:.0%}), the senders' lag p99 "
            f"{row['sender_late_p99_s']:.1f} s: its numbers are for a lighter load. Add --senders or quiet the machine.")


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
        f"- reports: {row['reports_sent']:,} sent in {row['report_phase_s']:,.1f} s by {row['senders']} "
        f"sender thread{'s' if row['senders'] != 1 else ''}: "
        f"{row['offered_per_s']:.1f}/s of the planned {row['planned_per_s']:.1f}/s (each job every {row['interval_s']:g} s), "
        f"{row['report_failures']} refused; the senders' lag behind the schedule p99 {row['sender_late_p99_s']:.2f} s, "
        f"max {row['sender_late_max_s']:.2f} s",
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
    if warning := not_offered(row):
        lines = [warning, *lines, warning]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1000, help="reporting MXJobs (1000)")
    parser.add_argument("--client-qps", type=float, default=50.0, help="Metacontroller's client rate (50)")
    parser.add_argument("--interval", type=float, default=30.0, help="seconds between a job's reports (30, the helper's)")
    parser.add_argument("--duration", type=float, default=90.0, help="seconds of reporting (90)")
    parser.add_argument("--senders", type=int, default=8, help="threads sending the reports (8)")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds per phase (1800)")
    parser.add_argument("--json", type=pathlib.Path, default=None, help="also write the row, requests included, here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="progress-bench-") as tmp:
        row = run(args.jobs, qps=args.client_qps, interval=args.interval, duration=args.duration,
                  senders=args.senders, timeout=args.timeout, workdir=pathlib.Path(tmp))
    print(f"{platform.python_implementation()} {platform.python_version()}, {os.cpu_count()} CPUs, "
          f"{datetime.now(UTC):%Y-%m-%d}; every pod on the no-process node; `{' '.join(sys.argv)}`\n")
    print(summary(row))
    if args.json:
        args.json.write_text(json.dumps(row, indent=1))
    if not row["offered"]:
        sys.exit(1)


if __name__ == "__main__":
    main()
