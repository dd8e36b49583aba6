"""The command line: `run` a job (any kind a shipped CompositeController follows) with a live progress
view, and `logs` to read a pod's output.

Output: the progress view, the final status and a success line go to stdout; every error and the
line saying why a job did not succeed go to stderr. Exit codes are the EXIT_* constants below
(the README lists them).
"""

from __future__ import annotations

import argparse
import fcntl
import os
import re
import shutil
import signal
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import TextIO, cast

import yaml

from . import clusterup, kubectlyaml
from .cluster import LocalCluster, check_dns_label, condition, finished, job_state
from .config import PARENT_KINDS
from .crds import served_kinds
from .metacontroller import CLIENT_BURST, CLIENT_QPS
from .store import StoreError
from .types import ContainerStatus, KubeObject

EXIT_SUCCEEDED, EXIT_FAILED, EXIT_INVALID, EXIT_TIMEOUT, EXIT_STAND_IN = 0, 1, 2, 3, 4
EXIT_SUSPENDED = 5  # the job is suspended: nothing will run until spec.runPolicy.suspend is false
EXIT_CANNOT_START = 6  # the local cluster itself could not start (hooks server, state dir in use)
EXIT_BROKEN_PIPE = 128 + signal.SIGPIPE  # stdout was closed (`run ... | head`)
# Stopped by a signal: 128 + its number, as a shell reports it (130 Ctrl-C, 143 SIGTERM, 129 SIGHUP).
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
DEFAULT_STATE_DIR = ".localcluster"
REFRESH_SECONDS = 0.25
# After the job has finished, how long `run` waits for its pods to settle (finish on their own within
# the operator's success grace, or be removed by cleanPodPolicy) before it stops everything.
SETTLE_SECONDS = 45.0
FAILED_LOG_LINES = 15
# --validate, as kubectl spells it: how the API server meets a field the CRD does not know (its fieldValidation).
VALIDATE_CHOICES = {"strict": "Strict", "true": "Strict", "warn": "Warn", "ignore": "Ignore", "false": "Ignore"}
STRICT_HINT = " (fix the spelling, or remove the field; --validate=warn runs the job without it)"
# While a job runs, how often `run` notes every pod's state and the log lines that look like trouble.
REPORT_EVERY_SECONDS = 60.0
TROUBLE_LOG_LINES = 20
# The live view shows each running pod's last log line, cut to this width, and how long its log has been
# silent once that is at least SILENT_SHOW_SECONDS; when every running pod has been silent for
# --silent-after seconds (default SILENT_AFTER_SECONDS), `run` says so once (again after output resumes).
LAST_LINE_WIDTH = 100
SILENT_SHOW_SECONDS = 10.0
SILENT_AFTER_SECONDS = 120.0
# After a failure, the last lines of at most this many failed containers' logs (every one is listed).
FAILED_LOGS_SHOWN = 4
# A Python traceback's first line, or a line that says error, fatal or panic (localcluster's own lines excepted).
_TRACEBACK = "Traceback (most recent call last):"
# A metric such as `validation-error=0.1` is not an error.
_ERROR_LINE = re.compile(r"(?<![\w-])(error|fatal|panic)(?![\w=-])|^\w+(Error|Exception):", re.I)


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


def _cut(line: str) -> str:
    return line if len(line) <= LAST_LINE_WIDTH else line[:LAST_LINE_WIDTH - 3] + "..."


def _seconds(value: float) -> str:
    seconds = int(value)
    return f"{seconds}s" if seconds < 120 else f"{seconds // 60}m{seconds % 60}s"


def output_row(found: tuple[str, float] | None) -> str:
    """The view's line under a running pod: its last output, and how long it has been silent."""
    if found is None:
        return "    > (no output yet)"
    line, silent = found
    note = f"  [silent {_seconds(silent)}]" if silent >= SILENT_SHOW_SECONDS else ""
    return f"    > {_cut(line) or '(no output yet)'}{note}"


