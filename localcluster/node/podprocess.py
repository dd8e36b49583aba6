"""A container's process, as the container runtime side of the kubelet handles it.

Owns: the per-container record (`ContainerRun`: process, log file, state, restart count, exit
code), how a command is resolved to a program (`python` is this interpreter) and started in its own
process group with its output appended to its log file, the start failure (StartError, exit code
128), the exit code of a process (a signal N is 128 + N), signals to a container's process group,
reaping an exit, the restart decision with its crash-loop backoff, and the memory limit (a process
group over `resources.limits.memory` is SIGKILLed and reported OOMKilled, see `over_memory_limit`).
What the process sees (env, paths, volumes) is podsandbox.py's; what is reported about it is
podstatus.py's.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from localcluster.store import now_rfc3339
from localcluster.types import Container

PYTHON_NAMES = ("python", "python3", f"python{sys.version_info.major}.{sys.version_info.minor}")
RESTART_BACKOFF = (0.5, 8.0)  # first delay, cap (seconds); doubles per restart
POLL_SECONDS = 0.05
START_ERROR_CODE = 128
OOM_KILLED = "OOMKilled"  # the reason a kubelet reports for a container its memory cgroup killed
_MEMORY = re.compile(r"^([0-9]+)(Ki|Mi|Gi|Ti|k|M|G|T)?$")
_MEMORY_UNITS = {None: 1, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "k": 10**3, "M": 10**6, "G": 10**9,
                 "T": 10**12}


def is_kubectl_image(image: str) -> bool:
    """An image whose repository's last path element is `kubectl` (bitnami/kubectl, registry.k8s.io/kubectl)."""
    repository = image.split("@", 1)[0].rsplit("/", 1)[-1].split(":", 1)[0]
    return repository == "kubectl"


def exit_code(returncode: int) -> int:
    """A Popen return code as the kubelet reports it: a signal N becomes 128 + N."""
    return 128 - returncode if returncode < 0 else returncode


@dataclass
class ContainerRun:
    """One container's process, or its last outcome."""

    container: Container
    init: bool = False
    process: subprocess.Popen[bytes] | None = None
    log: TextIO | None = None
    restart_count: int = 0
    state: dict[str, Any] = field(default_factory=lambda: {"waiting": {"reason": "ContainerCreating"}})
    last_state: dict[str, Any] = field(default_factory=dict)
    restart_at: float | None = None
    exit_code: int | None = None
    settled: bool = False  # the restart decision for the last exit has been taken
    oom_killed: bool = False  # the running process was killed for going over the memory limit
    config_retry_at: float | None = None  # waiting for a ConfigMap (CreateContainerConfigError)

    @property
    def name(self) -> str:
        return self.container["name"]

    def alive(self) -> bool:
        """Its process runs (has not exited yet)."""
        return self.process is not None and self.process.poll() is None

    def open_log(self, path: Path) -> TextIO:
        """The container's log file, opened for appending on its first start and kept across restarts."""
        if self.log is None:
            path.parent.mkdir(parents=True, exist_ok=True)
            self.log = path.open("a", buffering=1)
        return self.log

    @property
    def memory_limit(self) -> int | None:
        """`resources.limits.memory` in bytes, when it is set in a form the API server writes
        (`64Mi`, `67108864`, `1G`); None: no limit is enforced."""
        resources: Any = self.container.get("resources") or {}
        limits = resources.get("limits") or {} if isinstance(resources, dict) else {}
        found = _MEMORY.match(str(limits.get("memory", "")) if isinstance(limits, dict) else "")
        return int(found.group(1)) * _MEMORY_UNITS[found.group(2)] if found else None

    def close_log(self) -> None:
        if self.log is not None:
            self.log.close()


def spawn(run: ContainerRun, argv: list[str], *, env: dict[str, str], workdir: Path,
          wrap: Callable[[list[str]], list[str]] | None) -> str | None:
    """Start the container's process (the caller holds the lock that `signal_all` takes); the
    StartError message when it cannot start. `wrap` puts the command into the DNS namespace wrapper."""
    log = run.log
    assert log is not None, "open_log comes first"
    if not run.container.get("command"):
        return "the local cluster ignores images, so a container needs `command` (the image's entrypoint is unknown)"
    if argv[0] in PYTHON_NAMES:
        argv[0] = sys.executable
    elif os.sep not in argv[0]:
        argv[0] = shutil.which(argv[0], path=env["PATH"]) or argv[0]
    program = workdir / argv[0]  # an absolute argv[0] stays itself; a relative one runs from workdir
    if wrap is not None and not (program.is_file() and os.access(program, os.X_OK)):
        # The namespace wrapper would start and then fail; a command that cannot start is a StartError.
        return f"failed to start container process: [Errno 2] No such file or directory: {argv[0]!r}"
    run.oom_killed = False
    try:
        run.process = subprocess.Popen(
            wrap(argv) if wrap is not None else argv,
            cwd=workdir, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: signals reach its children too
        )
    except OSError as err:
        return f"failed to start container process: {err}"
    return None


def record_start_error(run: ContainerRun, error: str, started: str) -> None:
    """A container that could not start: terminated with exit code 128, reason StartError."""
    if run.log is not None:
        run.log.write(f"=== localcluster: {error}\n")
    run.process = None
    run.exit_code = START_ERROR_CODE
    run.state = {"terminated": {"exitCode": START_ERROR_CODE, "reason": "StartError", "message": error,
                                "startedAt": started, "finishedAt": started}}


