"""A hung job explains itself: a worker that raised but whose process never exits (as ps-lite's threads keep
MXNet alive) shows its traceback and every pod's state, periodically while `run` waits and at the timeout."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from localcluster.cli import commands as cli
from localcluster.cli import postmortem

REPO = Path(__file__).resolve().parents[2]
# The worker raises, prints the traceback as an uncaught exception would, and then hangs.
HANGING_WORKER = ("import sys, time, traceback\n"
                  "def train():\n    raise RuntimeError('worker 0 lost its server')\n"
                  "try:\n    train()\nexcept RuntimeError:\n    traceback.print_exc()\n"
                  "print('ps-lite threads still alive', flush=True)\ntime.sleep(120)\n")


def hanging_job() -> dict:
    return {"apiVersion": "kubeflow.org/v1", "kind": "MXJob", "metadata": {"name": "hangs"},
            "spec": {"mxReplicaSpecs": {"Worker": {"replicas": 1, "restartPolicy": "Never", "template": {"spec": {
                "terminationGracePeriodSeconds": 1,
                "containers": [{"name": "mxnet", "image": "busybox:1.36", "command": ["python", "-c", HANGING_WORKER]}]}}}}}}


@pytest.mark.e2e
@pytest.mark.apiserver
def test_a_hung_job_shows_its_traceback_and_pod_states_while_waiting_and_at_the_timeout(tmp_path: Path):
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(hanging_job()))
    result = subprocess.run([sys.executable, "-m", "localcluster", "run", str(path), "--state-dir", str(tmp_path / "state"),
                             "--timeout", "5", "--report-every", "2"],
                            # A guard against a hang, not a measure: start-up (a control plane of its own)
                            # took over 60 s beside the parallel suite on a loaded machine.
                            cwd=REPO, capture_output=True, text=True, timeout=180)
    assert result.returncode == cli.EXIT_TIMEOUT, result.stderr
    *diagnosis, reason = result.stderr.strip().splitlines()
    assert reason.startswith("MXJob default/hangs timed out after 5s in state Running")
    text = "\n".join(diagnosis)
    assert "hangs-worker-0  Running  restarts 0  mxnet: running since" in text
    assert "  Traceback (most recent call last):" in text
    assert "  RuntimeError: worker 0 lost its server" in text
    # The traceback, not the whole log; the pod's line gives its last output (what a hung worker said last).
    assert "ps-lite threads still alive" not in text.split("last lines of", 1)[1]
    assert re.search(r"hangs-worker-0  Running .* last output \d+s ago: 'ps-lite threads still alive'", text)
    # The periodic note said the same while it waited.
    assert "still waiting after" in result.stdout and "RuntimeError: worker 0 lost its server" in result.stdout


def test_trouble_is_the_last_traceback_with_its_exception_line():
    log = ["=== localcluster: pod p container mxnet start #0", "epoch 1",
           "Traceback (most recent call last):", '  File "a.py", line 1, in <module>', "    f()", "ValueError: old",
           "epoch 2", "Traceback (most recent call last):", '  File "b.py", line 2, in <module>', "    g()",
           "KeyError: 'x'", "still running"]
    assert postmortem.trouble(log) == ["Traceback (most recent call last):", '  File "b.py", line 2, in <module>', "    g()",
                                "KeyError: 'x'"]


def test_a_long_traceback_keeps_its_head_and_its_end():
    frames = [f'  File "f.py", line {i}, in f' for i in range(50)]
    found = postmortem.trouble(["Traceback (most recent call last):", *frames, "RecursionError: too deep"], limit=6)
    assert found == ["Traceback (most recent call last):", "  ...", *frames[-3:], "RecursionError: too deep"]


def test_an_error_line_without_a_traceback_is_shown_with_what_led_to_it():
    log = [f"step {i}" for i in range(30)] + ["[12:00:01] src/van.cc:310: Check failed: error connecting", "waiting"]
    found = postmortem.trouble(log, limit=5)
    assert found == ["step 28", "step 29", "[12:00:01] src/van.cc:310: Check failed: error connecting", "waiting"]


def test_a_clean_log_and_the_local_clusters_own_lines_are_no_trouble():
    assert postmortem.trouble(["=== localcluster: container mxnet exited with code 1 at T", "epoch 1 accuracy=0.9",
                        "validation-error=0.1 stderr ok"]) == []
