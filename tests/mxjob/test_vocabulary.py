"""MXJob's closed sets are Literal types: a misspelt condition type, policy or phase is a type error.

Each case is checked by mypy --strict on a small program, as `make lint` checks hooks/: the same
program with the right spelling type-checks, so the error is the misspelling's, nothing else's.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest
from mypy import api

ROOT = Path(__file__).resolve().parents[2]

PROGRAM = '''
from datetime import UTC, datetime
from hooks.mxjob.observed import PodView
from hooks.mxjob.spec import MXJob
from hooks.mxjob.vocabulary import RESTARTING, STATE_ORDER
from hooks.shared.conditions import Conditions

def check(job: MXJob, pod: PodView) -> bool:
    conds = Conditions([], datetime.now(UTC), state_order=STATE_ORDER)
    conds.set({condition!r}, True, RESTARTING, "a message")
    return (job.run_policy.clean_pod_policy == {clean!r}
            or job.replicas["Worker"].restart_policy == {restart!r}
            or pod.phase == {phase!r})
'''
RIGHT = {"condition": "Restarting", "clean": "None", "restart": "ExitCode", "phase": "Failed"}
WRONG = {"condition": "Restaring", "clean": "Nothing", "restart": "Exitcode", "phase": "Faild"}


@pytest.fixture(autouse=True)
def _in_the_repository(monkeypatch):
    monkeypatch.chdir(ROOT)  # where mypy finds the hooks package


def mypy_errors(program: str) -> list[str]:
    # No config file: the project's names the packages to check, and only the program is wanted.
    stdout, stderr, _ = api.run(["--config-file=", "--strict", "--no-incremental", "--cache-dir=/dev/null",
                                 "-c", program])
    assert not stderr
    return [line for line in stdout.splitlines() if ": error: " in line]


def test_the_right_spellings_type_check():
    assert mypy_errors(PROGRAM.format(**RIGHT)) == []


@pytest.mark.parametrize("field", sorted(WRONG))
def test_a_misspelt_value_is_a_type_error(field):
    errors = mypy_errors(PROGRAM.format(**{**RIGHT, field: WRONG[field]}))
    assert len(errors) == 1
    assert re.search(rf"Literal\['{WRONG[field]}'\]", errors[0])