def render(cluster: LocalCluster, name: str, namespace: str = "default") -> list[str]:
    """The progress view of one job as lines: under each running pod, its last line of output."""
    job = cluster.get_job(name, namespace) or {}
    age = _age(job.get("metadata", {}).get("creationTimestamp"))
    lines = [f"{job.get('kind', 'Job')} {namespace}/{name}   state: {job_state(job) or '-'}   age: {age}"]
    lines.append(f"  {'POD':<44} {'PHASE':<12} {'RESTARTS':>8} {'AGE':>6}")
    for pod_name, phase, restarts, age in map(pod_row, cluster.pods(name, namespace)):
        lines.append(f"  {pod_name:<44} {phase:<12} {restarts:>8} {age:>6}")
        if phase == "Running":
            lines.append(output_row(last_output(pod_log(cluster, name, namespace, pod_name))))
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


class InputError(ValueError):
    """The job file cannot be used; the message names the file and what is wrong."""


def load_job(path: Path, warn: Callable[[str], None] | None = None) -> KubeObject:
    """The single job (MXJob or ChainerJob) in a YAML file, with a valid name and namespace; InputError otherwise.

    Any version the CRD serves is accepted and stored under the storage version, as the API server
    does with `conversion: None`; a deprecated version's warning goes to `warn`. The fields the CRD
    does not know are the API server's to name, when the job is submitted (`--validate`).
    """
    try:
        with path.open() as stream:  # a stream, so YAML errors name the file
            documents = [doc for doc in kubectlyaml.load_all(stream) if doc]
    except OSError as err:
        raise InputError(f"cannot read {path}: {err.strerror or err}") from err
    except UnicodeDecodeError as err:
        raise InputError(f"{path} is not a text file (YAML must be UTF-8): {err.reason} at byte {err.start}") from err
    except yaml.YAMLError as err:
        raise InputError(f"{path} is not valid YAML: {err}") from err
    except kubectlyaml.ManifestError as err:
        raise InputError(f"{path}: kubectl cannot read this YAML: {err}") from err
    kinds = {kind: served_kinds()[kind] for kind in PARENT_KINDS.values()}
    jobs = [doc for doc in documents if isinstance(doc, dict) and doc.get("kind") in kinds]
    if len(jobs) != 1:
        raise InputError(f"{path} must hold exactly one job ({' or '.join(sorted(kinds))}), found {len(jobs)}")
    job = kubectlyaml.without_nulls(jobs[0])  # as `kubectl apply` sends it
    crd = kinds[job["kind"]]
    api_version = job.get("apiVersion")
    group, _, version = str(api_version).rpartition("/")
    if group != crd.group or version not in crd.served:
        served = ", ".join(f"{crd.group}/{v}" for v in crd.served)
        hint = (" Convert it with `mxjob-convert FILE > converted.yaml` (see the README)."
                if job["kind"] == "MXJob" and api_version == f"{crd.group}/v1alpha1" else "")
        raise InputError(f"{path}: apiVersion {api_version!r} is not served for {job['kind']}; "
                         f"use one of {served}.{hint}")
    if warn is not None and (warning := crd.warning_for(version)):
        warn(f"Warning: {warning}")
    if problem := kubectlyaml.metadata_error(job):  # kubectl cannot decode it, whatever --validate says
        raise InputError(f"{path}: {problem}")
    job = {**job, "apiVersion": f"{crd.group}/{crd.storage}"}
    meta = job.get("metadata")
    if not isinstance(meta, dict):
        raise InputError(f"{path}: metadata.name is required")
    problem = check_dns_label("metadata.name", meta.get("name"))
    if problem is None and "namespace" in meta:
        problem = check_dns_label("metadata.namespace", meta["namespace"])
    if problem:
        raise InputError(f"{path}: {problem}")
    return cast(KubeObject, job)


