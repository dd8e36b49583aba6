"""Measure what a real ChainerMN job (examples/local/chainer-mn-digits.yaml) does when a process is
SIGKILLed mid-run:  python benchmarks/chainer_recovery.py worker|master [--keep-logs DIR]

worker: the container of worker pod <job>-workerset-ws0-1 (its StatefulSet restarts it in place;
the rank mpiexec started in it through `kubectl exec` dies with it). master: the master Job's pod
(the Job retries it up to spec.master.backoffLimit). Prints one JSON line: the outcome, seconds
from the kill to the end, the final accuracy and how many times the master ran.
"""
from __future__ import annotations

import argparse
import json
import re
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from localcluster.cluster import LocalCluster, condition  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("victim", choices=["worker", "master"])
    parser.add_argument("--keep-logs", default="")
    parser.add_argument("--timeout", type=float, default=300)
    args = parser.parse_args()
    name = "cmn"
    job = yaml.safe_load((REPO / "examples" / "local" / "chainer-mn-digits.yaml").read_text())
    job["metadata"]["name"] = name
    with tempfile.TemporaryDirectory() as tmp, LocalCluster(Path(tmp) / "state") as cluster:
        cluster.submit(job)
        started = time.monotonic()

        def masters() -> str:
            return "".join(p.read_text() for p in sorted(cluster.job_dir(name).glob(f"{name}-master-?????.log")))

        cluster.wait_for(lambda: re.search(r"epoch +2 ", masters()), 240, interval=0.2, what="epoch 2")
        if args.victim == "worker":
            victim = f"{name}-workerset-ws0-1"
        else:
            victim = next(p["metadata"]["name"] for p in cluster.pods(name) if "-master-" in p["metadata"]["name"]
                          and p["status"].get("phase") == "Running")
        cluster.kubelet.kill("default", victim, sig=signal.SIGKILL)
        killed = time.monotonic()

        def ended():
            obj = cluster.get_job(name)
            for ctype in ("Complete", "Failed"):
                cond = condition(obj, ctype)
                if cond and cond.get("status") == "True":
                    return ctype, cond
            return None
        end = cluster.wait_for(ended, args.timeout, interval=0.2, what="the job's end")
        took = time.monotonic() - killed
        text = masters()
        if args.keep_logs:
            shutil.copytree(cluster.job_dir(name), args.keep_logs, dirs_exist_ok=True)
        accuracy = re.findall(r"final test accuracy (\d\.\d+)", text)
        print(json.dumps({"victim": victim, "outcome": end[0], "message": end[1].get("message"),
                          "kill_at_s": round(killed - started, 1), "kill_to_end_s": round(took, 1),
                          "accuracy": accuracy, "master_runs": len(re.findall(r"container chainer start", text)),
                          "master_pods": len(list(cluster.job_dir(name).glob(f"{name}-master-?????.log")))}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
