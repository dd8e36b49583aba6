"""`localcluster run`'s decisions that need no cluster: its options read once from the command line,
when silence is said, and which exit code each end of a run gets; each as a table."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

import pytest

from localcluster.cli import commands as cli
from localcluster.cli.commands import RunOptions, silence_notice

PARSED = {
    "defaults": ([], {"validate": "Strict", "report_every": cli.REPORT_EVERY_SECONDS, "timeout": 600.0,
                      "silent_after": cli.SILENT_AFTER_SECONDS, "stale_reads": None}),
    "kubectl-spelling-true": (["--validate=true"], {"validate": "Strict"}),
    "kubectl-spelling-false": (["--validate=False"], {"validate": "Ignore"}),
    "warn": (["--validate", "warn"], {"validate": "Warn"}),
    "every-option": (["--timeout", "5", "--report-every", "7", "--silent-after", "9", "--client-qps", "50",
                      "--client-burst", "20", "--stale-reads", "children"],
                     {"timeout": 5.0, "report_every": 7.0, "silent_after": 9.0, "client_qps": 50.0, "client_burst": 20,
                      "stale_reads": "children"}),
}


@pytest.mark.parametrize(("argv", "expected"), PARSED.values(), ids=PARSED.keys())
def test_the_options_are_read_from_the_command_line(argv, expected):
    options = RunOptions.from_args(cli.parser().parse_args(["--state-dir", "st", "run", "job.yaml", *argv]))
    assert options.file == Path("job.yaml") and options.state_dir == Path("st").resolve()
    assert {name: getattr(options, name) for name in expected} == expected


def test_a_namespace_built_by_hand_gets_the_defaults():
    options = RunOptions.from_args(argparse.Namespace(file="j.yaml", state_dir="s", timeout=3))
    assert (options.validate, options.report_every, options.silent_after, options.client_qps, options.client_burst,
            options.stale_reads) == ("Strict", cli.REPORT_EVERY_SECONDS, cli.SILENT_AFTER_SECONDS,
                                     cli.CLIENT_QPS, cli.CLIENT_BURST, None)


def test_the_options_cannot_be_changed_once_read():
    options = RunOptions.from_args(argparse.Namespace(file="j.yaml", state_dir="s", timeout=3))
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.timeout = 9  # type: ignore[misc]


SILENCES = {
    "no-running-pod": (None, False, (False, False)),
    "no-running-pod-after-a-notice": (None, True, (False, False)),
    "talking": (5.0, False, (False, False)),
    "silent-just-long-enough": (120.0, False, (True, True)),
    "still-silent-after-the-notice": (500.0, True, (False, True)),
    "talking-again-after-the-notice": (1.0, True, (False, False)),
}


@pytest.mark.parametrize(("quiet_for", "noted", "expected"), SILENCES.values(), ids=SILENCES.keys())
def test_a_stretch_of_silence_is_said_once(quiet_for, noted, expected):
    assert silence_notice(quiet_for, 120.0, noted) == expected


EXITS = {"Succeeded": 0, "Failed": 1, "Invalid": 2, "TimedOut": 3, "HotLoop": 4, "Suspended": 5}


@pytest.mark.parametrize(("end", "code"), EXITS.items(), ids=EXITS.keys())
def test_each_end_of_a_run_has_the_exit_code_the_readme_lists(end, code):
    assert cli.END_EXIT_CODES[end] == code