class Stopped(BaseException):
    """A stop signal (SIGINT, SIGTERM, SIGHUP) arrived while the job was running."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


class StopSignals:
    """The first stop signal ends the run (the cluster is then stopped in order); a second one
    while stopping kills every process at once, so an impatient user never orphans anything."""

    def __init__(self, err: TextIO):
        self.err = err
        self.cluster: LocalCluster | None = None
        self.stopping = False

    @contextmanager
    def installed(self) -> Iterator[StopSignals]:
        previous = {sig: signal.signal(sig, self._handle) for sig in STOP_SIGNALS}
        try:
            yield self
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if not self.stopping:
            self.stopping = True
            self._say(f"{signal.Signals(signum).name}: stopping every process… (Ctrl-C again to kill them at once)")
            raise Stopped(signum)
        self._say(f"{signal.Signals(signum).name} again: killing every process now")
        if self.cluster is not None:
            self.cluster.kill()

    def _say(self, text: str) -> None:
        try:
            print(text, file=self.err, flush=True)
        except (OSError, ValueError):
            pass  # a closed terminal (SIGHUP) must not keep the processes from being stopped


@contextmanager
def job_lock(state_dir: Path, namespace: str, name: str) -> Iterator[None]:
    """Only one `run` per job and state dir: a second one would delete the first's live logs."""
    path = state_dir / namespace / f"{name}.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            owner = handle.read().strip() or "?"
            raise RuntimeError(
                f"MXJob {namespace}/{name} is already being run from this state dir (pid {owner}); "
                f"wait for it, or give this run another --state-dir") from None
        handle.seek(0)
        handle.truncate()
        handle.write(str(os.getpid()))
        handle.flush()
        yield


def job_running(state_dir: Path, namespace: str, name: str) -> bool:
    """Whether a `run` of this job holds its lock right now."""
    path = state_dir / namespace / f"{name}.lock"
    if not path.exists():
        return False
    with path.open() as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        return False


def pods_settled(cluster: LocalCluster, name: str, namespace: str) -> bool:
    """No pod of the job runs, waits to start, or is being deleted, and the status has caught up."""
    if not all(pod_row(pod)[1] in ("Succeeded", "Failed", "Evicted") for pod in cluster.pods(name, namespace)):
        return False
    replicas: dict[str, dict[str, int]] = ((cluster.get_job(name, namespace) or {}).get("status") or {}).get("replicaStatuses") or {}
    return sum(counts.get("active", 0) for counts in replicas.values()) == 0


_EXIT_LINE = re.compile(r"^=== localcluster: container \S+ exited with code (\d+) at (\S+)$", re.M)


def failed_containers(cluster: LocalCluster, name: str, namespace: str) -> list[tuple[str, str, int, str, Path]]:
    """(pod, container, exit code, when, log) of every container of the job whose last run exited
    non-zero, in the order they exited. 143 (SIGTERM) is left out: that is the cleanup stopping a pod,
    not a cause. Read from the logs, so a pod that cleanPodPolicy deleted after it failed is still found."""
    found = []
    for (pod, container), path in log_files(cluster.job_dir(name, namespace)).items():
        exits = _EXIT_LINE.findall(path.read_text(errors="replace"))
        if exits and int(exits[-1][0]) not in (0, 128 + signal.SIGTERM):
            found.append((exits[-1][1], pod, container, int(exits[-1][0]), path))
    return [(pod, container, code, at, path) for at, pod, container, code, path in sorted(found)]


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
            if int(code) not in (0, 128 + signal.SIGTERM):  # 143: stopped by the cleanup, not the cause
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
        said = f"  last output {_seconds(output[1])} ago: {_cut(output[0])!r}" if output and output[0] else ""
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


