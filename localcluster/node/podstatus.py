"""A Pod's status as the kubelet reports it, and its write to the store.

Owns: the phase (Pending → Running → Succeeded/Failed under the restart policy, Failed when
evicted or an init container failed under Never), the conditions the kubelet owns (Initialized,
ContainersReady, Ready) and their transition times, readiness (every app container running), the
containerStatuses and initContainerStatuses entries, the pod-level reason (Evicted), and the status
subresource write. The write keeps the conditions others own as the pod has them (the scheduler's
PodScheduled and DisruptionTarget, a readiness gate's), as a kubelet does. Which processes run is
podprocess.py's; this module only reads the ContainerRun records.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

from localcluster.node.podprocess import ContainerRun, will_restart
from localcluster.ports import LOOPBACK
from localcluster.store import ObjectStore, StoreError, now_rfc3339
from localcluster.types import ContainerState, ContainerStatus, PodStatus

EVICTED = "Evicted"
# The conditions a kubelet writes; every other type belongs to someone else and is kept as it is.
KUBELET_CONDITIONS = frozenset({"PodReadyToStartContainers", "Initialized", "ContainersReady", "Ready"})


def keep_others(current: dict[str, Any], kubelet: PodStatus | dict[str, Any]) -> dict[str, Any]:
    """The kubelet's status over the pod's current one: its own conditions, then the others' as they are."""
    mine = [dict(c) for c in kubelet.get("conditions", [])]
    others = [c for c in current.get("conditions") or [] if c.get("type") not in KUBELET_CONDITIONS]
    return {**dict(kubelet), "conditions": others + mine}


def container_status(run: ContainerRun) -> ContainerStatus:
    """The containerStatuses[] (or initContainerStatuses[]) entry of one container."""
    running = "running" in run.state
    return ContainerStatus(
        name=run.name,
        image=run.container.get("image", ""),
        ready=running and not run.init,
        started=running,
        restartCount=run.restart_count,
        state=cast(ContainerState, dict(run.state)),
        lastState=cast(ContainerState, dict(run.last_state)),
    )


def pod_phase(runs: Sequence[ContainerRun], *, policy: str, containers_started: bool, failed: bool,
              deleted: bool = False) -> str:
    """Pending until containers start; Succeeded/Failed once every container is done for good.

    `failed`: the pod failed before or around its containers (evicted, an init container under Never).
    `deleted`: its containers were stopped because the pod is deleted, whatever its restartPolicy: the
    phase is terminal, Succeeded only when every container exited 0 (a kubelet since Kubernetes 1.27;
    Kueue's finalizer and the Job controller wait for it).
    """
    if failed:
        return "Failed"
    if deleted:
        return "Succeeded" if runs and all(r.exit_code == 0 and "terminated" in r.state for r in runs) else "Failed"
    if not containers_started:
        return "Pending"
    if any(r.config_retry_at is not None for r in runs) and not any("running" in r.state for r in runs):
        return "Pending"
    if any("running" in r.state or r.restart_at is not None for r in runs):
        return "Running"
    # A container that will be restarted keeps the pod Running, even before its restart is
    # scheduled (a StartError is recorded before the restart decision).
    if policy == "Always" or any(will_restart(policy, r.exit_code) for r in runs):
        return "Running"
    if all(r.exit_code == 0 for r in runs):
        return "Succeeded"
    return "Failed"


class PodStatusReport:
    """What the kubelet remembers of a Pod's status between writes: conditions, start time, reason."""

    def __init__(self, store: ObjectStore, namespace: str, name: str, *, uid: str | None = None):
        # The uid: a Pod deleted and made anew under its name is another Pod, never written to.
        self.store, self.namespace, self.name, self.uid = store, namespace, name, uid
        self.start_time = now_rfc3339()
        self.conditions: dict[str, tuple[str, str]] = {}  # type -> (status, lastTransitionTime)
        self.reason: str | None = None
        self.message = ""

    @property
    def evicted(self) -> bool:
        return self.reason == EVICTED

    def evict(self, message: str) -> None:
        self.reason, self.message = EVICTED, message

    def condition(self, kind: str, value: str) -> None:
        """Set a condition; its lastTransitionTime moves only when its status changes."""
        if self.conditions.get(kind, ("", ""))[0] != value:
            self.conditions[kind] = (value, now_rfc3339())

    def compose(self, phase: str, runs: Sequence[ContainerRun], init_runs: Sequence[ContainerRun]) -> PodStatus:
        """The status for `phase`; sets the readiness conditions (every app container running)."""
        ready = "True" if phase == "Running" and all("running" in r.state for r in runs) else "False"
        self.condition("ContainersReady", ready)
        self.condition("Ready", ready)
        status: PodStatus = {
            "phase": phase,
            "hostIP": LOOPBACK,
            "podIP": LOOPBACK,
            "startTime": self.start_time,
            "conditions": [
                {"type": kind, "status": value, "lastTransitionTime": at} for kind, (value, at) in self.conditions.items()
            ],
            "containerStatuses": [container_status(r) for r in runs],
        }
        if init_runs:
            status["initContainerStatuses"] = [container_status(r) for r in init_runs]
        if self.reason:
            status["reason"], status["message"] = self.reason, self.message
        return status

    def write(self, status: PodStatus) -> None:
        """Write the status subresource (each write wakes the controller); a Pod that is gone is skipped."""
        try:
            self.store.update_status("v1", "Pod", self.namespace, self.name, lambda current: keep_others(current, status),
                                     uid=self.uid)
        except StoreError:
            pass  # the Pod is gone; nothing to report to
