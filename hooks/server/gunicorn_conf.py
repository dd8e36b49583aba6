"""gunicorn settings for the hooks server; loaded by `gunicorn --config python:hooks.server.gunicorn_conf`.

Command-line flags (e.g. `--bind`, `--workers`) override every setting here.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import tempfile

from hooks.server.logs import JsonFormatter


def ipv6_listening() -> str:
    """How this node takes IPv6: "dual" ([::] also answers IPv4), "separate" ([::] is IPv6 only), or "none".

    Asked of the kernel with a throwaway socket, since a pod may run where IPv6 is disabled (binding
    [::] would then fail and the server would not start), in an IPv6-only cluster (0.0.0.0 alone
    would fail every probe), or on a node with net.ipv6.bindv6only=1.
    """
    if not socket.has_ipv6:
        return "none"
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as probe:
            probe.bind(("::", 0))
            v6only = probe.getsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY)
    except OSError:
        return "none"
    return "separate" if v6only else "dual"


def listen_addresses(port: str, *, ipv6: str) -> list[str]:
    """Every interface on the port, IPv4 and, where the node has it, IPv6."""
    if ipv6 == "dual":
        return [f"[::]:{port}"]
    if ipv6 == "separate":
        return [f"0.0.0.0:{port}", f"[::]:{port}"]
    return [f"0.0.0.0:{port}"]


# Listen on every interface on 8080 (the Service maps port 80 to it), IPv4 and IPv6 alike; PORT
# lets a platform or a test pick another port without rewriting the command.
bind = listen_addresses(os.environ.get("PORT", "8080"), ipv6=ipv6_listening())

# The sync is pure CPU under the GIL, so parallelism comes from processes. Two workers keep a
# second request (another MXJob) moving while one large job is being synced.
workers = int(os.environ.get("WEB_CONCURRENCY", "2"))

# A few threads per worker only so that health probes and scrapes are not queued behind a long sync;
# more would just contend for the GIL.
worker_class = "gthread"
threads = int(os.environ.get("GUNICORN_THREADS", "4"))

# Metacontroller gives up on a hook after 10 s and retries; a worker still busy at 30 s is stuck,
# not slow, so gunicorn may replace it. The same bound applies to draining on shutdown.
timeout = 30
graceful_timeout = 30
# Longer than a sync interval of a busy controller, so Metacontroller's keep-alive connections are
# reused instead of reopened for every sync.
keepalive = 30

# gunicorn's worker heartbeat files. /dev/shm is a tmpfs in every container (writable even with a
# read-only root filesystem), so heartbeats never wait on disk I/O; without it, /tmp (the pod
# mounts an emptyDir there).
worker_tmp_dir = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else "/tmp"

# No access log: the app writes one structured line per sync, and a line per health probe and
# scrape would only bury them. gunicorn's own messages go to stderr as JSON, like the app's.
accesslog = None
errorlog = "-"
loglevel = "info"
logconfig_dict = {
    "version": 1,
    "disable_existing_loggers": False,
    # The class itself, not its dotted name: a rename fails here at import, not in the master's logging.
    "formatters": {"json": {"()": JsonFormatter}},
    "handlers": {
        "stderr": {"class": "logging.StreamHandler", "formatter": "json", "stream": "ext://sys.stderr"},
    },
    # The root logger carries the app's per-sync lines ("hooks.server.app" propagates to it).
    "root": {"level": "INFO", "handlers": ["stderr"]},
    "loggers": {
        "gunicorn.error": {"level": "INFO", "handlers": ["stderr"], "propagate": False},
        "gunicorn.access": {"level": "INFO", "handlers": [], "propagate": False},
    },
}

_MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
# Started by hand without PROMETHEUS_MULTIPROC_DIR (outside the image), the server uses a private
# temporary directory, so /metrics sums every worker instead of showing whichever one answers the
# scrape; on_exit removes it. This must happen when this file is read, before any process imports
# the app: prometheus_client picks its mode when it is first imported.
_own_metrics_dir: str | None = None
if not os.environ.get(_MULTIPROC_ENV):
    _own_metrics_dir = tempfile.mkdtemp(prefix="mxjob-hooks-metrics-")
    os.environ[_MULTIPROC_ENV] = _own_metrics_dir

# The master imports prometheus_client now, with the directory set above (so it starts in
# multiprocess mode), and never later: child_exit runs from gunicorn's SIGCHLD handler, and an import
# there can be interrupted by the next worker's exit, whose handler then finds prometheus_client
# half-imported, fails, and the master dies without on_exit (seen when the import was lazy).
from prometheus_client import multiprocess  # noqa: E402


def on_starting(server: object) -> None:
    """Create the metrics directory, and empty it of a previous run's files (they would add up)."""
    path = os.environ.get(_MULTIPROC_ENV)
    if not path:
        return
    os.makedirs(path, exist_ok=True)
    # Only the value files, never the directory itself: it may be an emptyDir mount point.
    for stale in glob.glob(os.path.join(path, "*.db")):
        os.remove(stale)


def child_exit(server: object, worker: object) -> None:
    """Drop a dead worker's live-gauge files; its counters stay so that totals never go down."""
    if os.environ.get(_MULTIPROC_ENV):
        multiprocess.mark_process_dead(worker.pid)  # type: ignore[attr-defined, no-untyped-call]


def on_exit(server: object) -> None:
    """Remove the metrics directory this server made for itself."""
    if _own_metrics_dir is not None:
        shutil.rmtree(_own_metrics_dir, ignore_errors=True)
