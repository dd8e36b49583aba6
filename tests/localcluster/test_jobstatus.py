"""How `localcluster run` reads a job's status and decides how the run ends: one reader per kind, the
outcome as a function of a snapshot and the time, each as a table."""

from __future__ import annotations

import pytest

from hooks.chainerjob import vocabulary as chainerjob_vocabulary
from hooks.mxjob import vocabulary as mxjob_vocabulary
from localcluster.cli import jobstatus
from localcluster.cli.jobstatus import JobStatus, Outcome, Snapshot, UnknownKind, outcome, status_reader_for


def job(kind: str, *conditions: tuple[str, str, str], message: str = "why") -> dict:
    """A job of `kind` whose status holds these (type, status, reason) conditions, in order."""
    return {"kind": kind, "metadata": {"name": "j"},
            "status": {"conditions": [{"type": t, "status": s, "reason": r, "message": message} for t, s, r in conditions]}}


def test_the_validation_reasons_are_the_ones_the_hooks_write():
    assert jobstatus.MXJOB_FAILED_VALIDATION == mxjob_vocabulary.FAILED_VALIDATION
    assert jobstatus.CHAINERJOB_FAILED_VALIDATION == chainerjob_vocabulary.FAILED_VALIDATION


MXJOB_READINGS = {
    "no-status-yet": ((), JobStatus(None, None)),
    "running": ((("Created", "True", "MXJobCreated"), ("Running", "True", "MXJobRunning")), JobStatus(None, "Running")),
    "succeeded": ((("Running", "False", "MXJobRunning"), ("Succeeded", "True", "MXJobSucceeded")),
                  JobStatus("Succeeded", "Succeeded", "MXJobSucceeded", "why")),
    "failed": ((("Failed", "True", "MXJobFailed"),), JobStatus("Failed", "Failed", "MXJobFailed", "why")),
    "refused-spec": ((("Failed", "True", "MXJobFailedValidation"),),
                     JobStatus("Invalid", "Failed", "MXJobFailedValidation", "why")),
    # A reason that merely ends like the validation one is a failure, not a refused spec.
    "other-validation-like-reason": ((("Failed", "True", "SomeOtherFailedValidation"),),
                                     JobStatus("Failed", "Failed", "SomeOtherFailedValidation", "why")),
    "failed-condition-false": ((("Failed", "False", "MXJobFailed"), ("Running", "True", "MXJobRunning")),
                               JobStatus(None, "Running")),
    "suspended": ((("Suspended", "True", "MXJobSuspended"),), JobStatus("Suspended", "Suspended", "MXJobSuspended", "why")),
    "resumed": ((("Suspended", "False", "MXJobResumed"), ("Running", "True", "MXJobRunning")), JobStatus(None, "Running")),
    "restarting": ((("Restarting", "True", "MXJobRestarting"),), JobStatus(None, "Restarting")),
}


@pytest.mark.parametrize(("conditions", "expected"), MXJOB_READINGS.values(), ids=MXJOB_READINGS.keys())
def test_an_mxjob_is_read_from_its_own_conditions(conditions, expected):
    assert status_reader_for("MXJob")(job("MXJob", *conditions)) == expected


CHAINERJOB_READINGS = {
    "waiting": ((("Created", "True", "ChainerJobCreated"), ("Waiting", "True", "WaitingForWorkers")), JobStatus(None, "Waiting")),
    "complete": ((("Running", "False", "ChainerJobRunning"), ("Complete", "True", "ChainerJobSucceeded")),
                 JobStatus("Succeeded", "Complete", "ChainerJobSucceeded", "why")),
    "master-failed": ((("Failed", "True", "ChainerJobFailed"),), JobStatus("Failed", "Failed", "ChainerJobFailed", "why")),
    "refused-spec": ((("Failed", "True", "ChainerJobFailedValidation"),),
                     JobStatus("Invalid", "Failed", "ChainerJobFailedValidation", "why")),
    # An MXJob's reason on a ChainerJob is not its validation failure.
    "mxjob-reason": ((("Failed", "True", "MXJobFailedValidation"),),
                     JobStatus("Failed", "Failed", "MXJobFailedValidation", "why")),
    # A ChainerJob has no Suspended condition of its own; an MXJob's Succeeded is not its Complete.
    "foreign-conditions": ((("Suspended", "True", "X"), ("Succeeded", "True", "Y")), JobStatus(None, "Succeeded")),
}