def run(args: argparse.Namespace, out: TextIO = sys.stdout, err: TextIO = sys.stderr) -> int:
    """Run one job to the end; the exit code says how it ended."""
    try:
        # Namespaces built by hand (tests, callers) may leave out the newer options: their defaults apply.
        validate = VALIDATE_CHOICES[getattr(args, "validate", "strict")]
        warnings: list[str] = []

        def warn(line: str) -> None:
            warnings.append(line)
            print(line, file=err)

        job = load_job(Path(args.file), warn=warn)
    except InputError as error:
        print(f"error: {error}", file=err)
        return EXIT_INVALID
    name = job["metadata"]["name"]
    namespace = job["metadata"].get("namespace") or "default"
    state_dir = Path(args.state_dir).resolve()
    signals = StopSignals(err)
    with signals.installed():
        try:
            with job_lock(state_dir, namespace, name):
                job_dir = state_dir / namespace / name
                cluster = LocalCluster(state_dir, hooks_log=job_dir / "hooks-server.log",
                                       client_qps=getattr(args, "client_qps", CLIENT_QPS),
                                       client_burst=getattr(args, "client_burst", CLIENT_BURST),
                                       stale=getattr(args, "stale_reads", None), control_plane_dir=job_dir / "controlplane")
                signals.cluster = cluster
                try:
                    # The control plane keeps its files in the job's folder: empty it first (only under the lock), submit after.
                    shutil.rmtree(cluster.job_dir(name, namespace), ignore_errors=True)
                    cluster.start()
                    cluster.submit(job, clear_logs=False, field_validation=validate, warn=warn)
                except StoreError as error:
                    signals.stopping = True
                    cluster.stop()
                    if error.code not in (400, 422):  # the server refused the job itself (strict decoding, the CRD's rules)
                        print(f"error: the local cluster could not start: {error}", file=err)
                        return EXIT_CANNOT_START
                    hint = STRICT_HINT if "strict decoding error" in error.message else ""
                    print(f"error: {args.file}: {error.message}{hint}", file=err)
                    return EXIT_INVALID
                except (RuntimeError, OSError, ValueError) as error:  # ValueError: a job folder that escapes
                    signals.stopping = True
                    cluster.stop()
                    print(f"error: the local cluster could not start: {error}", file=err)
                    return EXIT_CANNOT_START
                try:
                    code, reason = watch(cluster, name, namespace, args.timeout, out, err=err,
                                         report_every=getattr(args, "report_every", REPORT_EVERY_SECONDS),
                                         silent_after=getattr(args, "silent_after", SILENT_AFTER_SECONDS))
                finally:
                    signals.stopping = True  # from here on a signal only hurries the stop along
                    cluster.stop()
        except RuntimeError as error:
            print(f"error: {error}", file=err)
            return EXIT_CANNOT_START
        except Stopped as stop:
            print(f"{job['kind']} {namespace}/{name}: interrupted by {signal.Signals(stop.signum).name}; "
                  "every process is stopped", file=err)
            return 128 + stop.signum
    if warnings:  # said at the start, long scrolled away by now: once more, next to the outcome
        print(f"{len(warnings)} warning{'s' if len(warnings) > 1 else ''} about {args.file}, as at the start:", file=err)
        print("\n".join("  " + line for line in warnings), file=err)
    print(reason, file=out if code == EXIT_SUCCEEDED else err)
    return code


def silence(cluster: LocalCluster, name: str, namespace: str) -> tuple[list[str], float] | None:
    """The running pods and the shortest time any of them has been silent; None when none runs."""
    running = [pod_row(pod)[0] for pod in cluster.pods(name, namespace) if pod_row(pod)[1] == "Running"]
    if not running:
        return None
    quiet = [found[1] if (found := last_output(pod_log(cluster, name, namespace, pod))) else 0.0 for pod in running]
    return running, min(quiet)


