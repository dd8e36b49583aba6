"""What `localcluster run` tells a user at the end and while it waits: every failed pod when several fail
at once, a misspelled field refused (or, under --validate=warn, named again next to the outcome), each
running pod's last line of output, and a silent worker told from one that is working."""

from __future__ import annotations

import argparse
import io
import os
import re
import time
from pathlib import Path

import pytest
import yaml
from helpers import yamlio

from localcluster.cli import commands as cli
from localcluster.cli import postmortem, runview

ROOT = Path(__file__).resolve().parents[2]

# Every worker writes a marker, waits until all `n` have (so all are running), prints, then exits 1;
# the worker whose pod name ends in the digit given as `late` first waits `delay` seconds more, ignoring
# SIGTERM (as a training script busy in C code does), so it fails after the job has been declared Failed.
FAILING = ("import glob, os, signal, sys, time\n"
           "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
           "marks, n, late, delay = sys.argv[1], int(sys.argv[2]), sys.argv[3], float(sys.argv[4])\n"
           "me = os.environ['HOSTNAME']\n"
           "open(os.path.join(marks, me), 'w').close()\n"
           "while len(glob.glob(os.path.join(marks, '*'))) < n:\n    time.sleep(0.01)\n"
           "print(me, 'lost its server', flush=True)\n"
           "if me.endswith(late):\n    time.sleep(delay)\n"
           "sys.exit(1)\n")


def workers_job(name: str, command: list[str], replicas: int = 2, grace: int = 10) -> dict:
    return {"apiVersion": "kubeflow.org/v1", "kind": "MXJob", "metadata": {"name": name},
            "spec": {"mxReplicaSpecs": {"Worker": {"replicas": replicas, "restartPolicy": "Never", "template": {"spec": {
                "terminationGracePeriodSeconds": grace,
                "containers": [{"name": "mxnet", "image": "busybox:1.36", "command": command}]}}}}}}


def run(tmp_path: Path, manifest: dict, *extra: str, timeout: float = 60) -> tuple[int, str, str]:
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(manifest))
    args = cli.parser().parse_args(["--state-dir", str(tmp_path / "state"), "run", str(path), "--timeout", str(timeout),
                                    *extra])
    out, err = io.StringIO(), io.StringIO()
    code = cli.run(args, out=out, err=err)
    return code, out.getvalue(), err.getvalue()


# --- every failed pod is reported ----------------------------------------------------------------------


@pytest.mark.e2e
@pytest.mark.apiserver
@pytest.mark.parametrize("delay", [0.0, 1.5], ids=["same-moment", "second-after-the-job-failed"])
def test_two_workers_failing_at_once_are_both_reported(tmp_path: Path, delay: float):
    marks = tmp_path / "marks"
    marks.mkdir()
    command = ["python", "-c", FAILING, str(marks), "2", "1", str(delay)]
    code, out, err = run(tmp_path, workers_job("both", command))
    assert code == cli.EXIT_FAILED, err
    reason = err.strip().splitlines()[-1]
    status = yamlio.load(out.split("final status:\n", 1)[1].split("\nlast lines of", 1)[0])["status"]
    # Both logs are shown and both pods are listed, each with its exit code.
    for pod in ("both-worker-0", "both-worker-1"):
        assert f"last lines of {tmp_path / 'state' / 'default' / 'both' / pod}.log:" in out
        assert re.search(rf"^  {pod} \(container mxnet\): exit code 1 at \S+  ", out, re.M), out
        assert pod in reason, reason  # the final line names every failed pod
    assert "failed containers (2):" in out
    # The counts agree with what the final line says: the status counts the pods the job failed on;
    # a pod that failed after that is named as such.
    failed_in_status = status["replicaStatuses"]["Worker"]["failed"]
    after = reason.split("Also failed, after the job had failed", 1)
    assert failed_in_status + (after[1].count("exit code 1") if len(after) == 2 else 0) == 2
    if delay:  # deterministic: worker 1 fails 1.5 s after worker 0, while the cleanup waits for it
        assert failed_in_status == 1
        assert after[1].endswith(": both-worker-1 (exit code 1)."), reason


