"""Big jobs and many jobs on the real control plane: what they cost the API server, Metacontroller's
client budget and the hooks server.

Run from the repo root with the control plane built (`make controlplane`, or CONTROLPLANE_BIN=...):
`python benchmarks/scale_bench.py` (or `make bench-scale`; `--quick` for the sizes that fit a few
minutes). Each scenario starts a fresh etcd, kube-apiserver and kube-controller-manager, the hooks
server (gunicorn, the Dockerfile's command) and the Metacontroller emulation, with every pod on the
no-process node (localcluster/node/noprocess.py: Running without a process). It prints a markdown table
and asserts nothing about time.

Per scenario:
- the time from the apply to every pod Running, and to the last write (every child created, the
  status written), against its floor: the Metacontroller client calls until then divided by the
  client rate (`--client-qps`, burst 10);
- API requests by verb and resource, from the API server's own `apiserver_request_total`;
- hook calls and their latency (the HTTP exchange, timed in the emulation, as Metacontroller's
  timeout counts it) at p50 and p99, each against Metacontroller's 10 s hook timeout;
- the hooks server's CPU seconds (gunicorn's workers, from /proc) per sync;
- once settled (no write for a few seconds), the writes of `--resyncs` forced resyncs of every job:
  the API server's write count, which must be 0 (kube-controller-manager's Lease renewals, which
  come every few seconds whatever the jobs do, are not counted).
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

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from localcluster.cluster import LocalCluster  # noqa: E402
from localcluster.store import controller_uid  # noqa: E402

WRITES = ("POST", "PUT", "PATCH", "DELETE")
HOOK_TIMEOUT = 10.0  # Metacontroller's default sync hook timeout
CLIENT_BURST = 10
NOPROCESS = {"localcluster.kubeflow.org/kubelet": "noprocess"}


SERVICE_ANNOTATION = "training.kubeflow.org/headless-service"  # hooks.mxjob.network
SERVICE_LAYOUTS = ("per-replica", "per-job")


def mxjob(name: str, replicas: int, services: str = "per-replica") -> dict[str, Any]:
    """1 Scheduler, a tenth Servers, the rest Workers (as benchmarks/sync_bench.py); `services`: one
    headless Service per replica (the default) or one per job (the annotation's opt-in)."""
    servers = max(1, replicas // 10)

    def replica(count: int) -> dict[str, Any]:
        return {"replicas": count, "restartPolicy": "Never", "template": {
            "metadata": {"annotations": dict(NOPROCESS)},
            "spec": {"containers": [{"name": "mxnet", "image": "mxnet/python:1.9.1_native_py3",
                                     "command": ["python", "train.py"], "ports": [{"containerPort": 9091}]}]}}}

    metadata: dict[str, Any] = {"name": name, "namespace": "default"}
    if services != "per-replica":
        metadata["annotations"] = {SERVICE_ANNOTATION: services}
    return {"apiVersion": "kubeflow.org/v1", "kind": "MXJob", "metadata": metadata,
            "spec": {"jobMode": "MXTrain", "mxReplicaSpecs": {
                "Scheduler": replica(1), "Server": replica(servers), "Worker": replica(replicas - 1 - servers)}}}


def chainerjob(name: str, workers: int) -> dict[str, Any]:
    """An MPI ChainerJob: a master Job and one worker set (a StatefulSet) of `workers`."""
    def template() -> dict[str, Any]:
        return {"metadata": {"annotations": dict(NOPROCESS)},
                "spec": {"containers": [{"name": "chainer", "image": "everpeace/chainermn:1.3.0",
                                         "command": ["sh", "-c", "sleep infinity"]}]}}

    return {"apiVersion": "kubeflow.org/v1alpha1", "kind": "ChainerJob", "metadata": {"name": name, "namespace": "default"},
            "spec": {"backend": "mpi", "master": {"template": template()},
                     "workerSets": {"ws0": {"replicas": workers, "template": template()}}}}


class CountingThrottle:
    """Counts the Metacontroller client's calls (each takes one token of the shared throttle)."""

    def __init__(self, throttle: Any):
        self.throttle, self.calls = throttle, 0
        self._lock = threading.Lock()

    def take(self) -> None:
        with self._lock:
            self.calls += 1
        self.throttle.take()


def hooks_cpu_seconds(cluster: LocalCluster) -> float:
    """User + system CPU seconds of the hooks server's gunicorn processes (master and workers) so far."""
    process = getattr(cluster.hooks, "_process", None)
    if process is None:
        return 0.0
    tick = os.sysconf("SC_CLK_TCK")
    pids = [process.pid] + pathlib.Path(f"/proc/{process.pid}/task/{process.pid}/children").read_text().split()
    total = 0.0
    for pid in pids:
        try:
            fields = pathlib.Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
        except FileNotFoundError:
            continue
        total += (int(fields[11]) + int(fields[12])) / tick  # utime, stime
    return total


def writes(counts: dict[str, int]) -> int:
    """Write requests, without the control plane's own leader-election lease renewals (kube-controller-manager
    renews its Lease every few seconds whatever the jobs do)."""
    return sum(n for key, n in counts.items() if key.split()[0] in WRITES and key.split()[1] != "leases")


def by_request(after: dict[tuple[str, str, str], int], before: dict[tuple[str, str, str], int]) -> dict[str, int]:
    out = {}
    for (verb, resource, sub), n in sorted(after.items()):
        diff = n - before.get((verb, resource, sub), 0)
        if diff:
            out[f"{verb} {resource}{'/' + sub if sub else ''}"] = diff
    return out


def pod_phases(cluster: LocalCluster, owners: set[str]) -> tuple[int, int]:
    """(pods of these jobs (and of their Jobs and StatefulSets), of which Running): read from the informer cache."""
    store: Any = cluster.store
    owned = set(owners)
    for api_version, kind in (("batch/v1", "Job"), ("apps/v1", "StatefulSet")):
        owned |= {o["metadata"]["uid"] for o in store.list_shared(api_version, kind) if controller_uid(o) in owners}
    total = running = 0
    for pod in store.list_shared("v1", "Pod"):
        if controller_uid(pod) in owned:
            total += 1
            running += (pod.get("status") or {}).get("phase") == "Running"
    return total, running


def settle(cluster: LocalCluster, quiet: float, timeout: float) -> float:
    """Wait until the API server has served no write for `quiet` seconds; the seconds until its last write."""
    assert cluster.control_plane is not None
    start = time.monotonic()
    last = writes(by_request(cluster.control_plane.request_counts(), {}))
    quiet_since = time.monotonic()
    while time.monotonic() - start < timeout:
        time.sleep(0.5)
        now = writes(by_request(cluster.control_plane.request_counts(), {}))
        if now != last:
            last, quiet_since = now, time.monotonic()
        elif time.monotonic() - quiet_since >= quiet:
            break
    return quiet_since - start


def resync_round(cluster: LocalCluster, uids: set[str]) -> None:
    """One sync of every job (each after the one before), then a second for the last writes to show in the metrics."""
    for controller in cluster.controllers.values():
        for uid in uids:
            if controller.syncs(uid):
                done = controller.syncs(uid)
                controller.enqueue(uid)
                cluster.wait_for(lambda c=controller, u=uid, d=done: c.syncs(u) > d, 300, what="one more sync")
    time.sleep(1.0)


def run_scenario(label: str, jobs: list[dict[str, Any]], pods_expected: int, *, qps: float, resyncs: int,
                 timeout: float, workdir: pathlib.Path) -> dict[str, Any]:
    row: dict[str, Any] = {"scenario": label, "qps": qps, "jobs": len(jobs), "pods": pods_expected}
    with LocalCluster(workdir, kubelet_mode="noprocess", client_qps=qps,
                      client_burst=CLIENT_BURST) as cluster:
        assert cluster.control_plane is not None
        counting = CountingThrottle(cluster.throttle)
        for controller in cluster.controllers.values():
            controller.throttle = counting  # type: ignore[assignment]

        def hook_calls() -> list[float]:
            return [s for c in cluster.controllers.values() for s in list(c.hook_seconds)]

        before = cluster.control_plane.request_counts()
        cpu_before = hooks_cpu_seconds(cluster)
        start = time.monotonic()
        uids = {cluster.submit(job, clear_logs=False)["metadata"]["uid"] for job in jobs}
        seen = (0, 0)
        while True:
            seen = pod_phases(cluster, uids)
            if seen == (pods_expected, pods_expected):
                break
            if time.monotonic() - start > timeout:
                row["timed_out"] = f"{seen[1]} of {pods_expected} pods Running after {timeout:g} s"
                break
            time.sleep(0.5)
        row["to_running_s"] = time.monotonic() - start
        row["client_calls_to_running"] = counting.calls
        running = cluster.control_plane.request_counts()
        row["to_settled_s"] = row["to_running_s"] + settle(cluster, quiet=3.0, timeout=timeout)
        row["client_calls_to_settled"] = counting.calls
        # Quiet is not settled: a sync of a big job can take longer than the quiet time before its
        # status write. Settled is a round of syncs of every job that writes nothing.
        for _ in range(5):
            quiet = cluster.control_plane.request_counts()
            resync_round(cluster, uids)
            if not writes(by_request(cluster.control_plane.request_counts(), quiet)):
                break
        settled = cluster.control_plane.request_counts()
        calls = hook_calls()
        syncs_to_settled = len(calls)
        cpu_settled = hooks_cpu_seconds(cluster)
        syncs_done = {c.config.parent_kind: len(c.sync_seconds) for c in cluster.controllers.values()}
        for _ in range(resyncs):  # forced resyncs of every job, one round after another, as resyncPeriodSeconds would
            resync_round(cluster, uids)
        after = cluster.control_plane.request_counts()
        resync_calls = hook_calls()[syncs_to_settled:]
        resync_syncs = [s for c in cluster.controllers.values() for s in list(c.sync_seconds)[syncs_done[c.config.parent_kind]:]]
        row["resync_sync_p50_s"] = statistics.median(resync_syncs) if resync_syncs else 0.0
        row["requests_to_running"] = by_request(running, before)
        row["requests_to_settled"] = by_request(settled, before)
        row["resync_requests"] = by_request(after, settled)
        row["resync_writes"] = writes(row["resync_requests"])
        row["resyncs"] = len(resync_calls)
        row["hook_calls"] = syncs_to_settled
        row["hook_p50_s"] = statistics.median(calls) if calls else 0.0
        row["hook_p99_s"] = statistics.quantiles(calls, n=100)[98] if len(calls) >= 2 else (calls or [0.0])[0]
        row["hook_max_s"] = max(calls) if calls else 0.0
        row["resync_hook_p50_s"] = statistics.median(resync_calls) if resync_calls else 0.0
        row["hooks_cpu_s"] = cpu_settled - cpu_before
        row["hooks_cpu_per_sync_s"] = (cpu_settled - cpu_before) / max(1, syncs_to_settled)
        row["hooks_cpu_per_resync_s"] = (hooks_cpu_seconds(cluster) - cpu_settled) / max(1, len(resync_calls))
        row["errors"] = sorted({e for c in cluster.controllers.values() for u in uids if (e := c.last_error(u))})[:3]
    return row


def table(rows: list[dict[str, Any]]) -> str:
    head = ["scenario", "client qps", "pods", "apply → all Running (s)", "apply → last write (s)", "client calls",
            "floor: calls ÷ qps (s)", "ratio to floor", "API writes", "hook calls", "hook p50 (s)", "hook p99 (s)",
            "p99 ÷ 10 s timeout", "hooks CPU per sync (ms)", "settled resync p50: hook / whole sync (s)",
            "writes per resync (limit 0)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(["---"] + ["---:"] * (len(head) - 1)) + "|"]
    for r in rows:
        floor = r["client_calls_to_settled"] / r["qps"]
        per_resync = r["resync_writes"] / max(1, r["resyncs"])
        cells = [r["scenario"] + (f" (timed out: {r['timed_out']})" if "timed_out" in r else ""), f"{r['qps']:g}",
                 f"{r['pods']:,}", f"{r['to_running_s']:,.1f}", f"{r['to_settled_s']:,.1f}",
                 f"{r['client_calls_to_settled']:,}", f"{floor:,.1f}",
                 f"{r['to_settled_s'] / floor:.2f}x" if floor else "-", f"{writes(r['requests_to_settled']):,}",
                 f"{r['hook_calls']:,}", f"{r['hook_p50_s']:.3f}", f"{r['hook_p99_s']:.3f}",
                 f"{r['hook_p99_s'] / HOOK_TIMEOUT:.3f}", f"{r['hooks_cpu_per_sync_s'] * 1000:,.0f}",
                 f"{r['resync_hook_p50_s']:.2f} / " + (f"{r['resync_sync_p50_s']:.2f}" if "resync_sync_p50_s" in r else "-"),
                 f"{per_resync:g} ({r['resync_writes']} in {r['resyncs']})"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _layout(services: str) -> str:
    return "" if services == "per-replica" else f", {services} Service"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="what fits a few minutes on 2 cores: 100 and 1,000 replicas at 50/s, 100 at 5/s, 10 + 10 jobs")
    parser.add_argument("--replicas", type=int, nargs="*", default=None, help="sizes of the one-job scenario (100 1000 2500)")
    parser.add_argument("--client-qps", type=float, nargs="+", default=None, help="Metacontroller's client rates (5 50)")
    parser.add_argument("--many", type=int, default=None, help="concurrent MXJobs and ChainerJobs each (100); 0: none")
    parser.add_argument("--many-replicas", type=int, default=50, help="replicas of each of the many MXJobs (50)")
    parser.add_argument("--many-qps", type=float, default=None, help="client rate of the many-jobs scenario (50)")
    parser.add_argument("--services", nargs="+", choices=SERVICE_LAYOUTS, default=["per-replica"],
                        help="the MXJobs' headless Service layouts to run (per-replica; per-job is the opt-in)")
    parser.add_argument("--resyncs", type=int, default=3, help="forced resync rounds once settled (3)")
    parser.add_argument("--timeout", type=float, default=3600.0, help="seconds per scenario phase (3600)")
    parser.add_argument("--json", type=pathlib.Path, default=None, help="also write every row, requests included, here")
    args = parser.parse_args()
    sizes = args.replicas if args.replicas is not None else ([100, 1000] if args.quick else [100, 1000, 2500])
    rates = args.client_qps or [5.0, 50.0]
    many = args.many if args.many is not None else (10 if args.quick else 100)
    many_qps = args.many_qps or 50.0

    plan: list[tuple[str, list[dict[str, Any]], int, float]] = []
    for qps in rates:
        for replicas in sizes:
            if args.quick and qps < 50 and replicas > 100:
                continue  # 2 writes per replica at 5/s: 1,000 replicas is 400 s at the least
            for services in args.services:
                plan.append((f"1 MXJob × {replicas:,} replicas{_layout(services)}",
                             [mxjob(f"big-{replicas}", replicas, services)], replicas, qps))
    if many:
        for services in args.services:
            plan.append((f"{many} MXJobs × {args.many_replicas} replicas{_layout(services)}",
                         [mxjob(f"mx-{i}", args.many_replicas, services) for i in range(many)],
                         many * args.many_replicas, many_qps))
        plan.append((f"{many} ChainerJobs (master + 2 workers)",
                     [chainerjob(f"ch-{i}", 2) for i in range(many)], many * 3, many_qps))

    rows = []
    with tempfile.TemporaryDirectory(prefix="scale-bench-") as tmp:
        for number, (label, jobs, pods, qps) in enumerate(plan):
            print(f"running: {label} at {qps:g} calls/s", file=sys.stderr, flush=True)
            row = run_scenario(label, jobs, pods, qps=qps, resyncs=args.resyncs, timeout=args.timeout,
                               workdir=pathlib.Path(tmp) / str(number))
            rows.append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
    print(f"{platform.python_implementation()} {platform.python_version()}, {os.cpu_count()} CPUs, "
          f"{datetime.now(UTC):%Y-%m-%d}; every pod on the no-process node; hook latency: the HTTP exchange timed in the emulation.\n")
    print(table(rows))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
