"""The MXJob's words, spelt once: the kind, its replica types, its closed sets of values, its
condition reasons and its message subject.

Every other module of the kind uses these constants, so a rename is one edit and a typo is a
NameError. Each closed set (condition types, reasons, policies) is a Literal type with its values
derived from it, so a misspelt value is a type error under `mypy --strict`.
"""
from __future__ import annotations

from typing import Any, Literal, TypeVar, get_args

KIND = "MXJob"

# The condition types, highest first: the first of these that is True is the job's state (the
# State column of `kubectl get mxj`).
ConditionType = Literal["Succeeded", "Failed", "Suspended", "Restarting", "Running", "Created"]
STATE_ORDER: tuple[ConditionType, ...] = get_args(ConditionType)
Outcome = Literal["Succeeded", "Failed"]
TERMINAL: tuple[Outcome, ...] = get_args(Outcome)

# The spec's closed sets, each with its values in the order messages list them.
JobMode = Literal["MXTrain", "MXTune"]
JOB_MODES: tuple[JobMode, ...] = get_args(JobMode)
SuccessPolicy = Literal["", "AllWorkers"]
SUCCESS_POLICIES: tuple[SuccessPolicy, ...] = get_args(SuccessPolicy)
RestartPolicy = Literal["Always", "OnFailure", "Never", "ExitCode"]
RESTART_POLICIES: tuple[RestartPolicy, ...] = get_args(RestartPolicy)
CleanPodPolicy = Literal["All", "Running", "None"]
CLEAN_POD_POLICIES: tuple[CleanPodPolicy, ...] = get_args(CleanPodPolicy)
# runPolicy.failurePolicy (docs/lifecycle.md, "Restarts"): what a lost pod does to the job.
FailureAction = Literal["RestartJob", "RestartPod", "FailJob"]
FAILURE_ACTIONS: tuple[FailureAction, ...] = get_args(FailureAction)
RESTART_JOB: FailureAction = "RestartJob"
RESTART_POD: FailureAction = "RestartPod"
FAIL_JOB: FailureAction = "FailJob"

V = TypeVar("V", bound=str)


def one_of(value: Any, values: tuple[V, ...]) -> V | None:
    """`value` as the member of a closed set it equals, typed as the set; None when it is none of them."""
    return next((v for v in values if v == value), None)


def choices(values: tuple[str, ...]) -> str:
    """A closed set as a message lists it: `All, Running, None`; the empty value as `""`."""
    return ", ".join(v or '""' for v in values)


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
Reason = Literal["MXJobCreated", "MXJobRunning", "MXJobRestarting", "MXJobStalled", "MXJobEvictedByQueue",
                 "MXJobSuspended", "MXJobResumed", "MXJobSucceeded", "MXJobFailed", "MXJobFailedValidation"]
CREATED: Reason = "MXJobCreated"
RUNNING: Reason = "MXJobRunning"
RESTARTING: Reason = "MXJobRestarting"
STALLED: Reason = "MXJobStalled"  # Running, but a restarted pod will never be re-admitted (failurePolicy RestartPod)
EVICTED_BY_QUEUE: Reason = "MXJobEvictedByQueue"  # Restarting, not counted: Kueue stopped the job's pods
SUSPENDED: Reason = "MXJobSuspended"
RESUMED: Reason = "MXJobResumed"
SUCCEEDED: Reason = "MXJobSucceeded"
FAILED: Reason = "MXJobFailed"
FAILED_VALIDATION: Reason = "MXJobFailedValidation"


def subject(key: str) -> str:
    """How a condition message names the job: `MXJob <namespace>/<name>`."""
    return f"{KIND} {key}"
