"""The command line: `run` a job (any kind a shipped CompositeController follows) with a live progress
view, and `logs` to read a pod's output.

Output: the progress view, the final status and a success line go to stdout; every error and the
line saying why a job did not succeed go to stderr. Exit codes are the EXIT_* constants below
(the README lists them).

This module is the shell: it reads the options once (`RunOptions`), starts the cluster, and loops.
What it decides lives in small functions beside it: how a job stands and how the run ends
(`jobstatus`, one status reader per kind), what is said after a failure (`postmortem`), and the
live view (`runview`).
"""

from __future__ import annotations

import argparse
import fcntl
import os
import shutil
import signal
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import FrameType, MappingProxyType
from typing import Any, TextIO, cast

import yaml

from localcluster.cli import kubectlyaml
from localcluster.cli import up as clusterup
from localcluster.cli.crds import ServedKind, served_kinds
from localcluster.cli.jobstatus import Outcome, RunEnd, Snapshot, UnknownKind, outcome, status_reader_for
from localcluster.cli.postmortem import diagnosis, job_results, log_files, post_mortem
from localcluster.cli.runview import Progress, duration, last_output, pod_log, pod_row, render
from localcluster.cluster import LocalCluster, check_dns_label
from localcluster.config import PARENT_KINDS
from localcluster.controlplane.kueue import API_GROUP as KUEUE_GROUP
from localcluster.metacontroller import CLIENT_BURST, CLIENT_QPS, Stale
from localcluster.metacontroller.binary import MetacontrollerBinaryError, check_binary
from localcluster.store import StoreError
from localcluster.types import KubeObject

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
# --validate, as kubectl spells it: how the API server meets a field the CRD does not know (its fieldValidation).
VALIDATE_CHOICES = {"strict": "Strict", "true": "Strict", "warn": "Warn", "ignore": "Ignore", "false": "Ignore"}
STRICT_HINT = " (fix the spelling, or remove the field; --validate=warn runs the job without it)"
# While a job runs, how often `run` notes every pod's state and the log lines that look like trouble.
REPORT_EVERY_SECONDS = 60.0
# When every running pod has been silent for --silent-after seconds (default SILENT_AFTER_SECONDS),
# `run` says so once (again after output resumes).
SILENT_AFTER_SECONDS = 120.0


class InputError(ValueError):
    """The job file cannot be used; the message names the file and what is wrong."""


def load_job(path: Path, warn: Callable[[str], None] | None = None) -> KubeObject:
    """The single job (MXJob or ChainerJob) in a YAML file, with a valid name and namespace; InputError otherwise.

    Any version the CRD serves is accepted and stored under the storage version, as the API server
    does with `conversion: None`; a deprecated version's warning goes to `warn`. The fields the CRD
    does not know are the API server's to name, when the job is submitted (`--validate`).
    """
    job, crd = _the_job(path, _documents(path))
    version = _served_version(path, job, crd)
    if warn is not None and (warning := crd.warning_for(version)):
        warn(f"Warning: {warning}")
    if problem := kubectlyaml.metadata_error(job):  # kubectl cannot decode it, whatever --validate says
        raise InputError(f"{path}: {problem}")
    job = {**job, "apiVersion": f"{crd.group}/{crd.storage}"}
    if problem := _name_problem(job.get("metadata")):
        raise InputError(f"{path}: {problem}")
    return cast(KubeObject, job)


def kueue_objects(path: Path) -> list[KubeObject]:
    """The file's Kueue objects (ResourceFlavor, ClusterQueue, LocalQueue, WorkloadPriorityClass...), which
    `run --kueue` applies before the job; InputError as for the job."""
    return [kubectlyaml.without_nulls(doc) for doc in _documents(path)
            if isinstance(doc, dict) and str(doc.get("apiVersion", "")).startswith(f"{KUEUE_GROUP}/")]


def _documents(path: Path) -> list[Any]:
    """The non-empty YAML documents of a file, as kubectl reads them; InputError naming the file otherwise."""
    try:
        with path.open() as stream:  # a stream, so YAML errors name the file
            return [doc for doc in kubectlyaml.load_all(stream) if doc]
    except OSError as err:
        raise InputError(f"cannot read {path}: {err.strerror or err}") from err
    except UnicodeDecodeError as err:
        raise InputError(f"{path} is not a text file (YAML must be UTF-8): {err.reason} at byte {err.start}") from err
    except yaml.YAMLError as err:
        raise InputError(f"{path} is not valid YAML: {err}") from err
    except kubectlyaml.ManifestError as err:
        raise InputError(f"{path}: kubectl cannot read this YAML: {err}") from err