def test_failed_containers_come_from_the_logs_in_exit_order_without_the_cleanups_sigterm(tmp_path: Path):
    job_dir = tmp_path / "default" / "j"
    job_dir.mkdir(parents=True)

    def log(pod: str, *exits: tuple[int, str]) -> None:
        lines = [f"=== localcluster: pod {pod} container mxnet start #0 at T: ['x']"]
        lines += [f"=== localcluster: container mxnet exited with code {code} at {at}" for code, at in exits]
        (job_dir / f"{pod}.log").write_text("\n".join(lines) + "\n")

    log("j-worker-0", (1, "2026-01-01T00:00:05Z"))
    log("j-worker-1", (1, "2026-01-01T00:00:03Z"))
    log("j-worker-2", (143, "2026-01-01T00:00:06Z"))  # stopped by the cleanup
    log("j-worker-3", (1, "2026-01-01T00:00:01Z"), (0, "2026-01-01T00:00:02Z"))  # restarted and succeeded
    log("j-server-0", (137, "2026-01-01T00:00:04Z"))

    class Cluster:
        def job_dir(self, name: str, namespace: str) -> Path:
            return tmp_path / namespace / name

    found = postmortem.failed_containers(Cluster(), "j", "default")  # type: ignore[arg-type]
    assert [(pod, code) for pod, _, code, _, _ in found] == [("j-worker-1", 1), ("j-server-0", 137), ("j-worker-0", 1)]


# --- a misspelled field ---------------------------------------------------------------------------------


def typo_job() -> dict:
    job = yamlio.load((ROOT / "examples" / "local" / "dist-train-digits.yaml").read_text())
    job["spec"]["mxReplicaSpecs"]["Worker"]["replica"] = 2
    job["spec"]["runPolicy"] = {"activeDeadlineSecond": 600}
    return job


@pytest.mark.e2e
@pytest.mark.apiserver
def test_by_default_a_misspelled_field_refuses_the_file_as_kubectl_apply_does(tmp_path: Path):
    code, out, err = run(tmp_path, typo_job())
    assert code == cli.EXIT_INVALID
    assert 'unknown field "spec.mxReplicaSpecs.Worker.replica"' in err
    assert 'unknown field "spec.runPolicy.activeDeadlineSecond"' in err
    assert "--validate=warn runs the job without it" in err
    assert out == "" and not list((tmp_path / "state").rglob("dist-train-digits-*.log"))  # no pod ran


@pytest.mark.e2e
@pytest.mark.apiserver
def test_under_validate_warn_the_warnings_are_repeated_next_to_the_outcome(tmp_path: Path):
    job = workers_job("typo", ["python", "-c", "print('trained')"], replicas=1, grace=1)
    job["spec"]["mxReplicaSpecs"]["Worker"]["replica"] = 2
    job["spec"]["runPolicy"] = {"activeDeadlineSecond": 600}
    code, out, err = run(tmp_path, job, "--validate=warn")
    assert code == cli.EXIT_SUCCEEDED, err
    expected = ['Warning: unknown field "spec.mxReplicaSpecs.Worker.replica"',
                'Warning: unknown field "spec.runPolicy.activeDeadlineSecond"']
    # At the start, and again at the very end of stderr, after everything the run printed.
    lines = err.strip().splitlines()
    assert lines[:2] == expected
    assert lines[-3:] == [f"2 warnings about {tmp_path / 'job.yaml'}, as at the start:",
                          *("  " + line for line in expected)]
    assert out.strip().splitlines()[-1] == "MXJob default/typo Succeeded"


# --- something to watch ---------------------------------------------------------------------------------