@pytest.mark.parametrize(("conditions", "expected"), CHAINERJOB_READINGS.values(), ids=CHAINERJOB_READINGS.keys())
def test_a_chainerjob_is_read_from_its_master_jobs_conditions(conditions, expected):
    assert status_reader_for("ChainerJob")(job("ChainerJob", *conditions)) == expected


@pytest.mark.parametrize("kind", ["TFJob", "", "mxjob"])
def test_a_kind_without_a_reader_is_an_error_not_read_as_an_mxjob(kind):
    with pytest.raises(UnknownKind, match="no status reader"):
        status_reader_for(kind)


RUNNING = job("MXJob", ("Running", "True", "MXJobRunning"))
OUTCOMES = {
    "running-before-the-deadline": (Snapshot("MXJob", "ns/j", RUNNING), 99.0, None),
    "running-at-the-deadline": (Snapshot("MXJob", "ns/j", RUNNING), 100.0,
                                Outcome("TimedOut", "MXJob ns/j timed out after 60s in state Running (pods and log errors above)")),
    "job-gone-at-the-deadline": (Snapshot("MXJob", "ns/j", None), 100.0,
                                 Outcome("TimedOut", "MXJob ns/j timed out after 60s in state - (pods and log errors above)")),
    "succeeded-after-the-deadline": (Snapshot("MXJob", "ns/j", job("MXJob", ("Succeeded", "True", "MXJobSucceeded"))), 500.0,
                                     Outcome("Succeeded", "MXJob ns/j Succeeded")),
    "chainerjob-complete": (Snapshot("ChainerJob", "ns/c", job("ChainerJob", ("Complete", "True", "ChainerJobSucceeded"))), 0.0,
                            Outcome("Succeeded", "ChainerJob ns/c Complete")),
    "failed": (Snapshot("MXJob", "ns/j", job("MXJob", ("Failed", "True", "MXJobFailed"), message="worker-0 exited 1")), 0.0,
               Outcome("Failed", "MXJob ns/j Failed: MXJobFailed: worker-0 exited 1")),
    "refused-spec-says-the-hooks-message": (
        Snapshot("MXJob", "ns/j", job("MXJob", ("Failed", "True", "MXJobFailedValidation"), message="spec.x: bad")), 0.0,
        Outcome("Invalid", "spec.x: bad")),
    "refused-spec-without-a-message": (
        Snapshot("ChainerJob", "ns/c", job("ChainerJob", ("Failed", "True", "ChainerJobFailedValidation"), message="")), 0.0,
        Outcome("Invalid", "ChainerJob ns/c has an invalid spec")),
    "suspended": (Snapshot("MXJob", "ns/j", job("MXJob", ("Suspended", "True", "MXJobSuspended"))), 0.0,
                  Outcome("Suspended", "MXJob ns/j is suspended (spec.runPolicy.suspend: true), so nothing runs; "
                                       "set it to false to run the job")),
    "hot-loop-before-anything": (Snapshot("MXJob", "ns/j", job("MXJob", ("Succeeded", "True", "MXJobSucceeded")),
                                          hot_loop="status changes on every sync"), 0.0,
                                 Outcome("HotLoop", "stand-in error: MXJob ns/j: status changes on every sync")),
}


@pytest.mark.parametrize(("snapshot", "now", "expected"), OUTCOMES.values(), ids=OUTCOMES.keys())
def test_the_run_ends_as_the_snapshot_and_the_time_say(snapshot, now, expected):
    assert outcome(snapshot, now, deadline=100.0, timeout=60) == expected


def test_the_outcome_of_an_unknown_kind_is_an_error():
    with pytest.raises(UnknownKind):
        outcome(Snapshot("TFJob", "ns/t", RUNNING), 0.0, deadline=100.0, timeout=60)