def _the_job(path: Path, documents: list[Any]) -> tuple[dict[str, Any], ServedKind]:
    """The one document of a kind a shipped CompositeController follows (nulls dropped, as `kubectl apply`
    sends it), and that kind's CRD."""
    kinds = {kind: served_kinds()[kind] for kind in PARENT_KINDS.values()}
    jobs = [doc for doc in documents if isinstance(doc, dict) and doc.get("kind") in kinds]
    if len(jobs) != 1:
        raise InputError(f"{path} must hold exactly one job ({' or '.join(sorted(kinds))}), found {len(jobs)}")
    job = kubectlyaml.without_nulls(jobs[0])
    return job, kinds[job["kind"]]


def _served_version(path: Path, job: dict[str, Any], crd: ServedKind) -> str:
    """The job's API version, when its CRD serves it; InputError naming the served ones otherwise."""
    api_version = job.get("apiVersion")
    group, _, version = str(api_version).rpartition("/")
    if group != crd.group or version not in crd.served:
        served = ", ".join(f"{crd.group}/{v}" for v in crd.served)
        hint = (" Convert it with `mxjob-convert FILE > converted.yaml` (see the README)."
                if job["kind"] == "MXJob" and api_version == f"{crd.group}/v1alpha1" else "")
        raise InputError(f"{path}: apiVersion {api_version!r} is not served for {job['kind']}; "
                         f"use one of {served}.{hint}")
    return version


def _name_problem(meta: object) -> str | None:
    """Why the job's name or namespace cannot name a folder or an object; None when both are valid."""
    if not isinstance(meta, dict):
        return "metadata.name is required"
    problem = check_dns_label("metadata.name", meta.get("name"))
    if problem is None and "namespace" in meta:
        problem = check_dns_label("metadata.namespace", meta["namespace"])
    return problem


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


@dataclass(frozen=True)
class RunOptions:
    """What `localcluster run` was asked to do, read once from the command line."""

    file: Path
    state_dir: Path
    timeout: float
    validate: str = "Strict"  # the API server's fieldValidation: Strict, Warn or Ignore (VALIDATE_CHOICES maps kubectl's spellings)
    report_every: float = REPORT_EVERY_SECONDS
    silent_after: float = SILENT_AFTER_SECONDS
    client_qps: float = CLIENT_QPS
    client_burst: int = CLIENT_BURST
    stale_reads: str | None = None
    metacontroller: str = "emulation"  # or the path of a Metacontroller binary the cluster runs
    kueue: bool = False

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> RunOptions:
        # Namespaces built by hand (tests, callers) may leave out the newer options: their defaults apply.
        given = vars(args)
        optional = {name: given[name] for name in ("report_every", "silent_after", "client_qps", "client_burst",
                                                   "stale_reads", "metacontroller", "kueue") if name in given}
        return cls(file=Path(args.file), state_dir=Path(args.state_dir).resolve(), timeout=float(args.timeout),
                   validate=VALIDATE_CHOICES[given.get("validate", "strict")], **optional)


def run(args: argparse.Namespace, out: TextIO = sys.stdout, err: TextIO = sys.stderr) -> int:
    """Run one job to the end; the exit code says how it ended."""
    options = RunOptions.from_args(args)
    warnings: list[str] = []

    def warn(line: str) -> None:
        warnings.append(line)
        print(line, file=err)

    try:
        job = load_job(options.file, warn=warn)
        queues = kueue_objects(options.file) if options.kueue else []
    except InputError as error:
        print(f"error: {error}", file=err)
        return EXIT_INVALID
    code, reason, results = _run_locked(job, options, out, err, warn, queues)
    if reason is None:  # said already: the cluster could not start, or the run was stopped
        return code
    if warnings:  # said at the start, long scrolled away by now: once more, next to the outcome
        print(f"{len(warnings)} warning{'s' if len(warnings) > 1 else ''} about {args.file}, as at the start:", file=err)
        print("\n".join("  " + line for line in warnings), file=err)
    if results:
        print("\n".join(results), file=out)
    print(reason, file=out if code == EXIT_SUCCEEDED else err)
    return code


