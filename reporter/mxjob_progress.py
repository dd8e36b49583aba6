"""Report training progress to the MXJob and ChainerJob operator: one small module, standard library
only, Python 3.8+.

    import mxjob_progress
    mxjob_progress.report(step, total=steps, loss=0.25)           # from any training loop
    mod.fit(..., batch_end_callback=mxjob_progress.batch_end_callback(total=steps))  # MXNet Module
    trainer.extend(mxjob_progress.chainer_extension())            # a Chainer Trainer

A job with `runPolicy.progress` (or a `stallPolicy`) gets a ConfigMap `<job>-progress` and the
right to patch it; the operator points its pods at it with MXJOB_PROGRESS_CONFIGMAP and
MXJOB_PROGRESS_NAMESPACE, and names the pods that report with MXJOB_PROGRESS_REPORTER (index 0
of each replica type by default). A ChainerJob's reporters are MPI ranks instead (a pod may hold
several, and the master's pod is renamed on every retry): its pods get MXJOB_PROGRESS_MPI_RANKS
("0" by default, or "all"), and a process of a listed rank reports as `rank-<N>`, N read from the
environment MPI gives each rank (OMPI_COMM_WORLD_RANK, PMIX_RANK or PMI_RANK; 0 for a process
started without mpiexec). A report is a JSON merge PATCH of that ConfigMap's entry for
this reporter, over HTTPS to the API server with the pod's ServiceAccount token, as any in-cluster
client makes it (KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT, the token and CA files).

Everything here is safe to call from a training loop:
- Outside the operator (no MXJOB_PROGRESS_* in the environment), or on a pod that does not
  report, every call does nothing and returns False.
- At most one write per MXJOB_PROGRESS_INTERVAL seconds (30 by default) per process; calls in
  between keep only the newest report, which the next call past the interval writes (and a report
  whose step reaches its total is written at once).
- Nothing raises into the caller: a failed write is dropped (the first failure is printed once to
  stderr, so a missing right is visible in the pod's log), and a write waits at most
  MXJOB_PROGRESS_TIMEOUT seconds (5 by default).
"""
from __future__ import annotations

import json
import math
import os
import ssl
import sys
import threading
import time
import urllib.request
from typing import Any, Callable, Dict, Mapping, Optional

__all__ = ["Reporter", "batch_end_callback", "chainer_extension", "report"]
__version__ = "0.1.0"

SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
DEFAULT_INTERVAL = 30.0
DEFAULT_TIMEOUT = 5.0
# Where an MPI launcher puts a process's rank: OpenMPI (4 and 5), PMIx, and MPICH's PMI.
RANK_ENV_NAMES = ("OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK")


def mpi_reporter_name(env: Mapping[str, str]) -> str:
    """`rank-<N>` when MXJOB_PROGRESS_MPI_RANKS lists this process's MPI rank ("all" lists every
    rank), else "" (this process does not report)."""
    ranks = env.get("MXJOB_PROGRESS_MPI_RANKS", "").strip()
    if not ranks:
        return ""
    rank = next((env[name].strip() for name in RANK_ENV_NAMES if env.get(name, "").strip()), "0")
    if not rank.isdigit():
        return ""
    listed = {r.strip() for r in ranks.split(",")}
    return f"rank-{int(rank)}" if "all" in listed or str(int(rank)) in listed else ""


def _float_env(env: Mapping[str, str], name: str, default: float) -> float:
    try:
        value = float(env.get(name, default))
    except ValueError:
        return default
    return value if math.isfinite(value) and value >= 0 else default


