"""What the core reads from observed pods: a small, flat view of each pod of the job."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeGuard

from hooks.mxjob.names import JOB_ATTEMPT_LABEL, RESTART_ATTEMPT_LABEL, child_name
from hooks.mxjob.spec import MAIN_CONTAINER, MXJob


@dataclass(frozen=True)
class PodView:
    """The facts of one observed pod that decide the job's lifecycle."""

    name: str
    rtype: str
    index: int
    uid: str
    phase: str
    terminating: bool
    exit_code: int | None
    restarts: int
    last_exit_code: int | None = None  # of the mxnet container's previous run (lastState), if it restarted
    attempt: int = 0  # how many times the operator had recreated this pod's slot when it created it
    finished_at: str | None = None  # when the mxnet container terminated (state.terminated.finishedAt)
    job_attempt: int = 0  # the job attempt the pod was created for (its job-attempt label)
    reason: str | None = None  # why it ended: the pod's reason (Evicted, ...) or the container's (OOMKilled, Error)
    message: str | None = None  # the first line of the termination message (or the pod's message), bounded
    last_reason: str | None = None  # the container's previous run's reason and message, after an in-place restart
    last_message: str | None = None

    @property
    def active(self) -> bool:
        """Running and not on its way out."""
        return self.phase == "Running" and not self.terminating

    @property
    def finished(self) -> bool:
        """Succeeded or Failed."""
        return self.phase in ("Succeeded", "Failed")


@dataclass(frozen=True)
class Slot:
    """One replica of the job: its type and index (its Pod and Service are named after both)."""

    rtype: str
    index: int


def is_live(obj: Any) -> TypeGuard[Mapping[str, Any]]:
    """An observed child that is not on its way out (deleting it again would change nothing)."""
    return isinstance(obj, Mapping) and not (obj.get("metadata") or {}).get("deletionTimestamp")


def replica_slots(job: MXJob) -> dict[str, Slot]:
    """Every child name of the job mapped to its slot, in creation order."""
    return {child_name(job.name, rtype, i): Slot(rtype, i)
            for rtype, spec in job.replicas.items() for i in range(spec.replicas)}


def view_pods(slots: Mapping[str, Slot], observed: Mapping[str, Any]) -> dict[str, PodView]:
    """Views of the observed pods that belong to a replica slot; strays are left out (deleted)."""
    views = {}
    for name, pod in observed.items():
        slot = slots.get(name)
        if slot is None or not isinstance(pod, Mapping):
            continue
        meta = pod.get("metadata") or {}
        status = pod.get("status") or {}
        main = _main_container_status(status)
        views[name] = PodView(
            name=name, rtype=slot.rtype, index=slot.index, uid=str(meta.get("uid", "")),
            phase=str(status.get("phase") or "Pending"),
            terminating=bool(meta.get("deletionTimestamp")),
            exit_code=_exit_code(main.get("state")), restarts=_int(main.get("restartCount")),
            last_exit_code=_exit_code(main.get("lastState")),
            attempt=_attempt((meta.get("labels") or {}).get(RESTART_ATTEMPT_LABEL)),
            finished_at=_finished_at(main.get("state")),
            job_attempt=_attempt((meta.get("labels") or {}).get(JOB_ATTEMPT_LABEL)),
            reason=_text(status.get("reason"), 64) or _terminated(main.get("state"), "reason", 64),
            message=_text(status.get("message"), MAX_MESSAGE) or _terminated(main.get("state"), "message", MAX_MESSAGE),
            last_reason=_terminated(main.get("lastState"), "reason", 64),
            last_message=_terminated(main.get("lastState"), "message", MAX_MESSAGE),
        )
    return views


MAX_MESSAGE = 200  # characters of a termination message a condition quotes


def _text(value: Any, limit: int) -> str | None:
    """The first non-empty line of a text, at most `limit` characters (an ellipsis says it was cut)."""
    if not isinstance(value, str):
        return None
    line = next((part.strip() for part in value.splitlines() if part.strip()), "")
    if not line:
        return None
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _terminated(state: Any, key: str, limit: int) -> str | None:
    terminated = state.get("terminated") if isinstance(state, Mapping) else None
    return _text(terminated.get(key), limit) if isinstance(terminated, Mapping) else None


def _main_container_status(status: Mapping[str, Any]) -> Mapping[str, Any]:
    for cs in status.get("containerStatuses") or []:
        if isinstance(cs, Mapping) and cs.get("name") == MAIN_CONTAINER:
            return cs
    return {}


def _exit_code(state: Any) -> int | None:
    terminated = state.get("terminated") if isinstance(state, Mapping) else None
    code = terminated.get("exitCode") if isinstance(terminated, Mapping) else None
    return code if isinstance(code, int) else None


def _finished_at(state: Any) -> str | None:
    terminated = state.get("terminated") if isinstance(state, Mapping) else None
    value = terminated.get("finishedAt") if isinstance(terminated, Mapping) else None
    return value if isinstance(value, str) else None


def _attempt(value: Any) -> int:
    """The restart-attempt label as written (a decimal counter); anything else reads as 0."""
    if isinstance(value, str) and value.isdigit() and len(value) <= 9:
        return int(value)
    return 0


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0
