"""The MXJob's words, spelt once: the kind, its replica types, its condition reasons and its message subject.

Every other module of the kind uses these constants, so a rename is one edit and a typo is a NameError.
"""
from __future__ import annotations

KIND = "MXJob"

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
CREATED = f"{KIND}Created"
RUNNING = f"{KIND}Running"
RESTARTING = f"{KIND}Restarting"
STALLED = f"{KIND}Stalled"  # Running, but a restarted pod will never be re-admitted (failurePolicy RestartPod)
SUSPENDED = f"{KIND}Suspended"
RESUMED = f"{KIND}Resumed"
SUCCEEDED = f"{KIND}Succeeded"
FAILED = f"{KIND}Failed"
FAILED_VALIDATION = f"{KIND}FailedValidation"


def subject(key: str) -> str:
    """How a condition message names the job: `MXJob <namespace>/<name>`."""
    return f"{KIND} {key}"