class Reporter:
    """One reporter: where it writes, how often, and its last write. `report` is thread-safe."""

    def __init__(self, env: Optional[Mapping[str, str]] = None, *,
                 clock: Callable[[], float] = time.monotonic, wall: Callable[[], float] = time.time,
                 send: Optional[Callable[[str, bytes, Dict[str, str]], None]] = None) -> None:
        env = os.environ if env is None else env
        self.config_map = env.get("MXJOB_PROGRESS_CONFIGMAP", "")
        self.namespace = env.get("MXJOB_PROGRESS_NAMESPACE", "")
        self.name = env.get("MXJOB_PROGRESS_REPORTER", "") or mpi_reporter_name(env)
        host, port = env.get("KUBERNETES_SERVICE_HOST", ""), env.get("KUBERNETES_SERVICE_PORT", "443")
        if ":" in host and not host.startswith("["):
            host = f"[{host}]"  # an IPv6 address
        self.url = (f"https://{host}:{port}/api/v1/namespaces/{self.namespace}/configmaps/{self.config_map}"
                    if host else "")
        self.token_file = env.get("MXJOB_PROGRESS_TOKEN_FILE", SERVICE_ACCOUNT_DIR + "/token")
        self.ca_file = env.get("MXJOB_PROGRESS_CA_FILE", SERVICE_ACCOUNT_DIR + "/ca.crt")
        self.interval = _float_env(env, "MXJOB_PROGRESS_INTERVAL", DEFAULT_INTERVAL)
        self.timeout = _float_env(env, "MXJOB_PROGRESS_TIMEOUT", DEFAULT_TIMEOUT) or DEFAULT_TIMEOUT
        try:
            self.attempt = max(0, int(env.get("MXJOB_ATTEMPT", "0")))
        except ValueError:
            self.attempt = 0
        self.enabled = bool(self.config_map and self.namespace and self.name and self.url)
        self.writes = 0  # how many reports were written
        self._clock, self._wall = clock, wall
        self._send = send or self._https_patch
        self._last: Optional[float] = None
        self._pending: Optional[Dict[str, Any]] = None
        self._warned = False
        self._lock = threading.Lock()

    def report(self, step: Optional[int] = None, total: Optional[int] = None, **metrics: Any) -> bool:
        """Report progress; True when this call wrote it (False: skipped, rate-limited or failed)."""
        if not self.enabled:
            return False
        try:
            entry = self._entry(step, total, metrics)
            with self._lock:
                self._pending = entry
                now = self._clock()
                final = step is not None and total is not None and step >= total
                if self._last is not None and now - self._last < self.interval and not final:
                    return False
                self._last, pending, self._pending = now, self._pending, None
            return self._write(pending)
        except Exception as err:  # never into the training loop
            self._warn(err)
            return False

    def flush(self) -> bool:
        """Write the newest report a rate limit held back, now (at the end of training, say)."""
        if not self.enabled:
            return False
        with self._lock:
            pending, self._pending = self._pending, None
            if pending is not None:
                self._last = self._clock()
        return self._write(pending) if pending is not None else False

    def _entry(self, step: Optional[int], total: Optional[int], metrics: Mapping[str, Any]) -> Dict[str, Any]:
        entry: Dict[str, Any] = {"attempt": self.attempt}
        if step is not None:
            entry["step"] = int(step)
        if total is not None:
            entry["total"] = int(total)
        kept = {}
        for name, value in metrics.items():
            if isinstance(value, bool) or not isinstance(value, (int, float, str)):
                try:
                    value = float(value)  # numpy and MXNet scalars
                except (TypeError, ValueError):
                    continue
            if isinstance(value, float) and not math.isfinite(value):
                continue
            kept[str(name)] = value
        if kept:
            entry["metrics"] = kept
        entry["time"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self._wall()))
        return entry

    def _write(self, entry: Dict[str, Any]) -> bool:
        body = json.dumps({"data": {self.name: json.dumps(entry, separators=(",", ":"))}}).encode()
        try:
            with open(self.token_file) as f:
                token = f.read().strip()
            self._send(self.url, body, {"Authorization": f"Bearer {token}",
                                        "Content-Type": "application/merge-patch+json"})
        except Exception as err:
            self._warn(err)
            return False
        self.writes += 1
        return True

    def _https_patch(self, url: str, body: bytes, headers: Dict[str, str]) -> None:
        context = ssl.create_default_context(cafile=self.ca_file)
        request = urllib.request.Request(url, data=body, headers=headers, method="PATCH")
        with urllib.request.urlopen(request, timeout=self.timeout, context=context) as response:
            response.read()

    def _warn(self, err: BaseException) -> None:
        if self._warned:
            return
        self._warned = True
        try:
            print(f"mxjob_progress: a progress report to ConfigMap {self.namespace}/{self.config_map} "
                  f"failed ({err}); reports go on being tried and are dropped when they fail "
                  f"(docs/progress.md: RBAC)", file=sys.stderr, flush=True)
        except Exception:
            pass