def _run_locked(job: KubeObject, options: RunOptions, out: TextIO, err: TextIO,
                warn: Callable[[str], None], queues: list[KubeObject]) -> tuple[int, str | None, list[str]]:
    """(exit code, closing message, result lines) of one run, under the job's lock and the stop signals; the
    message is None when the run ended before the job did (said on `err` already)."""
    name = job["metadata"]["name"]
    namespace = job["metadata"].get("namespace") or "default"
    signals = StopSignals(err)
    with signals.installed():
        try:
            with job_lock(options.state_dir, namespace, name):
                return _run_cluster(job, options, signals, out, err, warn, queues)
        except RuntimeError as error:
            print(f"error: {error}", file=err)
            return EXIT_CANNOT_START, None, []
        except Stopped as stop:
            print(f"{job['kind']} {namespace}/{name}: interrupted by {signal.Signals(stop.signum).name}; "
                  "every process is stopped", file=err)
            return 128 + stop.signum, None, []


def _run_cluster(job: KubeObject, options: RunOptions, signals: StopSignals, out: TextIO,
                 err: TextIO, warn: Callable[[str], None], queues: list[KubeObject]) -> tuple[int, str | None, list[str]]:
    name = job["metadata"]["name"]
    namespace = job["metadata"].get("namespace") or "default"
    job_dir = options.state_dir / namespace / name
    cluster = LocalCluster(options.state_dir, hooks_log=job_dir / "hooks-server.log", client_qps=options.client_qps,
                           client_burst=options.client_burst, stale=cast("Stale | None", options.stale_reads),
                           control_plane_dir=job_dir / "controlplane", metacontroller=options.metacontroller,
                           kueue=options.kueue)
    signals.cluster = cluster
    try:
        _start(cluster, job, options.validate, warn, queues)
    except StoreError as error:
        signals.stopping = True
        cluster.stop()
        if error.code not in (400, 422):  # the server refused the job itself (strict decoding, the CRD's rules)
            print(f"error: the local cluster could not start: {error}", file=err)
            return EXIT_CANNOT_START, None, []
        hint = STRICT_HINT if "strict decoding error" in error.message else ""
        print(f"error: {options.file}: {error.message}{hint}", file=err)
        return EXIT_INVALID, None, []
    except (RuntimeError, OSError, ValueError) as error:  # ValueError: a job folder that escapes
        signals.stopping = True
        cluster.stop()
        print(f"error: the local cluster could not start: {error}", file=err)
        return EXIT_CANNOT_START, None, []
    try:
        code, reason = watch(cluster, name, namespace, options, out, err)
        return code, reason, job_results(cluster.job_dir(name, namespace)) if code == EXIT_SUCCEEDED else []
    finally:
        signals.stopping = True  # from here on a signal only hurries the stop along
        cluster.stop()


def _start(cluster: LocalCluster, job: KubeObject, validate: str, warn: Callable[[str], None], queues: list[KubeObject]) -> None:
    name, namespace = job["metadata"]["name"], job["metadata"].get("namespace") or "default"
    # The control plane keeps its files in the job's folder: empty it first (only under the lock), submit after.
    shutil.rmtree(cluster.job_dir(name, namespace), ignore_errors=True)
    cluster.start()
    if queues:
        cluster.apply(queues)
    cluster.submit(job, clear_logs=False, field_validation=validate, warn=warn)


def silence(cluster: LocalCluster, name: str, namespace: str) -> tuple[list[str], float] | None:
    """The running pods and the shortest time any of them has been silent; None when none runs."""
    running = [pod_row(pod)[0] for pod in cluster.pods(name, namespace) if pod_row(pod)[1] == "Running"]
    if not running:
        return None
    quiet = [found[1] if (found := last_output(pod_log(cluster, name, namespace, pod))) else 0.0 for pod in running]
    return running, min(quiet)


def silence_notice(quiet_for: float | None, silent_after: float, noted: bool) -> tuple[bool, bool]:
    """(say it now, noted from now on): a stretch of silence of every running pod is said once, and
    again only after some output (or no running pod) ended it."""
    if quiet_for is not None and quiet_for >= silent_after:
        return not noted, True
    return False, False


