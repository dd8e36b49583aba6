"""The command line: `run` a job (any kind a shipped CompositeController follows) with a live progress view, and `logs`."""

from __future__ import annotations

import argparse
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import TextIO, cast

import yaml

from .cluster import LocalCluster, condition, finished, job_state
from .config import PARENT_KINDS
from .types import KubeObject

EXIT_SUCCEEDED, EXIT_FAILED, EXIT_INVALID, EXIT_TIMEOUT, EXIT_STAND_IN = 0, 1, 2, 3, 4
DEFAULT_STATE_DIR = ".localcluster"
REFRESH_SECONDS = 0.25


def _age(timestamp: str | None) -> str:
    if not timestamp:
        return "-"
    seconds = int((datetime.now(UTC) - datetime.strptime(timestamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)).total_seconds())
    return f"{seconds}s" if seconds < 120 else f"{seconds // 60}m{seconds % 60}s"


def pod_row(pod: KubeObject) -> tuple[str, str, int, str]:
    """(name, phase or Terminating, restarts, age) as `kubectl get pods` shows them."""
    status = pod.get("status", {})
    phase = "Terminating" if pod["metadata"].get("deletionTimestamp") else status.get("phase", "Pending")
    if status.get("reason") == "Evicted":
        phase = "Evicted"
    restarts = sum(cs.get("restartCount", 0) for cs in status.get("containerStatuses", []))
    return pod["metadata"]["name"], phase, restarts, _age(pod["metadata"].get("creationTimestamp"))


def render(cluster: LocalCluster, name: str) -> list[str]:
    """The progress view of one job as lines."""
    job = cluster.get_job(name) or {}
    age = _age(job.get("metadata", {}).get("creationTimestamp"))
    lines = [f"{job.get('kind', 'Job')} {name}   state: {job_state(job) or '-'}   age: {age}"]
    lines.append(f"  {'POD':<44} {'PHASE':<12} {'RESTARTS':>8} {'AGE':>6}")
    for pod_name, phase, restarts, age in map(pod_row, cluster.pods(name)):
        lines.append(f"  {pod_name:<44} {phase:<12} {restarts:>8} {age:>6}")
    conditions = job.get("status", {}).get("conditions") or []
    lines.append("  conditions: " + ("  ".join(f"{c['type']}={c['status']}" for c in conditions) or "-"))
    controller = cluster.controller_for(job)
    error = controller.last_error(job["metadata"]["uid"]) if job and controller else None
    if error:
        lines.append(f"  sync error (retrying): {error[:150]}")
    return lines


class Progress:
    """Redraws the view in place on a terminal; prints a line per change otherwise (CI logs)."""

    def __init__(self, out: TextIO):
        self.out = out
        self.tty = out.isatty()
        self._drawn = 0
        self._last: list[str] = []
        self._started = time.monotonic()

    def show(self, lines: list[str]) -> None:
        if self.tty:
            if self._drawn:
                self.out.write(f"\x1b[{self._drawn}F\x1b[J")  # back to the view's first line, clear below
            self.out.write("\n".join(lines) + "\n")
            self._drawn = len(lines)
        else:
            # Ages tick every second; compare without them so only real changes print.
            stable = [line.rsplit(" ", 1)[0] if line.startswith("  ") and "conditions" not in line
                      else line.split("   age:")[0] for line in lines]
            if stable == self._last:
                return
            self._last = stable
            self.out.write(f"--- {time.monotonic() - self._started:6.1f}s\n" + "\n".join(lines) + "\n")
        self.out.flush()


def load_job(path: Path) -> KubeObject:
    """The single job (MXJob or ChainerJob) in a YAML file; ValueError with a one-line reason otherwise."""
    try:
        documents = [doc for doc in yaml.safe_load_all(path.read_text()) if doc]
    except (OSError, yaml.YAMLError) as err:
        raise ValueError(f"cannot read {path}: {err}") from err
    versions = {kind: api_version for (api_version, _), kind in PARENT_KINDS.items()}
    jobs = [doc for doc in documents if isinstance(doc, dict) and doc.get("kind") in versions]
    if len(jobs) != 1:
        raise ValueError(f"{path} must hold exactly one job ({' or '.join(sorted(versions))}), found {len(jobs)}")
    job = jobs[0]
    if job.get("apiVersion") != versions[job["kind"]]:
        raise ValueError(f"{path}: a {job['kind']}'s apiVersion must be {versions[job['kind']]}, not {job.get('apiVersion')!r}")
    if not isinstance(job.get("metadata"), dict) or not job["metadata"].get("name"):
        raise ValueError(f"{path}: metadata.name is required")
    return cast(KubeObject, job)