def watch(cluster: LocalCluster, name: str, namespace: str, timeout: float, out: TextIO, *,
          err: TextIO | None = None, report_every: float = REPORT_EVERY_SECONDS,
          silent_after: float = SILENT_AFTER_SECONDS) -> tuple[int, str]:
    """Show progress until the job ends (or the timeout); then the final view and status.

    Every `report_every` seconds while the job runs, and at a timeout (on `err`), every pod's state
    and the end of each log holding a traceback or an error: a crashed worker whose process never
    exits says why the job hangs. When every running pod has written nothing for `silent_after`
    seconds, that is noted once (and again if it happens again after output resumed).
    """
    key = f"{namespace}/{name}"
    submitted = cluster.get_job(name, namespace) or {}
    kind = submitted.get("kind", "MXJob")
    config = next((c for c in cluster.configs if c.parent_kind == kind), None)
    if config is None:
        return EXIT_INVALID, f"{kind} {key}: no CompositeController in metacontroller/ follows {kind}"
    print(f"hooks server: {cluster.hooks.url if cluster.hooks else '-'} (log {cluster.hooks.log_path if cluster.hooks else '-'})", file=out)
    print(f"controller: {config.name} from {config.source}", file=out)
    print(f"pod logs: {cluster.job_dir(name, namespace)}/<pod>.log  (localcluster logs {name} <pod>"
          f"{'' if namespace == 'default' else f' -n {namespace}'} [--follow])", file=out)
    uid = submitted["metadata"]["uid"]
    progress = Progress(out)
    deadline = time.monotonic() + timeout
    next_report = time.monotonic() + report_every
    outcome: tuple[int, str] | None = None
    silent_noted = False
    while outcome is None:
        progress.show(render(cluster, name, namespace))
        quiet = silence(cluster, name, namespace)
        if quiet and quiet[1] >= silent_after and not silent_noted:
            silent_noted = True
            progress.note([f"silent: no running pod of {kind} {key} has written to its log for {_seconds(quiet[1])} "
                           f"({', '.join(quiet[0])}). A worker whose program ended (sys.exit, an uncaught exception) "
                           "can stay Running while ps-lite's threads keep its process alive; its log's last lines "
                           "say whether it did."])
        elif quiet is None or quiet[1] < silent_after:
            silent_noted = False
        if time.monotonic() >= next_report:
            next_report = time.monotonic() + report_every
            progress.note([f"still waiting after {time.monotonic() - progress.started:.0f}s;",
                           *diagnosis(cluster, name, namespace)])
        current = cluster.get_job(name, namespace)
        controller = cluster.controller_for(current) if current else None
        hot = controller.hot_loop(uid) if controller else None
        if hot:
            outcome = (EXIT_STAND_IN, f"stand-in error: {kind} {key}: {hot}")
        elif finished(current) == "Succeeded":
            outcome = (EXIT_SUCCEEDED, f"{kind} {key} {job_state(current)}")
        elif finished(current) == "Failed":
            failed = condition(current, "Failed") or {}
            message = failed.get("message", "")
            # Each kind's hook names its validation failure <Kind>FailedValidation.
            if str(failed.get("reason", "")).endswith("FailedValidation"):
                outcome = (EXIT_INVALID, message or f"{kind} {key} has an invalid spec")
            else:
                outcome = (EXIT_FAILED, f"{kind} {key} Failed: {failed.get('reason', '')}: {message}")
        elif (condition(current, "Suspended") or {}).get("status") == "True":
            outcome = (EXIT_SUSPENDED, f"{kind} {key} is suspended (spec.runPolicy.suspend: true), so nothing runs; "
                                       "set it to false to run the job")
        elif time.monotonic() >= deadline:
            outcome = (EXIT_TIMEOUT, f"{kind} {key} timed out after {timeout:g}s in state {job_state(current) or '-'}"
                                     " (pods and log errors above)")
        else:
            time.sleep(REFRESH_SECONDS)
    # Workers leave a moment after the scheduler, and cleanPodPolicy deletes what still runs: wait
    # for that, so the final view is how the job really ended and no process is cut short.
    settle_until = time.monotonic() + SETTLE_SECONDS
    while outcome[0] in (EXIT_SUCCEEDED, EXIT_FAILED) and not pods_settled(cluster, name, namespace) \
            and time.monotonic() < settle_until:
        progress.show(render(cluster, name, namespace))
        time.sleep(REFRESH_SECONDS)
    progress.show(render(cluster, name, namespace))
    final = cluster.get_job(name, namespace) or {}
    print("final status:", file=out)
    print(yaml.safe_dump({"status": final.get("status", {})}, sort_keys=False).rstrip(), file=out)
    if outcome[0] == EXIT_TIMEOUT:
        print("\n".join(diagnosis(cluster, name, namespace)), file=err or out)
    if outcome[0] == EXIT_FAILED:
        failures = failed_containers(cluster, name, namespace)
        message = outcome[1]
        # The pod the Failed condition names first, then every other that failed, in the order they exited.
        shown = sorted(failures, key=lambda f: not named_in(message, f[0]))
        paths = [path for *_, path in shown] or [p for p in [failing_log(cluster, name, namespace, message)] if p]
        for path in paths[:FAILED_LOGS_SHOWN]:
            print(f"last lines of {path}:", file=out)
            print("\n".join("  " + line for line in tail(path, FAILED_LOG_LINES)), file=out)
        if failures:
            print(f"failed containers ({len(failures)}):", file=out)
            for pod, container, code, at, path in failures:
                print(f"  {pod} (container {container}): exit code {code} at {at}  {path}", file=out)
        later = [f"{pod} (exit code {code})" for pod, _, code, _, _ in failures if not named_in(message, pod)]
        if later and len(later) < len(failures):  # the job failed on a pod (not a deadline or the backoff limit)
            # The condition and status.replicaStatuses were written when the job failed and stay as they
            # were (frozen at the end, docs/lifecycle.md); a pod that failed a moment after is told here.
            outcome = (outcome[0], f"{message} Also failed, after the job had failed (so not in its status, which "
                                   f"is frozen at the end): {', '.join(later)}.")
    out.flush()
    return outcome


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