# How each end of a run maps to the command's exit code (the README lists them).
END_EXIT_CODES: Mapping[RunEnd, int] = MappingProxyType({
    "Succeeded": EXIT_SUCCEEDED, "Failed": EXIT_FAILED, "Invalid": EXIT_INVALID, "TimedOut": EXIT_TIMEOUT,
    "HotLoop": EXIT_STAND_IN, "Suspended": EXIT_SUSPENDED})


def watch(cluster: LocalCluster, name: str, namespace: str, options: RunOptions, out: TextIO,
          err: TextIO) -> tuple[int, str]:
    """Show progress until the job ends (or the timeout); then the final view and status.

    Every `report_every` seconds while the job runs, and at a timeout (on `err`), every pod's state
    and the end of each log holding a traceback or an error: a crashed worker whose process never
    exits says why the job hangs. When every running pod has written nothing for `silent_after`
    seconds, that is noted once (and again if it happens again after output resumed).
    """
    submitted = cluster.get_job(name, namespace) or {}
    kind = submitted.get("kind", "")
    if problem := _unfollowed(cluster, kind, f"{namespace}/{name}"):
        return EXIT_INVALID, problem
    _print_header(cluster, name, namespace, kind, out)
    progress = Progress(out)
    ended = _until_outcome(cluster, submitted, options, progress)
    # Workers leave a moment after the scheduler, and cleanPodPolicy deletes what still runs: wait
    # for that, so the final view is how the job really ended and no process is cut short.
    settle_until = time.monotonic() + SETTLE_SECONDS
    while ended.end in ("Succeeded", "Failed") and not pods_settled(cluster, name, namespace) \
            and time.monotonic() < settle_until:
        progress.show(render(cluster, name, namespace))
        time.sleep(REFRESH_SECONDS)
    progress.show(render(cluster, name, namespace))
    final = cluster.get_job(name, namespace) or {}
    print("final status:", file=out)
    print(yaml.safe_dump({"status": final.get("status", {})}, sort_keys=False).rstrip(), file=out)
    message = ended.message
    if ended.end == "TimedOut":
        print("\n".join(diagnosis(cluster, name, namespace)), file=err)
    if ended.end == "Failed":
        lines, message = post_mortem(cluster, name, namespace, message)
        print("\n".join(lines), file=out)
    out.flush()
    return END_EXIT_CODES[ended.end], message


def _unfollowed(cluster: LocalCluster, kind: str, key: str) -> str | None:
    """Why `run` cannot follow a job of this kind; None when it can."""
    if next((c for c in cluster.configs if c.parent_kind == kind), None) is None:
        return f"{kind} {key}: no CompositeController in metacontroller/ follows {kind}"
    try:
        status_reader_for(kind)
    except UnknownKind as error:
        return f"{kind} {key}: {error}"
    return None


def _print_header(cluster: LocalCluster, name: str, namespace: str, kind: str, out: TextIO) -> None:
    config = next(c for c in cluster.configs if c.parent_kind == kind)
    print(f"hooks server: {cluster.hooks.url if cluster.hooks else '-'} (log {cluster.hooks.log_path if cluster.hooks else '-'})", file=out)
    print(f"controller: {config.name} from {config.source}", file=out)
    print(f"pod logs: {cluster.job_dir(name, namespace)}/<pod>.log  (localcluster logs {name} <pod>"
          f"{'' if namespace == 'default' else f' -n {namespace}'} [--follow])", file=out)


def _until_outcome(cluster: LocalCluster, submitted: KubeObject, options: RunOptions, progress: Progress) -> Outcome:
    """Redraw the view, and note silence and the periodic report, until `outcome` says the run ends."""
    kind, meta = submitted["kind"], submitted["metadata"]
    name, namespace = meta["name"], meta.get("namespace") or "default"
    deadline = time.monotonic() + options.timeout
    next_report = time.monotonic() + options.report_every
    silent_noted = False
    while True:
        progress.show(render(cluster, name, namespace))
        quiet = silence(cluster, name, namespace)
        say, silent_noted = silence_notice(quiet[1] if quiet else None, options.silent_after, silent_noted)
        if say and quiet:
            progress.note([f"silent: no running pod of {kind} {namespace}/{name} has written to its log for "
                           f"{duration(quiet[1])} ({', '.join(quiet[0])}). A worker whose program ended (sys.exit, "
                           "an uncaught exception) can stay Running while ps-lite's threads keep its process alive; "
                           "its log's last lines say whether it did."])
        if time.monotonic() >= next_report:
            next_report = time.monotonic() + options.report_every
            progress.note([f"still waiting after {time.monotonic() - progress.started:.0f}s;",
                           *diagnosis(cluster, name, namespace)])
        ended = outcome(_snapshot(cluster, submitted), time.monotonic(), deadline=deadline, timeout=options.timeout)
        if ended is not None:
            return ended
        time.sleep(REFRESH_SECONDS)


