"""The live view of `localcluster run`: each pod's row as `kubectl get pods` shows it, under each running
pod its last line of output and how long it has been silent, redrawn in place on a terminal. A job
that reports its progress (runPolicy.progress, docs/progress.md) also shows its step and percentage,
for the job and for each running pod that reports.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

from localcluster.cluster import LocalCluster, job_state
from localcluster.types import KubeObject

# The view shows each running pod's last log line, cut to this width, and how long its log has been
# silent once that is at least SILENT_SHOW_SECONDS.
LAST_LINE_WIDTH = 100
SILENT_SHOW_SECONDS = 10.0


def age_of(timestamp: str | None) -> str:
    """How long ago a creationTimestamp was, as kubectl's AGE column says it."""
    if not timestamp:
        return "-"
    return duration((datetime.now(UTC) - datetime.strptime(timestamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)).total_seconds())


def pod_row(pod: KubeObject) -> tuple[str, str, int, str]:
    """(name, phase or Terminating, restarts, age) as `kubectl get pods` shows them."""
    status = pod.get("status", {})
    phase = "Terminating" if pod["metadata"].get("deletionTimestamp") else status.get("phase", "Pending")
    if status.get("reason") == "Evicted":
        phase = "Evicted"
    restarts = sum(cs.get("restartCount", 0) for cs in status.get("containerStatuses", []))
    return pod["metadata"]["name"], phase, restarts, age_of(pod["metadata"].get("creationTimestamp"))


def last_output(path: Path, now: float | None = None) -> tuple[str, float] | None:
    """A log's last line of the program's own output (not the local cluster's `===` notes) and the
    seconds since anything was written to it; None when there is no log."""
    try:
        with path.open("rb") as handle:
            size = handle.seek(0, os.SEEK_END)
            handle.seek(max(0, size - 8192))
            text = handle.read().decode(errors="replace")
            written = os.fstat(handle.fileno()).st_mtime
    except OSError:
        return None
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.startswith("=== localcluster:")]
    return (lines[-1] if lines else ""), max(0.0, (time.time() if now is None else now) - written)


def pod_log(cluster: LocalCluster, name: str, namespace: str, pod: str) -> Path:
    """The log of a pod's first container (where a pod's own output goes)."""
    return cluster.job_dir(name, namespace) / f"{pod}.log"


def cut(line: str) -> str:
    return line if len(line) <= LAST_LINE_WIDTH else line[:LAST_LINE_WIDTH - 3] + "..."


def duration(value: float) -> str:
    seconds = int(value)
    return f"{seconds}s" if seconds < 120 else f"{seconds // 60}m{seconds % 60}s"


def output_row(found: tuple[str, float] | None) -> str:
    """The view's line under a running pod: its last output, and how long it has been silent."""
    if found is None:
        return "    > (no output yet)"
    line, silent = found
    note = f"  [silent {duration(silent)}]" if silent >= SILENT_SHOW_SECONDS else ""
    return f"    > {cut(line) or '(no output yet)'}{note}"


def step_text(report: Mapping[str, Any]) -> str:
    """One reporter's progress as the view shows it: `step 40/100 40%`, or what of it is known."""
    parts = []
    if "step" in report:
        parts.append(f"step {report['step']}" + (f"/{report['total']}" if "total" in report else ""))
    if "progressPercentage" in report:
        parts.append(f"{report['progressPercentage']}%")
    return " ".join(parts)


def reports_by_reporter(progress: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    """status.progress's reports by reporter name (`worker-0`): its list, or its top level when one reports."""
    listed = progress.get("reporters") or ([progress] if progress.get("reporter") else [])
    return {report.get("name") or report.get("reporter", ""): report for report in listed}


def progress_line(progress: Mapping[str, Any]) -> str:
    """The job's progress (status.progress: its least advanced reporter), as `localcluster run` shows it."""
    when = progress.get("lastUpdatedTime", "-")
    return (f"  progress: {step_text(progress) or '-'} (reporter {progress.get('reporter', '-')}, "
            f"attempt {progress.get('attempt', 0)}, reported {when})")


def render(cluster: LocalCluster, name: str, namespace: str = "default") -> list[str]:
    """The progress view of one job as lines: its reported progress when it reports, and under each
    running pod that pod's reported step and its last line of output."""
    job = cluster.get_job(name, namespace) or {}
    lines = [f"{job.get('kind', 'Job')} {namespace}/{name}   state: {job_state(job) or '-'}   "
             f"age: {age_of(job.get('metadata', {}).get('creationTimestamp'))}"]
    progress: Mapping[str, Any] = (job.get("status") or {}).get("progress") or {}
    if progress:
        lines.append(progress_line(progress))
    reports = reports_by_reporter(progress)
    lines.append(f"  {'POD':<44} {'PHASE':<12} {'RESTARTS':>8} {'AGE':>6}")
    for pod_name, phase, restarts, age in map(pod_row, cluster.pods(name, namespace)):
        lines.append(f"  {pod_name:<44} {phase:<12} {restarts:>8} {age:>6}")
        if phase == "Running":
            report = reports.get(pod_name.removeprefix(f"{name}-"))
            row = output_row(last_output(pod_log(cluster, name, namespace, pod_name)))
            lines.append(row.replace("    > ", f"    > [{step_text(report)}] ", 1) if report and step_text(report) else row)
    conditions = job.get("status", {}).get("conditions") or []
    lines.append("  conditions: " + ("  ".join(f"{c['type']}={c['status']}" for c in conditions) or "-"))
    controller = cluster.controller_for(job) if job else None
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
        self.started = time.monotonic()

    def show(self, lines: list[str]) -> None:
        if self.tty:
            if self._drawn:
                self.out.write(f"\x1b[{self._drawn}F\x1b[J")  # back to the view's first line, clear below
            self.out.write("\n".join(lines) + "\n")
            self._drawn = len(lines)
        else:
            # Ages tick every second, and a training script prints all the time; compare without
            # either so that only real changes print (the periodic report shows the output).
            stable = [line.rsplit(" ", 1)[0] if line.startswith("  ") and "conditions" not in line
                      else line.split("   age:")[0] for line in lines if not line.startswith("    > ")]
            if stable == self._last:
                return
            self._last = stable
            self.out.write(f"--- {time.monotonic() - self.started:6.1f}s\n" + "\n".join(lines) + "\n")
        self.out.flush()

    def note(self, lines: list[str]) -> None:
        """Lines that stay: printed below the view, which is then drawn anew beneath them."""
        self.out.write("\n".join(lines) + "\n")
        self.out.flush()
        self._drawn = 0
        self._last = []
