"""What Kueue v0.17.0 writes on a pod of a group it stops: the TerminationTarget condition's reason and
message (jobframework.StopReason; for a pod group an eviction's reason is `WorkloadEvictedDueTo<the
Workload's Evicted reason>`). One table for both kinds' eviction tests."""

from __future__ import annotations

PREEMPTED = "WorkloadEvictedDueToPreempted"
PREEMPTED_MESSAGE = "Preempted to accommodate a workload (UID: 7f3c) due to prioritization in the ClusterQueue"


def kueue_stops(workload: str) -> dict[str, str]:
    """Every reason Kueue gives a stopped pod, with its message; `workload` is the `<namespace>/<name>`
    the PodsReady timeout's message names."""
    return {
        PREEMPTED: PREEMPTED_MESSAGE,
        "WorkloadEvictedDueToPodsReadyTimeout": f"Exceeded the PodsReady timeout {workload}",
        "WorkloadEvictedDueToClusterQueueStopped": "The ClusterQueue is stopped",
        "WorkloadEvictedDueToDeactivated": "The workload is deactivated",
        "WorkloadEvicted": "Evicted",
        "NotAdmitted": "Not admitted by cluster queue",
        "WorkloadDeleted": "Workload is deleted",
        "NoMatchingWorkload": "No matching Workload; restoring pod templates according to existent Workload",
    }
