"""ChainerJob child names, host names and labels: computed here and nowhere else.

The names and label keys are the original operator's, so `kubectl get all -l
chainerjob.kubeflow.org/name=<job>` and scripts written for it keep working. Plain values in (the
job's name, a worker set's name), so the spec validates names through these functions and imports
this module without a cycle.
"""
from __future__ import annotations

from collections.abc import Mapping

NAME_LABEL = "chainerjob.kubeflow.org/name"
ROLE_LABEL = "chainerjob.kubeflow.org/role"
WORKER_SET_LABEL = "chainerjob.kubeflow.org/workersetname"
# The whole-job restart (runPolicy.stallPolicy RestartJob) a master Job or worker StatefulSet, and
# their pods, belong to; only from the first restart on (attempt 0 is unlabelled, as before).
ATTEMPT_LABEL = "chainerjob.kubeflow.org/attempt"
ATTEMPT_ENV = "MXJOB_ATTEMPT"  # what the progress helper reads (the same name as an MXJob's pods')
# Times kept in children (hooks.shared.memory.stamp), read back by every later sync: when the job was
# first answered (on each child the hook owns but records), and when its master Job was (on that Job).
CREATED_ANNOTATION = "chainerjob.kubeflow.org/created"
MASTER_STARTED_ANNOTATION = "chainerjob.kubeflow.org/master-started"
# On the master Job and StatefulSets of an attempt a resume began: when the job was resumed.
RESUMED_ANNOTATION = "chainerjob.kubeflow.org/resumed"

ASSETS_DIR = "/kubeflow/chainer-operator/assets"
KUBECTL_DIR = "/kubeflow/chainer-operator/kube"
# What the operator adds to the pods of a distributed job; a template must not use these names.
KUBECTL_VOLUME = "chainer-operator-volume-kubectl"
ASSETS_VOLUME = "chainer-operator-volume-assets"
KUBECTL_INIT_CONTAINER = "kubectl-delivery"
AGENT_KEY = "kubexeb.sh"  # sic: the original's key, which images and docs refer to
# The master's main container runs its command through this (hooks.chainerjob.launch, launcher_script).
LAUNCHER_KEY = "launcher.sh"
# Set by the launcher for the agents mpiexec starts: where each agent records a worker's daemon.
AGENT_RECORDS_ENV = "CHAINERJOB_AGENT_RECORDS"
HOSTFILE_KEY = "hostfile"


def attempt_in(labels: object) -> int:
    """The attempt an object's labels say it belongs to (ATTEMPT_LABEL; absent or not a count: 0)."""
    value = labels.get(ATTEMPT_LABEL) if isinstance(labels, Mapping) else None
    return int(value) if isinstance(value, str) and value.isdigit() and len(value) <= 9 else 0


def service_account(job_name: str) -> str:
    """The master pod's ServiceAccount, the one allowed to exec into the workers."""
    return f"{job_name}-launcher"


def role(job_name: str) -> str:
    return f"{job_name}-launcher-role"


def role_binding(job_name: str) -> str:
    return f"{job_name}-launcher-rolebinding"


def assets(job_name: str) -> str:
    """The ConfigMap holding the rsh agent and the hostfile."""
    return f"{job_name}-assets"


def master(job_name: str) -> str:
    """The master Job's name, which is also the master pod's host name."""
    return f"{job_name}-master"


def worker_set(job_name: str, ws_name: str) -> str:
    """A worker set's StatefulSet and its governing headless Service."""
    return f"{job_name}-workerset-{ws_name}"


def worker_pod(job_name: str, ws_name: str, ordinal: int) -> str:
    """A worker pod's name, which the StatefulSet controller also makes its host name."""
    return f"{worker_set(job_name, ws_name)}-{ordinal}"


def worker_pods(job_name: str, replicas: Mapping[str, int]) -> list[str]:
    """Every worker pod of these worker sets (name -> replicas), in their order, ordinals in order."""
    return [worker_pod(job_name, ws_name, i) for ws_name, count in replicas.items() for i in range(count)]


def common_labels(job_name: str) -> dict[str, str]:
    """Labels of the objects every pod of the job shares (ServiceAccount, Role, ConfigMap...)."""
    return {NAME_LABEL: job_name}


def master_labels(job_name: str) -> dict[str, str]:
    """Operator labels of the master Job and its pods."""
    return {NAME_LABEL: job_name, ROLE_LABEL: "master"}


def worker_labels(job_name: str, ws_name: str) -> dict[str, str]:
    """Operator labels of a worker set's pods; also the StatefulSet's and the Service's selector.

    Only operator labels: a selector with the user's template labels in it (as the original had)
    breaks for good when a user edits them, because a StatefulSet's selector is immutable.
    """
    return {NAME_LABEL: job_name, ROLE_LABEL: "workerset", WORKER_SET_LABEL: ws_name}