# Worker 0 raises and its main thread ends, but a non-daemon thread keeps the process alive (as ps-lite's
# threads keep MXNet's); worker 1 trains (a line every 0.2 s) for 4 s, then goes quiet too.
SILENT = ("import os, sys, threading, time\n"
          "me = os.environ['HOSTNAME']\n"
          "if me.endswith('0'):\n"
          "    threading.Thread(target=time.sleep, args=(120,)).start()\n"
          "    print('worker 0: lost its server, exiting', flush=True)\n"
          "    sys.exit(1)\n"
          "for step in range(20):\n    print(f'step {step} loss=0.{20 - step:02d}', flush=True)\n    time.sleep(0.2)\n"
          "time.sleep(120)\n")


@pytest.mark.e2e
@pytest.mark.apiserver
def test_a_silent_worker_is_told_from_a_working_one_and_an_all_silent_job_is_noted(tmp_path: Path):
    job = workers_job("quiet", ["python", "-c", SILENT], grace=1)
    code, out, err = run(tmp_path, job, "--report-every", "2", "--silent-after", "2.5", timeout=10)
    assert code == cli.EXIT_TIMEOUT, err
    reports = out.split("still waiting after")[1:]
    assert reports, out
    first = reports[0]
    stuck = re.search(r"quiet-worker-0  Running .* last output (\d+)s ago: 'worker 0: lost its server, exiting'", first)
    working = re.search(r"quiet-worker-1  Running .* last output (\d+)s ago: 'step \d+ loss=0\.\d+'", first)
    assert stuck and working, first
    # While worker 1 still prints, some report shows worker 0 silent for longer. Not always the first:
    # on a busy machine the first report can come in the second worker 0 printed its last line.
    ages = [(int(s.group(1)), int(w.group(1))) for report in reports
            if (s := re.search(r"quiet-worker-0  Running .* last output (\d+)s ago", report))
            and (w := re.search(r"quiet-worker-1  Running .* last output (\d+)s ago: 'step", report))]
    assert any(silent > busy for silent, busy in ages), out
    # Once worker 1 is quiet as well, the run says so, once.
    notes = re.findall(r"^silent: no running pod of MXJob default/quiet has written to its log for \S+ "
                       r"\(quiet-worker-0, quiet-worker-1\)", out, re.M)
    assert len(notes) == 1, out
    assert out.index(notes[0]) > out.index(first)


def test_the_view_shows_each_running_pods_last_line_and_how_long_it_has_been_silent(tmp_path: Path):
    log = tmp_path / "p.log"
    log.write_text("=== localcluster: pod p container mxnet start #0 at T: ['x']\nepoch 1 acc=0.5\nepoch 2 acc=0.7\n"
                   "=== localcluster: volume note\n")
    now = time.time()
    os.utime(log, (now - 42, now - 42))
    assert runview.last_output(log, now=now) == ("epoch 2 acc=0.7", pytest.approx(42, abs=1))
    assert runview.output_row(runview.last_output(log, now=now)) == "    > epoch 2 acc=0.7  [silent 42s]"
    assert runview.output_row(("epoch 3", 1.0)) == "    > epoch 3"
    assert runview.output_row(("x" * 500, 600.0)) == f"    > {'x' * 97}...  [silent 10m0s]"
    assert runview.output_row(None) == "    > (no output yet)"
    assert runview.last_output(tmp_path / "none.log") is None


def test_in_a_ci_log_output_lines_alone_do_not_redraw_the_view():
    out = io.StringIO()
    progress = runview.Progress(out)
    view = ["MXJob default/j   state: Running   age: 1s", "  POD", "  j-worker-0  Running  0  1s"]
    progress.show([*view, "    > step 1"])
    progress.show([*view, "    > step 2"])
    assert out.getvalue().count("---") == 1


def test_run_defaults_match_kubectl():
    args = cli.parser().parse_args(["run", "job.yaml"])
    assert (args.validate, args.silent_after) == ("strict", cli.SILENT_AFTER_SECONDS)
    assert isinstance(args, argparse.Namespace)
