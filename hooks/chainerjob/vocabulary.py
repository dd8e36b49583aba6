"""The ChainerJob's words, spelt once: the kind, its condition reasons and its message subject."""
from __future__ import annotations

KIND = "ChainerJob"
PARENT_API_VERSION = "kubeflow.org/v1alpha1"

# Condition reasons of the hook's own conditions: the kind's name and an event.
CREATED = f"{KIND}Created"
RUNNING = f"{KIND}Running"
SUCCEEDED = f"{KIND}Succeeded"
FAILED = f"{KIND}Failed"
FAILED_VALIDATION = f"{KIND}FailedValidation"


def subject(key: str) -> str:
    """How a condition message names the job: `ChainerJob <namespace>/<name>`."""
    return f"{KIND} {key}"