def run(args: argparse.Namespace, out: TextIO = sys.stdout) -> int:
    """Run one job to the end; the exit code says how it ended."""
    try:
        job = load_job(Path(args.file))
    except ValueError as err:
        print(f"invalid spec: {err}", file=out)
        return EXIT_INVALID
    name, kind = job["metadata"]["name"], job["kind"]
    with LocalCluster(args.state_dir) as cluster:
        print(f"hooks server: {cluster.hooks.url if cluster.hooks else '-'} (log {cluster.state_dir / 'hooks-server.log'})", file=out)
        config = next((c for c in cluster.configs if c.parent_kind == kind), None)
        if config is None:
            print(f"invalid spec: no CompositeController in metacontroller/ follows {kind}", file=out)
            return EXIT_INVALID
        print(f"controller: {config.name} from {config.source}", file=out)
        print(f"pod logs: {cluster.job_dir(name)}/<pod>.log  (python -m localcluster logs {name} <pod>)", file=out)
        created = cluster.submit(job)
        uid = created["metadata"]["uid"]
        progress = Progress(out)
        deadline = time.monotonic() + args.timeout
        outcome: tuple[int, str] | None = None
        while outcome is None:
            progress.show(render(cluster, name))
            current = cluster.get_job(name)
            controller = cluster.controller_for(current)
            hot = controller.hot_loop(uid) if controller else None
            if hot:
                outcome = (EXIT_STAND_IN, f"stand-in error: {kind} {name}: {hot}")
            elif finished(current) == "Succeeded":
                outcome = (EXIT_SUCCEEDED, f"{kind} {name} {job_state(current)}")
            elif finished(current) == "Failed":
                failed = condition(current, "Failed") or {}
                # Each kind's hook names its validation failure <Kind>FailedValidation.
                how = "invalid spec" if str(failed.get("reason", "")).endswith("FailedValidation") else "Failed"
                code = EXIT_INVALID if how == "invalid spec" else EXIT_FAILED
                outcome = (code, f"{kind} {name} {how}: {failed.get('reason', '')}: {failed.get('message', '')}")
            elif time.monotonic() >= deadline:
                outcome = (EXIT_TIMEOUT, f"{kind} {name} timed out after {args.timeout:g}s in state {job_state(current) or '-'}")
            else:
                time.sleep(REFRESH_SECONDS)
        time.sleep(REFRESH_SECONDS)  # let the last pod transitions (cleanPodPolicy) show
        progress.show(render(cluster, name))
        final = cluster.get_job(name) or {}
        print("final status:", file=out)
        print(yaml.safe_dump({"status": final.get("status", {})}, sort_keys=False).rstrip(), file=out)
    code, reason = outcome
    print(reason, file=out)
    return code


def logs(args: argparse.Namespace, out: TextIO = sys.stdout) -> int:
    """Print one pod's log (its first container, or -c CONTAINER)."""
    job_dir = Path(args.state_dir) / args.job
    path = job_dir / (f"{args.pod}.{args.container}.log" if args.container else f"{args.pod}.log")
    if not path.exists():
        candidates = sorted(p.name for p in job_dir.glob("*.log")) if job_dir.is_dir() else []
        print(f"no log at {path}; available: {', '.join(candidates) or 'none'}", file=sys.stderr)
        return 1
    out.write(path.read_text())
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of `python -m localcluster`."""
    parser = argparse.ArgumentParser(
        prog="python -m localcluster",
        description="Run MXJobs and ChainerJobs on this machine: a Metacontroller stand-in, the real hooks server, pods as processes.")
    parser.add_argument("--state-dir", default=DEFAULT_STATE_DIR, help="where pod logs go (default .localcluster)")
    sub = parser.add_subparsers(dest="command", required=True)
    run_parser = sub.add_parser("run", help="run one MXJob or ChainerJob to the end; exit 0 only if it succeeded")
    run_parser.add_argument("file", help="a YAML file holding one MXJob or ChainerJob")
    run_parser.add_argument("--timeout", type=float, default=600.0, help="give up after this many seconds (default 600)")
    logs_parser = sub.add_parser("logs", help="print a pod's log")
    logs_parser.add_argument("job")
    logs_parser.add_argument("pod")
    logs_parser.add_argument("-c", "--container", help="a container other than the pod's first")
    args = parser.parse_args(argv)
    if args.command == "run":
        try:
            return run(args)
        except KeyboardInterrupt:
            print("interrupted; every process stopped", file=sys.stderr)
            return 130
    return logs(args)
