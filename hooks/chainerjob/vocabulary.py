"""The ChainerJob's words, spelt once: the kind, its closed sets of values, its condition reasons and
its message subject.

Each closed set is a `Literal` type, so a misspelt value is a type error under `mypy --strict`; the
tuple of its values (for membership tests and messages) is derived from the type, not written twice.
"""
from __future__ import annotations

from typing import Final, Literal, get_args

KIND = "ChainerJob"
PARENT_API_VERSION = "kubeflow.org/v1alpha1"

# The master Job's conditions that end the job, as a Job controller writes them (newer Jobs also
# say SuccessCriteriaMet or FailureTarget first, which are not copied).
JobCondition = Literal["Complete", "Failed"]
# The hook's own conditions: where the job is before its master Job has finished.
OwnCondition = Literal["Created", "Waiting", "Running", "Restarting", "Suspended"]
ConditionType = Literal[JobCondition, OwnCondition]
JOB_CONDITIONS: Final[tuple[JobCondition, ...]] = get_args(JobCondition)
OWN_CONDITIONS: Final[tuple[OwnCondition, ...]] = get_args(OwnCondition)
# Highest first: the first True one is the job's state and goes last in the list (the State column).
STATE_ORDER: Final[tuple[ConditionType, ...]] = ("Complete", "Failed", "Suspended", "Restarting", "Running", "Waiting",
                                                 "Created")

Backend = Literal["mpi"]
BACKENDS: Final[tuple[Backend, ...]] = get_args(Backend)
# What a Job accepts for its pods; a StatefulSet's pods always restart in place.
MasterRestartPolicy = Literal["Never", "OnFailure"]
MASTER_RESTART_POLICIES: Final[tuple[MasterRestartPolicy, ...]] = get_args(MasterRestartPolicy)
WORKER_RESTART_POLICY: Final = "Always"

# Condition reasons of the hook's own conditions: the kind's name and an event.
CREATED = f"{KIND}Created"
RUNNING = f"{KIND}Running"
SUCCEEDED = f"{KIND}Succeeded"
FAILED = f"{KIND}Failed"
FAILED_VALIDATION = f"{KIND}FailedValidation"
# A running job whose reporters fell silent (spec.runPolicy.stallPolicy; docs/progress.md): the
# Running condition's reason while it may have stalled, and the Failed condition's under FailJob.
STALLED = f"{KIND}Stalled"
# The Restarting condition's reason while a whole-job restart for a pod taken away (preempted, evicted:
# docs/chainerjob.md, "Disruptions") is under way (STALLED for a stall), and once the new attempt runs.
RESTARTING = f"{KIND}Restarting"
RESTARTED = f"{KIND}Restarted"
# ... while a whole-job restart because Kueue stopped the job's pod group (evicted, preempted it:
# docs/ecosystem.md, "ChainerJob through Kueue") is under way; not counted against maxRestarts.
EVICTED_BY_QUEUE = f"{KIND}EvictedByQueue"
# spec.runPolicy.suspend (docs/chainerjob.md, "Suspend"): the Suspended condition's reasons, True and
# False (the job runs again, as a new attempt).
SUSPENDED = f"{KIND}Suspended"
RESUMED = f"{KIND}Resumed"
# Reasons of the Waiting condition: what the master waits for, or what ended the wait.
WAITING_FOR_PODGROUP = "WaitingForPodGroup"
WAITING_FOR_WORKERS = "WaitingForWorkers"
PODGROUP_CREATED = "PodGroupCreated"
WORKERS_READY = "WorkersReady"
WAITING_FOR_SERVICE_ACCOUNT = "WaitingForServiceAccount"
# A queued job's pods form a Kueue pod group (docs/ecosystem.md, "Kueue"): waiting for its admission, admitted.
WAITING_FOR_KUEUE = "WaitingForKueue"
KUEUE_ADMITTED = "KueueAdmitted"


def subject(key: str) -> str:
    """How a condition message names the job: `ChainerJob <namespace>/<name>`."""
    return f"{KIND} {key}"