def logs(args: argparse.Namespace, out: TextIO = sys.stdout, err: TextIO = sys.stderr) -> int:
    """Print one container's log (the pod's first container unless -c); --follow keeps printing."""
    state_dir = Path(args.state_dir).resolve()
    for field, value in (("namespace", args.namespace), ("job", args.job)):
        problem = check_dns_label(field, value)
        if problem:
            print(f"error: {problem}", file=err)
            return EXIT_INVALID
    files = log_files(state_dir / args.namespace / args.job)
    mine = {container: path for (pod, container), path in files.items() if pod == args.pod}
    if args.container:
        path = mine.get(args.container)
    else:
        path = next((p for p in mine.values() if "." not in p.name[:-len(".log")]), None)
    if path is None:
        available = ", ".join(f"{pod} -c {container}" for pod, container in files) or "none"
        what = f"container {args.container} of pod {args.pod}" if args.container else f"pod {args.pod}"
        print(f"error: no log for {what} of job {args.namespace}/{args.job} in {state_dir}; available: {available}", file=err)
        return EXIT_FAILED
    with path.open(errors="replace") as handle:
        while True:
            chunk = handle.read()
            if chunk:
                out.write(chunk)
                out.flush()
            elif not args.follow or not job_running(state_dir, args.namespace, args.job):
                return EXIT_SUCCEEDED
            else:
                time.sleep(REFRESH_SECONDS)


