"""What one ChainerJob sync does, decided from the observations alone, before any child is built.

The children and the status are then built from the decision (hooks.chainerjob.sync), so nothing
is decided by reading back what was built.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from hooks.chainerjob import names
from hooks.chainerjob.spec import ChainerJob
from hooks.chainerjob.vocabulary import (
    KIND,
    WAITING_FOR_PODGROUP,
    WAITING_FOR_SERVICE_ACCOUNT,
    JobCondition,
    subject,
)
from hooks.shared.gang import new_pods_wait, podgroup_wait_message


@dataclass(frozen=True)
class Decision:
    """What this sync answers, as values."""

    outcome: JobCondition | None  # the master Job's, once it has finished
    master: bool  # the master Job is in the answer
    podgroup: bool  # the job's PodGroup is in the answer
    gang: bool  # the job is gang scheduled
    # Worker sets whose StatefulSet is not created yet because the PodGroup does not exist yet.
    held_back: frozenset[str]
    # Why the master Job or a StatefulSet is held back, for the Waiting condition.
    waiting_message: str | None
    waiting_reason: str = WAITING_FOR_PODGROUP
    queued: bool = False  # its pods form a Kueue pod group: the master is made with the workers

    @property
    def done(self) -> bool:
        """Whether the job has finished (the master Job is Complete or Failed)."""
        return self.outcome is not None


def ready_workers(job: ChainerJob, statefulsets: Mapping[str, Any]) -> dict[str, int]:
    """The ready pods of each worker set, from its observed StatefulSet (0 when there is none)."""
    return {name: _ready_replicas(statefulsets.get(names.worker_set(job.name, name))) for name in job.worker_sets}


def decide(job: ChainerJob, *, outcome: JobCondition | None, master_observed: bool, ready: Mapping[str, int],
           statefulsets: Mapping[str, Any], podgroup: Mapping[str, Any] | None,
           observed_podgroups: Mapping[str, Any], account: str | None = None, restarting: bool = False,
           suspended: bool = False, queued: bool = False) -> Decision:
    """The decision from the observations: the master Job's outcome, whether the master Job exists,
    the ready workers, the observed StatefulSets and PodGroups. `podgroup` is the job's PodGroup
    when it is gang scheduled; `account` a ServiceAccount new pods would use that is not observed
    yet (the API server refuses a pod whose account does not exist: docs/progress.md). `restarting`:
    a whole-job restart is under way (hooks.chainerjob.restarts): what exists is kept, nothing new made.
    `suspended`: spec.runPolicy.suspend, on a job that has not finished: nothing new is made (what
    the attempt made goes with the attempt, hooks.chainerjob.restarts). `queued`: its pods form a
    Kueue pod group, which Kueue admits only once every pod of it exists."""
    # Only while the job runs: a finished job's PodGroup would keep its queue's share, and a
    # suspended job has no pods to group.
    wants_podgroup = podgroup is not None and outcome is None and not suspended
    # Under a gang, what makes pods (the master Job, the StatefulSets) is created only once the
    # PodGroup exists (hooks.shared.gang.new_pods_wait); what exists is kept.
    gated = (new_pods_wait(podgroup if wants_podgroup else None, observed_podgroups) or account is not None
             or restarting or suspended)
    workers_ready = all(ready[name] >= ws.replicas for name, ws in job.worker_sets.items())
    # Once it exists the master is kept (OnDelete, so never changed); it is first created only
    # when every worker can be reached, and never again after the job has finished.
    # Under a gang the master is created at once: waiting for ready workers would deadlock (the
    # gang waits for the master's pod); its rsh agent waits for each worker instead.
    # So does a Kueue pod group: Kueue holds every pod at its gate until all of the group exist.
    master = master_observed or (outcome is None and not gated
                                 and (workers_ready or podgroup is not None or queued))
    held_back = frozenset(name for name in job.worker_sets
                          if gated and names.worker_set(job.name, name) not in statefulsets)
    waiting, reason = None, WAITING_FOR_PODGROUP
    if suspended:
        pass  # the Suspended condition says it all
    elif podgroup is not None and gated and not restarting and (not master_observed or held_back) and account is None:
        waiting = podgroup_wait_message(KIND, job.key, podgroup, "its master Job and worker StatefulSets")
    elif account is not None and (not master_observed or held_back):
        waiting, reason = (f"{subject(job.key)} is created; its pods wait for their ServiceAccount {account}.",
                           WAITING_FOR_SERVICE_ACCOUNT)
    return Decision(outcome=outcome, master=master, podgroup=wants_podgroup, gang=podgroup is not None,
                    held_back=held_back, waiting_message=waiting, waiting_reason=reason, queued=queued)


def _ready_replicas(statefulset: Mapping[str, Any] | None) -> int:
    if statefulset is None:
        return 0
    ready = (statefulset.get("status") or {}).get("readyReplicas") or 0
    return ready if isinstance(ready, int) else 0
