"""The process kubelet's memory limit: a container's process group over `resources.limits.memory` is
SIGKILLed and its exit reported as a kubelet reports a memory cgroup's kill (137, OOMKilled)."""
from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from localcluster.node.podprocess import ContainerRun, group_rss, over_memory_limit, record_exit, spawn


@pytest.mark.parametrize(("memory", "limit"), [
    ("64Mi", 64 << 20), ("67108864", 67108864), ("1Gi", 1 << 30), ("500M", 500 * 10**6), ("2k", 2000),
    ("1.5Gi", None), ("", None), (None, None),
], ids=lambda v: repr(v))
def test_the_limit_is_read_in_the_forms_the_api_server_writes(memory, limit):
    resources = {"limits": {"memory": memory}} if memory is not None else {}
    assert ContainerRun({"name": "c", "resources": resources}).memory_limit == limit


def start(tmp_path: Path, script: str, memory: str) -> ContainerRun:
    run = ContainerRun({"name": "c", "command": ["python"], "resources": {"limits": {"memory": memory}},
                        "terminationMessagePolicy": "FallbackToLogsOnError"})
    run.open_log(tmp_path / "c.log")
    assert spawn(run, [sys.executable, "-u", "-c", script], env={"PATH": "/usr/bin:/bin"}, workdir=tmp_path,
                 wrap=None) is None
    run.state = {"running": {"startedAt": "2026-01-01T00:00:00Z"}}
    return run


def test_a_process_over_the_limit_is_killed_and_reported_oom_killed(tmp_path: Path):
    run = start(tmp_path, "import time\nprint('allocating 48 MiB', flush=True)\nheld = bytearray(b'x') * (48 << 20)\n"
                          "time.sleep(30)", "32Mi")
    deadline = time.monotonic() + 20
    while not over_memory_limit(run) and time.monotonic() < deadline:
        time.sleep(0.05)
    record_exit(run)
    terminated = run.state["terminated"]
    assert (terminated["exitCode"], terminated["reason"]) == (137, "OOMKilled")
    assert terminated["message"].splitlines()[-1] == "allocating 48 MiB"  # the log's tail (FallbackToLogsOnError)


def test_a_process_under_the_limit_runs_on(tmp_path: Path):
    run = start(tmp_path, "import time\nprint('small', flush=True)\ntime.sleep(30)", "1Gi")
    try:
        time.sleep(0.5)
        assert run.process is not None and 0 < group_rss(run.process.pid) < 1 << 30
        assert not over_memory_limit(run) and run.alive()
    finally:
        assert run.process is not None
        run.process.kill()
        record_exit(run)
    assert run.state["terminated"]["reason"] == "Error"  # a kill that is not the limit's