def parser() -> argparse.ArgumentParser:
    """The command line's arguments."""
    top = argparse.ArgumentParser(
        prog="localcluster",
        description="Run MXJobs and ChainerJobs on this machine: a Metacontroller stand-in, the real hooks server, pods as processes.")
    state_help = "where pod logs go (default .localcluster in the current directory)"
    top.add_argument("--state-dir", default=DEFAULT_STATE_DIR, help=state_help)
    sub = top.add_subparsers(dest="command", required=True)
    run_parser = sub.add_parser("run", help="run one MXJob or ChainerJob to the end; exit 0 only if it succeeded")
    run_parser.add_argument("file", help="a YAML file holding one MXJob or ChainerJob")
    run_parser.add_argument("--timeout", type=float, default=600.0, help="give up after this many seconds (default 600)")
    run_parser.add_argument("--validate", choices=sorted(VALIDATE_CHOICES), default="strict", type=str.lower,
                            help="a field the CRD does not know: strict (or true; the default, as kubectl apply's) "
                                 "refuses the job (exit 2); warn names it on stderr, runs the job without it and "
                                 "names it again at the end; ignore (or false) says nothing")
    run_parser.add_argument("--report-every", type=float, default=REPORT_EVERY_SECONDS, metavar="SECONDS",
                            help="while the job runs, note every pod's state and log errors this often (default 60)")
    run_parser.add_argument("--silent-after", type=_positive_float, default=SILENT_AFTER_SECONDS, metavar="SECONDS",
                            help="say so when no running pod has written to its log for this long "
                                 f"(default {SILENT_AFTER_SECONDS:g})")
    run_parser.add_argument("--client-qps", type=_positive_float, default=CLIENT_QPS,
                            help=f"Metacontroller's API client rate, writes/s (its --client-go-qps; default {CLIENT_QPS:g})")
    run_parser.add_argument("--client-burst", type=_positive_int, default=CLIENT_BURST,
                            help=f"requests allowed at once before the rate applies (its --client-go-burst; default {CLIENT_BURST})")
    run_parser.add_argument("--stale-reads", choices=("parent", "children"), default=None,
                            help="serve the sync hook a parent one status write behind its children, or the reverse, "
                                 "as Metacontroller's informer caches can (default: fresh reads)")
    logs_parser = sub.add_parser("logs", help="print a pod's log")
    logs_parser.add_argument("job")
    logs_parser.add_argument("pod")
    logs_parser.add_argument("-c", "--container", help="the container (default: the pod's first, mxnet)")
    logs_parser.add_argument("-n", "--namespace", default="default", help="the job's namespace (default: default)")
    logs_parser.add_argument("-f", "--follow", action="store_true", help="keep printing while the job's `run` goes on")
    up_parser = sub.add_parser("up", help="start a cluster on this machine that kubectl talks to (real control plane); "
                                          "stays in the foreground until Ctrl-C or `localcluster down`")
    up_parser.add_argument("--metacontroller", choices=("emulation", "none"), default="emulation",
                           help="emulation (default): the project's Metacontroller stand-in syncs the jobs; none: leave "
                                "that role to a real Metacontroller run against the printed kubeconfig")
    up_parser.add_argument("--gpus", type=int, default=0, help="nvidia.com/gpu capacity of the node (nothing checks it)")
    down_parser = sub.add_parser("down", help="stop the cluster `localcluster up` runs from this state dir")
    # `--state-dir` after the subcommand too (`localcluster run job.yaml --state-dir DIR`): there it wins.
    for subparser in (run_parser, logs_parser, up_parser, down_parser):
        subparser.add_argument("--state-dir", default=argparse.SUPPRESS, help=state_help)
    return top


def _positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be a number above 0, not {text!r}")
    return value


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number from 1, not {text!r}")
    return value


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `localcluster` command and of `python -m localcluster`."""
    args = parser().parse_args(argv)
    try:
        if args.command == "run":
            return run(args)
        if args.command == "up":
            return clusterup.up(args, sys.stdout, sys.stderr)
        if args.command == "down":
            return clusterup.down(args, sys.stdout, sys.stderr)
        return logs(args)
    except BrokenPipeError:
        # The reader went away (`run ... | head`): the cluster was stopped on the way out; say
        # nothing more, and keep Python from complaining when it flushes stdout at exit.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
    except KeyboardInterrupt:  # Ctrl-C in `logs --follow`
        return 128 + signal.SIGINT
