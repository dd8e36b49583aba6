"""The progress benchmark's schedule, and its verdict on whether a run offered the planned load.

benchmarks/progress_bench.py (docs/benchmarks.md, "1,000 reporting jobs on the real control plane")
reports for many jobs at once; a run whose senders fell behind offered less load than it names, and
its output must say so rather than pass for the planned run.
"""
from __future__ import annotations

import itertools
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import progress_bench


@pytest.mark.parametrize(("jobs", "interval", "duration", "rounds"), [
    pytest.param(1000, 30.0, 60.0, 2, id="1000-jobs-two-rounds"),
    pytest.param(20, 10.0, 35.0, 3, id="a-partial-round-is-not-sent"),
    pytest.param(5, 30.0, 10.0, 1, id="shorter-than-an-interval-is-one-round"),
])
def test_every_job_reports_once_per_interval_spread_evenly(jobs, interval, duration, rounds):
    slots = progress_bench.schedule(jobs, interval, duration)
    assert [at for at, _, _ in slots] == sorted(at for at, _, _ in slots)
    steps: dict[int, list[int]] = {}
    for _, index, step in slots:
        steps.setdefault(index, []).append(step)
    assert steps == {index: list(range(1, rounds + 1)) for index in range(jobs)}  # one per round, counting up
    gaps = {round(b[0] - a[0], 9) for a, b in itertools.pairwise(slots)}
    assert gaps == {round(interval / jobs, 9)}


@pytest.mark.parametrize(("sent", "seconds", "offered"), [
    pytest.param(2000, 60.0, True, id="on-schedule"),
    pytest.param(2000, 62.0, True, id="within-5-percent"),
    pytest.param(2000, 150.0, False, id="the-last-run-13-per-s"),
    pytest.param(0, 0.0, False, id="nothing-sent"),
])
def test_a_run_offered_the_load_only_at_the_planned_rate(sent, seconds, offered):
    load = progress_bench.offered_load(1000, 30.0, sent, seconds)
    assert load["planned_per_s"] == pytest.approx(1000 / 30)
    assert load["offered"] is offered


def row(sent: int, seconds: float) -> dict:
    return {"jobs": 1000, "qps": 50.0, "interval_s": 30.0, "senders": 1, "reports_sent": sent, "reports": sent,
            "report_failures": 0, "report_phase_s": seconds, "sender_late_p99_s": 89.0, "sender_late_max_s": 90.0,
            "catch_up_s": 1.0, "create_s": 1.0, "create_to_running_s": 1.0, "create_requests": {},
            "create_client_calls": 0, "create_hook_calls": 0, "report_requests": {}, "report_client_calls": 0,
            "report_hook_calls": 0, "report_hook_p50_s": 0.0, "report_hook_p99_s": 0.0,
            "report_hooks_cpu_per_sync_s": 0.0, "errors": [],
            **progress_bench.offered_load(1000, 30.0, sent, seconds)}


def test_a_run_that_fell_behind_says_so_first_and_last():
    lines = progress_bench.summary(row(2000, 150.0)).splitlines()
    assert lines[0] == lines[-1]
    assert "DID NOT OFFER THE PLANNED LOAD" in lines[0]
    assert "13.3/s, not the planned 33.3/s" in lines[0]


def test_a_run_on_schedule_has_no_warning():
    text = progress_bench.summary(row(2000, 60.0))
    assert "NOT OFFER" not in text
    assert "33.3/s of the planned 33.3/s" in text
