"""Measure what a real dist_sync MXNet job does when one of its processes is SIGKILLed mid-run.

    python benchmarks/recovery.py ROLE POLICY MODE [--epochs N] [--deadline S]

ROLE: worker, server or scheduler (the pod killed: worker-1, server-0, scheduler-0).
POLICY: ExitCode or OnFailure (every replica type's restartPolicy).
MODE: hooks (whatever the hooks do by themselves), heartbeat (ps-lite heartbeats on: every node
PS_HEARTBEAT_INTERVAL, the scheduler PS_HEARTBEAT_TIMEOUT), or delete-all (a whole-job restart
done from outside: once the killed pod is seen failed or restarted, every pod of the job is
deleted, and the hooks create them again).

The job trains examples/digits/train.py with a checkpoint directory, so a restarted job resumes.
Prints one JSON line: the outcome, seconds from the kill to the end, and each worker's final
validation accuracy. Docs: docs/lifecycle.md, "Recovery measured".
"""
from __future__ import annotations

import argparse
import json
import re
import signal
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from localcluster.cluster import LocalCluster, condition, finished  # noqa: E402


def job(name: str, policy: str, mode: str, epochs: int, deadline: int, ckpt: str,
        failure_policy: dict | None = None) -> dict:
    def spec(role: str, replicas: int, args: list[str]) -> dict:
        env = [{"name": "OMP_NUM_THREADS", "value": "1"}]
        if mode == "heartbeat":
            env.append({"name": "PS_HEARTBEAT_INTERVAL", "value": "1"})
            if role == "Scheduler":
                env.append({"name": "PS_HEARTBEAT_TIMEOUT", "value": "4"})
        return {"replicas": replicas, "restartPolicy": policy, "template": {"spec": {
            "terminationGracePeriodSeconds": 2,
            "containers": [{"name": "mxnet", "image": "mxjob/digits-example:1.9.1",
                            "command": ["python", "-u", "examples/digits/train.py"], "args": args, "env": env}]}}}
    worker_args = ["--kv-store", "dist_sync", "--epochs", str(epochs), "--checkpoint-dir", ckpt,
                   "--min-accuracy", "0.9"]
    run_policy: dict = {"backoffLimit": 3, "activeDeadlineSeconds": deadline}
    if failure_policy is not None:
        run_policy["failurePolicy"] = failure_policy
    return {"apiVersion": "kubeflow.org/v1", "kind": "MXJob", "metadata": {"name": name},
            "spec": {"jobMode": "MXTrain", "runPolicy": run_policy, "mxReplicaSpecs": {
                "Scheduler": spec("Scheduler", 1, []), "Server": spec("Server", 1, []),
                "Worker": spec("Worker", 2, worker_args)}}}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("role", choices=["worker", "server", "scheduler"])
    parser.add_argument("policy", choices=["ExitCode", "OnFailure"])
    parser.add_argument("mode", choices=["hooks", "heartbeat", "delete-all"])
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--deadline", type=int, default=120)
    parser.add_argument("--kill-after-epoch", type=int, default=2)
    parser.add_argument("--failure-policy", default="", help="runPolicy.failurePolicy as JSON")
    parser.add_argument("--keep-logs", default="", help="copy the pods' logs into this directory")
    args = parser.parse_args()
    name = "rec"
    victim = {"worker": f"{name}-worker-1", "server": f"{name}-server-0", "scheduler": f"{name}-scheduler-0"}[args.role]
    with tempfile.TemporaryDirectory() as tmp:
        ckpt = str(Path(tmp) / "ckpt")
        fp = json.loads(args.failure_policy) if args.failure_policy else None
        with LocalCluster(Path(tmp) / "state", restart_backoff=(0.2, 1.0)) as cluster:
            cluster.submit(job(name, args.policy, args.mode, args.epochs, args.deadline, ckpt, fp))
            started = time.monotonic()
            log0 = lambda: cluster.log_path(f"{name}-worker-0").read_text() if cluster.pod(f"{name}-worker-0") else ""  # noqa: E731
            cluster.wait_for(lambda: f"epoch {args.kill_after_epoch}/" in log0(), 120, interval=0.2,
                             what=f"epoch {args.kill_after_epoch}")
            uid = cluster.pod(victim)["metadata"]["uid"]
            cluster.kubelet.kill("default", victim, sig=signal.SIGKILL)
            killed = time.monotonic()
            if args.mode == "delete-all":
                def lost() -> bool:
                    pod = cluster.pod(victim)
                    if pod is None or pod["metadata"]["uid"] != uid:
                        return True
                    cs = pod["status"].get("containerStatuses") or [{}]
                    return pod["status"].get("phase") == "Failed" or cs[0].get("restartCount", 0) > 0
                cluster.wait_for(lost, 30, interval=0.1, what="the loss seen")
                for pod in cluster.pods(name):
                    cluster.delete_pod(pod["metadata"]["name"])
            done = cluster.wait_finished(name, timeout=args.deadline + 60)
            ended = time.monotonic()
            time.sleep(3)
            accuracies = {}
            for w in (0, 1):
                path = cluster.job_dir(name) / f"{name}-worker-{w}.log"
                text = path.read_text() if path.exists() else ""
                found = re.findall(r"final validation-accuracy=([0-9.]+)", text)
                accuracies[f"worker-{w}"] = float(found[-1]) if found else None
                resumed = re.findall(r"attempt (\d+): starting at epoch (\d+)", text)
                accuracies[f"worker-{w}-starts"] = resumed
            if args.keep_logs:
                import shutil
                shutil.copytree(cluster.job_dir(name), args.keep_logs, dirs_exist_ok=True)
            outcome = finished(done)
            cond = condition(done, outcome or "Running") or {}
            print(json.dumps({"role": args.role, "policy": args.policy, "mode": args.mode,
                              "outcome": outcome, "reason": cond.get("reason"),
                              "message": cond.get("message"), "kill_at_s": round(killed - started, 1),
                              "kill_to_end_s": round(ended - killed, 1), "restartCount": done["status"].get("restartCount"),
                              **accuracies}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