_default: Optional[Reporter] = None
_default_lock = threading.Lock()


def _reporter() -> Reporter:
    global _default
    with _default_lock:
        if _default is None:
            _default = Reporter()
        return _default


def report(step: Optional[int] = None, total: Optional[int] = None, **metrics: Any) -> bool:
    """Report progress for this process's reporter (see the module's docs); never raises."""
    try:
        return _reporter().report(step, total, **metrics)
    except Exception:
        return False


def flush() -> bool:
    """Write a report the rate limit held back, now; never raises."""
    try:
        return _reporter().flush()
    except Exception:
        return False


def batch_end_callback(total: Optional[int] = None, reporter: Optional[Reporter] = None) -> Callable[[Any], None]:
    """An MXNet `batch_end_callback` (Module.fit, or called by hand in a Gluon loop with any object
    that has `eval_metric`): the step is the number of batches so far in this process, the metrics
    are the eval metric's name/value pairs. `total`: the number of batches the run will make."""
    steps = [0]

    def callback(param: Any) -> None:
        try:
            steps[0] += 1
            metrics: Dict[str, Any] = {}
            eval_metric = getattr(param, "eval_metric", None)
            if eval_metric is not None:
                for name, value in eval_metric.get_name_value():
                    metrics[str(name)] = value
            epoch = getattr(param, "epoch", None)
            if isinstance(epoch, int):
                metrics["epoch"] = epoch
            (reporter or _reporter()).report(steps[0], total, **metrics)
        except Exception:
            pass

    return callback


def chainer_extension(total: Optional[int] = None, reporter: Optional[Reporter] = None) -> Callable[[Any], None]:
    """A Chainer Trainer extension (`trainer.extend(chainer_extension())`, run every iteration): the
    step is the updater's iteration, the metrics the trainer's observation (`main/loss`, ...) and
    the epoch. `total`: the iterations the run will make; by default read from a stop trigger given
    in iterations (`stop_trigger=(1000, "iteration")`), else left out."""

    def extension(trainer: Any) -> None:
        try:
            updater = trainer.updater
            metrics: Dict[str, Any] = {}
            for name, value in (getattr(trainer, "observation", None) or {}).items():
                value = getattr(value, "array", value)  # a chainer.Variable
                try:
                    metrics[str(name)] = float(value)
                except (TypeError, ValueError):
                    continue
            epoch = getattr(updater, "epoch", None)
            if isinstance(epoch, int):
                metrics["epoch"] = epoch
            (reporter or _reporter()).report(int(updater.iteration), total or _iterations(trainer), **metrics)
        except Exception:
            pass

    # What Trainer.extend reads of an extension: run it after every iteration, by this name.
    extension.trigger = (1, "iteration")  # type: ignore[attr-defined]
    extension.default_name = "mxjob_progress"  # type: ignore[attr-defined]
    return extension


def _iterations(trainer: Any) -> Optional[int]:
    trigger = getattr(trainer, "stop_trigger", None)
    period, unit = getattr(trigger, "period", None), getattr(trigger, "unit", None)
    return int(period) if unit == "iteration" and isinstance(period, int) else None