def record_completed_without_process(run: ContainerRun, started: str) -> None:
    """A container whose work was done for it (a kubectl image's copy): Completed at once."""
    run.process, run.exit_code = None, 0
    run.state = {"terminated": {"exitCode": 0, "reason": "Completed", "startedAt": started, "finishedAt": started}}


def record_exit(run: ContainerRun) -> None:
    """Reap the process (waiting for it) and record its exit as a terminated state."""
    if run.process is None or "terminated" in run.state:
        return
    code = exit_code(run.process.wait())
    run.process = None
    run.exit_code = code
    finished = now_rfc3339()
    reason = "Completed" if code == 0 else OOM_KILLED if run.oom_killed else "Error"
    started = run.state.get("running", {}).get("startedAt", finished)
    run.state = {"terminated": {"exitCode": code, "reason": reason, "startedAt": started, "finishedAt": finished}}
    if code != 0 and run.container.get("terminationMessagePolicy") == "FallbackToLogsOnError" and run.log is not None:
        # As the kubelet does: with no termination-log file, the tail of the log (80 lines, 2 KiB).
        message = log_tail(run.log)
        if message:
            run.state["terminated"]["message"] = message
    if run.log is not None:
        run.log.write(f"=== localcluster: container {run.name} exited with code {code} at {finished}\n")


def log_tail(log: TextIO, lines: int = 80, limit: int = 2048) -> str:
    """The last lines this run of the container wrote to its log (from its start line on), without
    the local cluster's own notes, at most `lines` lines and `limit` bytes, as the kubelet reads them."""
    try:
        log.flush()
        with open(log.name, "rb") as f:
            f.seek(0, 2)
            size = f.tell()
            f.seek(max(0, size - 64 * 1024))
            text = f.read().decode(errors="replace")
    except (OSError, AttributeError, TypeError):
        return ""
    run_lines = text.splitlines()
    starts = [i for i, line in enumerate(run_lines) if line.startswith("=== localcluster: pod ") and " start #" in line]
    if starts:
        run_lines = run_lines[starts[-1] + 1:]
    kept = [line for line in run_lines if not line.startswith("=== localcluster:")][-lines:]
    tail = "\n".join(kept).encode()[-limit:].decode(errors="ignore")
    return tail


def group_rss(pgid: int) -> int:
    """The resident memory, in bytes, of every process in the process group `pgid` (the container's
    process and its children), read from /proc."""
    total = 0
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()  # the command name may hold spaces
            if int(fields[2]) == pgid:  # pgrp; the fields after the name start at state
                total += int(fields[21]) * os.sysconf("SC_PAGE_SIZE")  # rss, in pages
        except (OSError, IndexError, ValueError):
            continue  # the process ended meanwhile
    return total


def over_memory_limit(run: ContainerRun) -> bool:
    """Enforce the container's memory limit as its memory cgroup would: a running process group
    over it is SIGKILLed (exit code 137) and its exit reported with reason OOMKilled. The kubelet
    samples every poll (50 ms) where the kernel stops the allocation itself, so a process can go
    past the limit by what it allocates in one poll before it is killed. True when it was killed now."""
    limit = run.memory_limit
    if limit is None or not run.alive() or run.oom_killed:
        return False
    assert run.process is not None
    if group_rss(run.process.pid) <= limit:
        return False
    run.oom_killed = True
    try:
        os.killpg(run.process.pid, signal.SIGKILL)  # as the kernel's OOM killer sends
    except ProcessLookupError:
        pass
    return True


def backoff(run: ContainerRun, restart_backoff: tuple[float, float]) -> float:
    """Seconds before the next restart: `first` doubled per restart so far, at most `cap`."""
    first, cap = restart_backoff
    return min(cap, first * 2.0 ** run.restart_count)  # 2.0: an int power of 2 would type as Any


def will_restart(policy: str, code: int | None) -> bool:
    """restartPolicy's answer for a container that ended with `code`."""
    return policy == "Always" or (policy == "OnFailure" and code != 0)


def settle(run: ContainerRun, *, policy: str, now: float, restart_backoff: tuple[float, float]) -> None:
    """Take the restart decision for a terminated container: CrashLoopBackOff until `restart_at`, or done."""
    run.settled = True
    if will_restart(policy, run.exit_code):
        run.restart_at = now + backoff(run, restart_backoff)
        run.last_state = {"terminated": run.state["terminated"]}
        run.state = {"waiting": {"reason": "CrashLoopBackOff", "message": f"back-off restarting failed container {run.name}"}}


def signal_all(runs: Iterable[ContainerRun], sig: int) -> None:
    """Send `sig` to the process group of every running container."""
    for run in runs:
        if run.alive():
            assert run.process is not None
            try:
                os.killpg(run.process.pid, sig)
            except ProcessLookupError:
                pass


def signal_one(runs: Iterable[ContainerRun], container: str | None, sig: int, *, pod: str) -> int:
    """Send `sig` to one container's process group (the first app container when None); its pid."""
    for run in runs:
        if (container is None and not run.init) or run.name == container:
            if run.process is None or not run.alive():
                raise ProcessLookupError(f"container {run.name} of pod {pod} is not running")
            os.killpg(run.process.pid, sig)
            return run.process.pid
    raise KeyError(f"pod {pod} has no container {container}")

