"""What the pod template schema costs the API server: MXJob writes with it, and with a free-form template.

Run from the repo root (needs `make controlplane`): `python benchmarks/crd_schema_bench.py [--jobs N]`.
It starts the pinned control plane, installs the MXJob CRD twice, as shipped and with each version's
template replaced by one `x-kubernetes-preserve-unknown-fields` object (in another API group, so both
are served at once), then, alternating between the two, creates N MXJobs (examples/dist-gpu-train.yaml),
writes a status to each through the status subresource (what Metacontroller does after every sync) and
reads each back. It prints the CRD sizes and the median and 90th percentile of each call, and checks
that every job was stored as sent under both (so the hooks receive the same parent either way).
It asserts nothing about time.
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from localcluster.controlplane.processes import ControlPlane  # noqa: E402

FREE_GROUP = "freeform.bench.test"
TEMPLATE_PATH = ("properties", "spec", "properties", "mxReplicaSpecs", "additionalProperties", "properties", "template")
STATUS = {"conditions": [{"type": "Created", "status": "True", "reason": "MXJobCreated", "message": "created",
                          "lastUpdateTime": "2026-01-01T00:00:00Z", "lastTransitionTime": "2026-01-01T00:00:00Z"}],
          "replicaStatuses": {"Worker": {"active": 2}}, "startTime": "2026-01-01T00:00:00Z"}


def free_form(crd: dict) -> dict:
    crd = copy.deepcopy(crd)
    names = {k: v for k, v in crd["spec"]["names"].items() if k not in ("shortNames", "categories")}
    crd["spec"].update(group=FREE_GROUP, names=names)
    crd["metadata"] = {"name": f"{names['plural']}.{FREE_GROUP}"}
    for version in crd["spec"]["versions"]:
        node = version["schema"]["openAPIV3Schema"]
        for step in TEMPLATE_PATH[:-1]:
            node = node[step]
        node["template"] = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    return crd


def call(cp: ControlPlane, method: str, path: str, body: Any = None) -> tuple[float, dict]:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(f"{cp.server}{path}", data=data, method=method, headers={
        "Authorization": f"Bearer {cp.token}", "Content-Type": "application/json"})
    start = time.perf_counter()
    with urllib.request.urlopen(request, context=cp._ssl_context(), timeout=30) as response:
        answer = json.loads(response.read())
    return time.perf_counter() - start, answer


def summary(samples: list[float]) -> str:
    ordered = sorted(samples)
    return f"{statistics.median(ordered) * 1000:.2f} ms / {ordered[int(len(ordered) * 0.9)] * 1000:.2f} ms"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=200)
    args = parser.parse_args()
    shipped = yaml.safe_load((REPO / "crd" / "mxjob-crd.yaml").read_text())
    variants = {"generated": (shipped, "kubeflow.org"), "free-form": (free_form(shipped), FREE_GROUP)}
    job = yaml.safe_load((REPO / "examples" / "dist-gpu-train.yaml").read_text())
    times: dict[tuple[str, str], list[float]] = {}
    with ControlPlane() as cp:
        for crd, _ in variants.values():
            cp.kubectl("apply", "--server-side", "-f", "-", input=json.dumps(crd))
        cp.wait_established(*(crd["metadata"]["name"] for crd, _ in variants.values()))
        cp.kubectl("create", "namespace", "bench")
        time.sleep(2)  # the new resources reach discovery and the handlers
        for name, (crd, _) in variants.items():
            print(f"{name}: CRD {len(json.dumps(crd, separators=(',', ':'))):,} bytes of JSON")
        for i in range(args.jobs):
            for name, (_, group) in variants.items():
                base = f"/apis/{group}/v1/namespaces/bench/mxjobs"
                obj = {**copy.deepcopy(job), "apiVersion": f"{group}/v1", "metadata": {"name": f"job-{i}"}}
                took, stored = call(cp, "POST", base, obj)
                times.setdefault((name, "create"), []).append(took)
                if stored["spec"] != {"jobMode": "MXTrain", "runPolicy": {}, **job["spec"]}:
                    raise SystemExit(f"{name}: job-{i} was not stored as sent")
                took, _ = call(cp, "PUT", f"{base}/job-{i}/status", {**stored, "status": STATUS})
                times.setdefault((name, "status write"), []).append(took)
                took, _ = call(cp, "GET", f"{base}/job-{i}")
                times.setdefault((name, "get"), []).append(took)
    print(f"\n{args.jobs} MXJobs per variant, median / p90 per call:\n")
    print("| call | generated schema | free-form template |\n|---|---|---|")
    for op in ("create", "status write", "get"):
        print(f"| {op} | {summary(times[('generated', op)])} | {summary(times[('free-form', op)])} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
