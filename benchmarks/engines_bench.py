"""One big MXJob under the Metacontroller emulation and under a real Metacontroller binary, side by side.

Run from the repo root with the control plane built (`make controlplane`) and a Metacontroller
v4.17.2 binary (docs/localcluster.md, "A real Metacontroller"):

    python benchmarks/engines_bench.py --metacontroller /path/to/metacontroller [--replicas 1000]

Each engine gets a fresh control plane, the hooks server behind the fault proxy (which counts the
sync requests, whichever engine sends them) and the no-process node (localcluster/node/noprocess.py).
Per engine: seconds from the apply to every pod Running and to the last write, API requests by verb
and resource (the API server's own `apiserver_request_total`), hook calls, and the floor of the
writes at the client rate (5/s, burst 10, both engines' default). It prints a markdown table and
asserts nothing about time.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import platform
import sys
import tempfile
import time
from datetime import UTC, datetime
from typing import Any

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from scale_bench import by_request, mxjob, pod_phases, settle, writes  # noqa: E402

from localcluster.cluster import LocalCluster  # noqa: E402

CLIENT_QPS, CLIENT_BURST = 5.0, 10
# The writes Metacontroller makes (the rest are the kubelet's and kube-controller-manager's): its
# creates of the job's children, its status writes and its Events.
METACONTROLLER_WRITES = ("POST pods", "POST services", "POST configmaps", "PUT mxjobs/status", "POST events")


def run_engine(engine: str, replicas: int, timeout: float, workdir: pathlib.Path) -> dict[str, Any]:
    row: dict[str, Any] = {"engine": "emulation" if engine == "emulation" else "real v4.17.2", "pods": replicas}
    with LocalCluster(workdir, kubelet_mode="noprocess", metacontroller=engine, fault_proxy=True,
                      client_qps=CLIENT_QPS, client_burst=CLIENT_BURST) as cluster:
        assert cluster.control_plane is not None and cluster.proxy is not None
        before = cluster.control_plane.request_counts()
        start = time.monotonic()
        job = cluster.submit(mxjob("big", replicas), clear_logs=False)
        uid = job["metadata"]["uid"]
        while pod_phases(cluster, {uid}) != (replicas, replicas):
            if time.monotonic() - start > timeout:
                row["timed_out"] = f"{pod_phases(cluster, {uid})[1]} of {replicas} Running after {timeout:g} s"
                break
            time.sleep(0.5)
        row["to_running_s"] = time.monotonic() - start
        row["to_last_write_s"] = row["to_running_s"] + settle(cluster, quiet=5.0, timeout=timeout)
        after = cluster.control_plane.request_counts()
        row["requests"] = by_request(after, before)
        row["writes"] = writes(row["requests"])
        row["hook_calls"] = cluster.proxy.syncs(uid)
        if cluster.metacontroller_binary is not None:
            row["errors_in_log"] = len(cluster.metacontroller_binary.errors())
    return row


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| engine | pods | apply → all Running (s) | apply → last write (s) | API writes (all) | Metacontroller's writes "
             "| floor: its writes ÷ 5/s (s) | last write ÷ floor | hook calls |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        own = sum(r["requests"].get(key, 0) for key in METACONTROLLER_WRITES)
        floor = max(0.0, (own - CLIENT_BURST) / CLIENT_QPS)
        lines.append(f"| {r['engine']} | {r['pods']:,} | {r['to_running_s']:.0f} | {r['to_last_write_s']:.0f} | {r['writes']:,} "
                     f"| {own:,} | {floor:.0f} | {r['to_last_write_s'] / floor if floor else 0:.2f} | {r['hook_calls']:,} |")
    verbs = sorted({key for r in rows for key in r["requests"]})
    lines += ["", "| request | " + " | ".join(r["engine"] for r in rows) + " |", "|---|" + "---|" * len(rows)]
    lines += [f"| {key} | " + " | ".join(f"{r['requests'].get(key, 0):,}" for r in rows) + " |" for key in verbs]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--metacontroller", help="a Metacontroller v4.17.2 binary (required to run)")
    parser.add_argument("--replicas", type=int, default=1000)
    parser.add_argument("--timeout", type=float, default=3600.0)
    parser.add_argument("--json", type=pathlib.Path, default=None, help="also write the rows here")
    parser.add_argument("--table-from", type=pathlib.Path, default=None, help="only print the table of rows --json wrote")
    args = parser.parse_args()
    if args.table_from:
        print(table(json.loads(args.table_from.read_text())))
        return
    if not args.metacontroller:
        parser.error("--metacontroller PATH is required to run (docs/localcluster.md, 'A real Metacontroller')")
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="engines-bench-") as tmp:
        for engine in ("emulation", args.metacontroller):
            rows.append(run_engine(engine, args.replicas, args.timeout, pathlib.Path(tmp) / str(len(rows))))
    print(f"{datetime.now(UTC):%Y-%m-%d}, {platform.machine()}, {len(rows)} engines, one MXJob of {args.replicas:,} pods "
          "on the no-process node\n")
    print(table(rows))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
