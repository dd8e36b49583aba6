"""The post-mortem of a job run on this machine: which containers failed and how, the part of each log
that says what went wrong, and every pod's state when a job hangs. Read from the log files, so a pod
that cleanPodPolicy deleted after it failed is still found.
"""

from __future__ import annotations

import re
import signal
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from localcluster.cli.runview import cut, duration, last_output, pod_log, pod_row
from localcluster.cluster import LocalCluster
from localcluster.types import ContainerStatus

FAILED_LOG_LINES = 15
TROUBLE_LOG_LINES = 20
# After a failure, the last lines of at most this many failed containers' logs (every one is listed).
FAILED_LOGS_SHOWN = 4
# A Python traceback's first line, or a line that says error, fatal or panic (localcluster's own lines excepted).
_TRACEBACK = "Traceback (most recent call last):"
# A metric such as `validation-error=0.1` is not an error.
_ERROR_LINE = re.compile(r"(?<![\w-])(error|fatal|panic)(?![\w=-])|^\w+(Error|Exception):", re.I)
# 143 (SIGTERM): the cleanup stopping a pod, not a cause.
_STOPPED = 128 + signal.SIGTERM


_EXIT_LINE = re.compile(r"^=== localcluster: container \S+ exited with code (\d+) at (\S+)$", re.M)


class FailedContainer(NamedTuple):
    pod: str
    container: str
    code: int
    at: str  # when it exited, as the kubelet's note says (RFC 3339)
    log: Path


def last_failure(log_text: str) -> tuple[int, str] | None:
    """(exit code, when) of a log's last run when it exited non-zero; None when it succeeded, was stopped
    by the cleanup (143) or has not exited."""
    exits = _EXIT_LINE.findall(log_text)
    if not exits or int(exits[-1][0]) in (0, _STOPPED):
        return None
    return int(exits[-1][0]), exits[-1][1]


def failed_containers(cluster: LocalCluster, name: str, namespace: str) -> list[FailedContainer]:
    """Every container of the job whose last run exited non-zero, in the order they exited."""
    found = []
    for (pod, container), path in log_files(cluster.job_dir(name, namespace)).items():
        if failure := last_failure(path.read_text(errors="replace")):
            found.append(FailedContainer(pod, container, failure[0], failure[1], path))
    return sorted(found, key=lambda f: (f.at, f.pod, f.container))


def named_in(message: str, pod: str) -> bool:
    return re.search(rf"(?<![\w-]){re.escape(pod)}(?![\w-])", message) is not None


def failing_log(cluster: LocalCluster, name: str, namespace: str, message: str) -> Path | None:
    """The log that best explains a failure: a pod the message names, else the first non-zero exit."""
    logs = sorted(cluster.job_dir(name, namespace).glob("*.log"))
    named = [path for path in logs if re.search(rf"\b{re.escape(path.name.split('.')[0])}\b", message)]
    if named:
        return named[0]
    exits = []
    for path in logs:
        for code, at in _EXIT_LINE.findall(path.read_text(errors="replace")):
            if int(code) not in (0, _STOPPED):
                exits.append((at, path))
    return min(exits)[1] if exits else None


def tail(path: Path, lines: int) -> list[str]:
    return path.read_text(errors="replace").splitlines()[-lines:]


def trouble(lines: list[str], limit: int = TROUBLE_LOG_LINES) -> list[str]:
    """The part of a log that says what went wrong: its last Python traceback (header, frames and the
    exception line), else the lines up to its last error line; [] when it holds neither."""
    own = [not line.startswith("=== localcluster:") for line in lines]
    headers = [i for i, line in enumerate(lines) if line.startswith(_TRACEBACK)]
    if headers:
        start = headers[-1]
        end = start + 1
        while end < len(lines) and lines[end].startswith(" "):  # the frames are indented
            end += 1
        block = lines[start:min(end + 1, len(lines))]  # and the exception line after them
        return block if len(block) <= limit else [block[0], "  ...", *block[-(limit - 2):]]
    errors = [i for i, line in enumerate(lines) if own[i] and _ERROR_LINE.search(line)]
    if not errors:
        return []
    last = errors[-1]
    return lines[max(0, last - limit + 3):last + 3]


def container_state(status: ContainerStatus) -> str:
    """One container's state as `kubectl describe pod` names it: running, waiting (reason), terminated (exit code)."""
    state = status.get("state") or {}
    if "running" in state:
        return f"running since {state['running'].get('startedAt', '-')}"
    if "terminated" in state:
        ended = state["terminated"]
        return f"terminated, exit code {ended.get('exitCode', '-')} ({ended.get('reason', '-')})"
    if "waiting" in state:
        return f"waiting ({state['waiting'].get('reason', '-')})"
    return "not started"