def _snapshot(cluster: LocalCluster, submitted: KubeObject) -> Snapshot:
    meta = submitted["metadata"]
    current = cluster.get_job(meta["name"], meta.get("namespace") or "default")
    controller = cluster.controller_for(current) if current else None
    return Snapshot(kind=submitted["kind"], key=f"{meta.get('namespace') or 'default'}/{meta['name']}", job=current,
                    hot_loop=controller.hot_loop(meta["uid"]) if controller else None)


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
    run_parser.add_argument("--metacontroller", default="emulation", metavar="emulation|PATH", type=_engine(("emulation",)),
                            help="what syncs the job: the project's emulation (default), or the Metacontroller binary at PATH, "
                                 "run as its ServiceAccount with the install's RBAC (docs/localcluster.md)")
    logs_parser = sub.add_parser("logs", help="print a pod's log")
    logs_parser.add_argument("job")
    logs_parser.add_argument("pod")
    logs_parser.add_argument("-c", "--container", help="the container (default: the pod's first, mxnet)")
    logs_parser.add_argument("-n", "--namespace", default="default", help="the job's namespace (default: default)")
    logs_parser.add_argument("-f", "--follow", action="store_true", help="keep printing while the job's `run` goes on")
    up_parser = sub.add_parser("up", help="start a cluster on this machine that kubectl talks to (real control plane); "
                                          "stays in the foreground until Ctrl-C or `localcluster down`")
    up_parser.add_argument("--metacontroller", default="emulation", metavar="emulation|none|PATH", type=_engine(("emulation", "none")),
                           help="emulation (default): the project's Metacontroller stand-in syncs the jobs; none: leave "
                                "that role to a real Metacontroller run against the printed kubeconfig; PATH: run the "
                                "Metacontroller binary there, as its ServiceAccount (docs/localcluster.md)")
    up_parser.add_argument("--cpus", help="the node's CPU capacity as a quantity (4, 500m; default: this machine's CPUs): "
                                          "what kube-scheduler fits pods' requests into")
    up_parser.add_argument("--memory", help="the node's memory capacity as a quantity (16Gi; default: this machine's memory)")
    up_parser.add_argument("--gpus", type=int, default=0, help="nvidia.com/gpu capacity of the node (default 0; pods that ask "
                                                               "for GPUs are placed within it and run without any)")
    for subparser in (run_parser, up_parser):
        subparser.add_argument("--kueue", action="store_true",
                               help="also install and start a real Kueue (built by `make kueue`) with its pod integration on; "
                                    + ("run applies the file's Kueue objects (ResourceFlavor, ClusterQueue, LocalQueue...) "
                                       "before the job" if subparser is run_parser else
                                       "up prints how to give it a quota"))
    down_parser = sub.add_parser("down", help="stop the cluster `localcluster up` runs from this state dir")
    # `--state-dir` after the subcommand too (`localcluster run job.yaml --state-dir DIR`): there it wins.
    for subparser in (run_parser, logs_parser, up_parser, down_parser):
        subparser.add_argument("--state-dir", default=argparse.SUPPRESS, help=state_help)
    return top


def _engine(names: tuple[str, ...]) -> Callable[[str], str]:
    """`--metacontroller`: one of `names`, or the path of an executable (checked here, so a typo is an
    argument error, not a cluster that fails to start)."""
    def parse(text: str) -> str:
        if text in names:
            return text
        try:
            return str(check_binary(text))
        except MetacontrollerBinaryError as error:
            raise argparse.ArgumentTypeError(str(error)) from error
    return parse


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
