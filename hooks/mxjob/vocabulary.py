"""The MXJob's words, spelt once: the kind, its replica types, its condition reasons and its message subject.

Every other module of the kind uses these constants, so a rename is one edit and a typo is a NameError.
"""
from __future__ import annotations

from typing import Literal, get_args

KIND = "MXJob"

# The condition types, highest first: the first of these that is True is the job's state (the
# State column of `kubectl get mxj`).
ConditionType = Literal["Succeeded", "Failed", "Suspended", "Restarting", "Running", "Created"]
STATE_ORDER: tuple[ConditionType, ...] = get_args(ConditionType)
Outcome = Literal["Succeeded", "Failed"]
TERMINAL: tuple[Outcome, ...] = get_args(Outcome)

SCHEDULER = "Scheduler"
SERVER = "Server"
WORKER = "Worker"
TUNER_TRACKER = "TunerTracker"
TUNER_SERVER = "TunerServer"
TUNER = "Tuner"
TRAIN_TYPES = (SCHEDULER, SERVER, WORKER)
TUNE_TYPES = (TUNER_TRACKER, TUNER_SERVER, TUNER)
REPLICA_TYPES = (*TRAIN_TYPES, *TUNE_TYPES)

# Condition reasons: the kind's name and an event, as the Kubeflow training operator spells them.
Reason = Literal["MXJobCreated", "MXJobRunning", "MXJobRestarting", "MXJobStalled", "MXJobSuspended",
                 "MXJobResumed", "MXJobSucceeded", "MXJobFailed", "MXJobFailedValidation"]
CREATED: Reason = "MXJobCreated"
RUNNING: Reason = "MXJobRunning"
RESTARTING: Reason = "MXJobRestarting"
STALLED: Reason = "MXJobStalled"  # Running, but a restarted pod will never be re-admitted (failurePolicy RestartPod)
SUSPENDED: Reason = "MXJobSuspended"
RESUMED: Reason = "MXJobResumed"
SUCCEEDED: Reason = "MXJobSucceeded"
FAILED: Reason = "MXJobFailed"
FAILED_VALIDATION: Reason = "MXJobFailedValidation"


def subject(key: str) -> str:
    """How a condition message names the job: `MXJob <namespace>/<name>`."""
    return f"{KIND} {key}"
