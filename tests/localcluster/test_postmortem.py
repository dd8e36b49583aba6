"""The post-mortem of a run: which container failed, what `run` prints after a failure, and the result
line of a job that succeeded, each as a table over log text."""

from __future__ import annotations

from pathlib import Path

import pytest

from localcluster.cli.postmortem import FailedContainer, container_state, failure_report, job_results, last_failure, result_line

START = "=== localcluster: pod p container mxnet start #0 at T: ['x']"


def exited(code: int, at: str) -> str:
    return f"=== localcluster: container mxnet exited with code {code} at {at}"


LAST_FAILURES = {
    "still-running": ([START, "epoch 1"], None),
    "exited-0": ([START, exited(0, "T1")], None),
    "exited-1": ([START, "boom", exited(1, "T1")], (1, "T1")),
    "killed": ([START, exited(137, "T2")], (137, "T2")),
    "stopped-by-the-cleanup": ([START, exited(143, "T3")], None),
    "failed-then-restarted-and-succeeded": ([START, exited(1, "T1"), START, exited(0, "T2")], None),
    "succeeded-then-failed": ([START, exited(0, "T1"), START, exited(2, "T2")], (2, "T2")),
    "the-program-printing-a-look-alike": (["    === localcluster: container mxnet exited with code 1 at T"], None),
}


@pytest.mark.parametrize(("lines", "expected"), LAST_FAILURES.values(), ids=LAST_FAILURES.keys())
def test_a_logs_last_run_is_a_failure_unless_it_succeeded_or_was_stopped(lines, expected):
    assert last_failure("\n".join(lines) + "\n") == expected


W0 = FailedContainer("j-worker-0", "mxnet", 1, "T1", Path("/s/j-worker-0.log"))
W1 = FailedContainer("j-worker-1", "mxnet", 137, "T2", Path("/s/j-worker-1.log"))
FALLBACK = Path("/s/j-scheduler-0.log")


def tail_of(path: Path) -> list[str]:
    return [f"end of {path.name}"]


REPORTS = {
    "one-failed-pod-named": (
        [W0], "MXJob ns/j Failed: MXJobFailed: j-worker-0 exited with code 1", None,
        ["last lines of /s/j-worker-0.log:", "  end of j-worker-0.log", "failed containers (1):",
         "  j-worker-0 (container mxnet): exit code 1 at T1  /s/j-worker-0.log"],
        "MXJob ns/j Failed: MXJobFailed: j-worker-0 exited with code 1"),
    "the-named-pod-first-and-a-later-one-said": (
        [W0, W1], "Failed: j-worker-1 was killed", None,
        ["last lines of /s/j-worker-1.log:", "  end of j-worker-1.log", "last lines of /s/j-worker-0.log:",
         "  end of j-worker-0.log", "failed containers (2):",
         "  j-worker-0 (container mxnet): exit code 1 at T1  /s/j-worker-0.log",
         "  j-worker-1 (container mxnet): exit code 137 at T2  /s/j-worker-1.log"],
        "Failed: j-worker-1 was killed Also failed, after the job had failed (so not in its status, which is "
        "frozen at the end): j-worker-0 (exit code 1)."),
    "a-deadline-names-no-pod-so-nothing-is-later": (
        [W0, W1], "Failed: activeDeadlineSeconds passed", None,
        ["last lines of /s/j-worker-0.log:", "  end of j-worker-0.log", "last lines of /s/j-worker-1.log:",
         "  end of j-worker-1.log", "failed containers (2):",
         "  j-worker-0 (container mxnet): exit code 1 at T1  /s/j-worker-0.log",
         "  j-worker-1 (container mxnet): exit code 137 at T2  /s/j-worker-1.log"],
        "Failed: activeDeadlineSeconds passed"),
    "no-failed-container-shows-the-fallback-log": (
        [], "Failed: j-scheduler-0 evicted", FALLBACK,
        ["last lines of /s/j-scheduler-0.log:", "  end of j-scheduler-0.log"], "Failed: j-scheduler-0 evicted"),
    "nothing-to-show": ([], "Failed: backoffLimit", None, [], "Failed: backoffLimit"),
    # A pod name inside another's (j-worker-1 in j-worker-10) is not a mention.
    "a-longer-name-is-not-a-mention": (
        [W1], "Failed: j-worker-10 exited", None,
        ["last lines of /s/j-worker-1.log:", "  end of j-worker-1.log", "failed containers (1):",
         "  j-worker-1 (container mxnet): exit code 137 at T2  /s/j-worker-1.log"],
        "Failed: j-worker-10 exited"),
}


@pytest.mark.parametrize(("failures", "message", "fallback", "lines", "closing"), REPORTS.values(), ids=REPORTS.keys())
def test_the_failure_report(failures, message, fallback, lines, closing):
    assert failure_report(failures, message, fallback, tail_of) == (lines, closing)


def test_the_report_shows_at_most_four_logs_but_lists_every_failed_container():
    failures = [FailedContainer(f"j-worker-{i}", "mxnet", 1, f"T{i}", Path(f"/s/j-worker-{i}.log")) for i in range(6)]
    lines, _ = failure_report(failures, "Failed: backoffLimit", None, tail_of)
    assert sum(line.startswith("last lines of") for line in lines) == 4
    assert "failed containers (6):" in lines and lines[-1].startswith("  j-worker-5 ")


RESULTS = {
    "mxnet-digits": (["[worker 0] epoch 9 validation-accuracy=0.91", "[worker 0] final validation-accuracy=0.9722",
                      exited(0, "T")], "[worker 0] final validation-accuracy=0.9722"),
    "chainer-digits": (["final test accuracy 0.9533 over 2 ranks (4 epochs)"], "final test accuracy 0.9533 over 2 ranks (4 epochs)"),
    "the-last-of-several": (["final loss=0.9", "final loss=0.2"], "final loss=0.2"),
    "no-final-line": (["epoch 1 accuracy=0.5", "done"], None),
    "final-without-a-metric": (["final barrier reached"], None),
    "the-local-clusters-own-note": (["=== localcluster: final accuracy=1"], None),
}


@pytest.mark.parametrize(("lines", "expected"), RESULTS.values(), ids=RESULTS.keys())
def test_the_result_line_of_a_log(lines, expected):
    assert result_line(lines) == expected


def test_the_results_of_a_job_are_one_line_per_pod_that_says_one(tmp_path: Path):
    (tmp_path / "j-worker-0.log").write_text(f"{START}\n[worker 0] final validation-accuracy=0.97\n{exited(0, 'T')}\n")
    (tmp_path / "j-worker-1.log").write_text(f"{START}\n[worker 1] final validation-accuracy=0.96\n")
    (tmp_path / "j-scheduler-0.log").write_text(f"{START}\nscheduler done\n")
    assert job_results(tmp_path) == ["result: j-worker-0: [worker 0] final validation-accuracy=0.97",
                                     "result: j-worker-1: [worker 1] final validation-accuracy=0.96"]


STATES = {
    "running": ({"state": {"running": {"startedAt": "T"}}}, "running since T"),
    "terminated": ({"state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}}, "terminated, exit code 137 (OOMKilled)"),
    "waiting": ({"state": {"waiting": {"reason": "CrashLoopBackOff"}}}, "waiting (CrashLoopBackOff)"),
    "no-state": ({}, "not started"),
}


@pytest.mark.parametrize(("status", "expected"), STATES.values(), ids=STATES.keys())
def test_a_containers_state_as_kubectl_describe_names_it(status, expected):
    assert container_state(status) == expected