def diagnosis(cluster: LocalCluster, name: str, namespace: str) -> list[str]:
    """Every pod's state, then the trouble in each log that holds a traceback or an error: why a job hangs."""
    lines = ["pods:"]
    pods = cluster.pods(name, namespace)
    for pod in pods:
        pod_name, phase, restarts, _ = pod_row(pod)
        containers = "; ".join(f"{cs.get('name')}: {container_state(cs)}"
                               for cs in pod.get("status", {}).get("containerStatuses", [])) or "no container started"
        output = last_output(pod_log(cluster, name, namespace, pod_name)) if phase == "Running" else None
        said = f"  last output {duration(output[1])} ago: {cut(output[0])!r}" if output and output[0] else ""
        lines.append(f"  {pod_name}  {phase}  restarts {restarts}  {containers}{said}")
    if not pods:
        lines.append("  (none)")
    for path in sorted(cluster.job_dir(name, namespace).glob("*.log")):
        if path.name == "hooks-server.log":
            continue
        found = trouble(path.read_text(errors="replace").splitlines())
        if found:
            lines.append(f"last lines of {path} (it holds a traceback or an error):")
            lines.extend("  " + line for line in found)
    return lines


def log_files(job_dir: Path) -> dict[tuple[str, str], Path]:
    """(pod, container) -> log file. `<pod>.log` is the pod's first container, named in its first line."""
    found: dict[tuple[str, str], Path] = {}
    for path in sorted(job_dir.glob("*.log")) if job_dir.is_dir() else []:
        pod, _, rest = path.name[:-len(".log")].partition(".")
        if rest:
            found[(pod, rest)] = path
            continue
        with path.open(errors="replace") as handle:
            head = "".join(handle.readline() for _ in range(5))  # the kubelet may note volumes before the start line
        match = re.search(r" container (\S+) start ", head)
        if match:
            found[(pod, match.group(1))] = path
    return found


def failure_report(failures: list[FailedContainer], message: str, fallback: Path | None,
                   read_tail: Callable[[Path], list[str]]) -> tuple[list[str], str]:
    """What `run` prints after a job failed, and its closing message.

    The pod the Failed condition names comes first, then every other that failed, in the order they
    exited; with no failed container, the `fallback` log (the one the message points at). A pod that
    failed after the job had failed is named in the closing message: the status was frozen at the end
    (docs/lifecycle.md), so it is not there.
    """
    shown = sorted(failures, key=lambda f: not named_in(message, f.pod))
    paths = [f.log for f in shown] or ([fallback] if fallback else [])
    lines: list[str] = []
    for path in paths[:FAILED_LOGS_SHOWN]:
        lines.append(f"last lines of {path}:")
        lines.extend("  " + line for line in read_tail(path))
    if failures:
        lines.append(f"failed containers ({len(failures)}):")
        lines.extend(f"  {f.pod} (container {f.container}): exit code {f.code} at {f.at}  {f.log}" for f in failures)
    later = [f"{f.pod} (exit code {f.code})" for f in failures if not named_in(message, f.pod)]
    if later and len(later) < len(failures):  # the job failed on a pod (not a deadline or the backoff limit)
        message = (f"{message} Also failed, after the job had failed (so not in its status, which "
                   f"is frozen at the end): {', '.join(later)}.")
    return lines, message


def post_mortem(cluster: LocalCluster, name: str, namespace: str, message: str) -> tuple[list[str], str]:
    """`failure_report` of a job as its logs have it."""
    return failure_report(failed_containers(cluster, name, namespace), message,
                          failing_log(cluster, name, namespace, message), lambda path: tail(path, FAILED_LOG_LINES))


# A line a training program prints to say what it achieved: `final validation-accuracy=0.97`,
# `final test accuracy 0.95 over 2 ranks`.
_RESULT_LINE = re.compile(r"\bfinal\b.*\b(accuracy|loss|error)\b", re.I)


def result_line(lines: list[str]) -> str | None:
    """A log's last line of the program's own output that says a final accuracy, loss or error; None without one."""
    own = [line.strip() for line in lines if not line.startswith("=== localcluster:")]
    return next((line for line in reversed(own) if _RESULT_LINE.search(line)), None)


def job_results(job_dir: Path) -> list[str]:
    """`result: <pod>: <line>` for each container log that ends with a result (the digits examples say
    their final accuracy), in the order of the pods' names."""
    found = []
    for (pod, _container), path in log_files(job_dir).items():
        if line := result_line(path.read_text(errors="replace").splitlines()):
            found.append(f"result: {pod}: {line}")
    return found
