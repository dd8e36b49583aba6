"""Child names and labels: computed here and nowhere else.

Plain values in (the job's name, a replica type, an index), so the spec can validate names through
these functions without an import cycle.
"""
from __future__ import annotations

from hooks.shared.kueue import KUEUE_POD_GROUP_LABEL as KUEUE_POD_GROUP_LABEL
from hooks.shared.kueue import pod_group_name as pod_group_name

OPERATOR_NAME = "mxjob-controller"
OPERATOR_LABEL = "training.kubeflow.org/operator-name"
JOB_NAME_LABEL = "training.kubeflow.org/job-name"
REPLICA_TYPE_LABEL = "training.kubeflow.org/replica-type"
REPLICA_INDEX_LABEL = "training.kubeflow.org/replica-index"
JOB_ROLE_LABEL = "training.kubeflow.org/job-role"
LEGACY_GROUP_LABEL = "group-name"
LEGACY_GROUP = "kubeflow.org"
LEGACY_JOB_NAME_LABEL = "job-name"
# On a recreated pod: how many times the operator had recreated its slot when it created it, so
# the restart count can be read from the children when the status is stale (docs/lifecycle.md).
RESTART_ATTEMPT_LABEL = "training.kubeflow.org/restart-attempt"
# On every pod of a restarted job: the job attempt it belongs to (runPolicy.failurePolicy,
# RestartJob). Pods of an earlier attempt are deleted before the new attempt's are created.
JOB_ATTEMPT_LABEL = "training.kubeflow.org/job-attempt"
# On every pod: the replica layout it was built with (each type's count and port), so the layout
# guard can tell a started job's layout from its pods when the cluster ConfigMap is not observed.
LAYOUT_ANNOTATION = "training.kubeflow.org/replica-layout"
# On every Service: when the job's run began (status.startTime: its first sync with children, or
# its resume), so startTime can be read from the children when the status is stale (docs/lifecycle.md).
RUN_STARTED_ANNOTATION = "training.kubeflow.org/run-started"
# Kueue v0.11 and later queue an MXJob's pods as one plain-pod group (docs/ecosystem.md, "Kueue"):
# the names are the shared ones (hooks.shared.kueue), as a ChainerJob's pods use them too.
def child_name(job_name: str, rtype: str, index: int) -> str:
    """Name of the Pod and the Service of one replica: `<job>-<type>-<index>`."""
    return f"{job_name}-{rtype.lower()}-{index}"


def cluster_config_map_name(job_name: str) -> str:
    """Name of the ConfigMap holding the job's cluster map: `<job>-cluster`.

    It cannot collide with a replica's child name, which always ends in `-<index>`.
    """
    return f"{job_name}-cluster"


def selector_for(job_name: str, rtype: str, index: int) -> dict[str, str]:
    """Labels a Service selects its one pod by."""
    return {
        OPERATOR_LABEL: OPERATOR_NAME,
        JOB_NAME_LABEL: job_name,
        REPLICA_TYPE_LABEL: rtype.lower(),
        REPLICA_INDEX_LABEL: str(index),
    }


def job_selector(job_name: str) -> dict[str, str]:
    """Labels that select every pod of a job (a per-job layout's one Service selects by them)."""
    return {OPERATOR_LABEL: OPERATOR_NAME, JOB_NAME_LABEL: job_name}


def job_labels(job_name: str) -> dict[str, str]:
    """Labels of a child that belongs to the whole job (the cluster ConfigMap, the PodGroup): the pods' labels
    without the per-replica ones, so the same selectors find the job's pods and its ConfigMap."""
    return {**job_selector(job_name), LEGACY_GROUP_LABEL: LEGACY_GROUP, LEGACY_JOB_NAME_LABEL: job_name}


def labels_for(job_name: str, rtype: str, index: int, *, master: bool) -> dict[str, str]:
    """Operator labels of a pod or service: the current family and the legacy one; job-role: master
    on the pods of the type whose one pod decides the job (`MXJob.is_master`)."""
    labels = selector_for(job_name, rtype, index)
    labels.update({
        LEGACY_GROUP_LABEL: LEGACY_GROUP,
        LEGACY_JOB_NAME_LABEL: job_name,
        "replica-type": rtype.lower(),
        "replica-index": str(index),
    })
    if master:
        labels[JOB_ROLE_LABEL] = "master"
    return labels
