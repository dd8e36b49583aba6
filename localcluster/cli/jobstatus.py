"""What `localcluster run` makes of a job: one small status reader per kind, and the run's outcome as
a function of a snapshot of the job and the time.

As kubectl's `StatusViewerFor(kind)`, a table maps each kind to its reader and a kind without one is
an error (never read as some other kind). A reader reads the condition types and reasons the kind's
hooks write; it does not guess from their spelling. Nothing here reads a clock or the cluster.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Literal

from localcluster.types import KubeObject

# How a job stands, as `run` reports it: None while it goes on.
Ending = Literal["Succeeded", "Failed", "Invalid", "Suspended"]
# How a run ends: a job's ending, or the run's own (the timeout passed, the stand-in caught a hot loop).
RunEnd = Literal["Succeeded", "Failed", "Invalid", "Suspended", "TimedOut", "HotLoop"]

# The reasons of each kind's validation failure, as its hooks spell them (hooks/*/vocabulary.py;
# localcluster talks to the hooks over HTTP only, so tests/localcluster/test_jobstatus.py checks they agree).
MXJOB_FAILED_VALIDATION = "MXJobFailedValidation"
CHAINERJOB_FAILED_VALIDATION = "ChainerJobFailedValidation"


@dataclass(frozen=True)
class JobStatus:
    """One reading of a job's status."""

    ending: Ending | None
    # The type of the last condition: the State column the CRDs print.
    state: str | None
    reason: str = ""
    message: str = ""


StatusReader = Callable[[KubeObject], JobStatus]


class UnknownKind(ValueError):
    """No status reader for this kind: `run` cannot tell how such a job ends."""


def _conditions(job: KubeObject) -> list[dict[str, Any]]:
    conditions = (job.get("status") or {}).get("conditions") or []
    return [c for c in conditions if isinstance(c, dict)]


def _state(job: KubeObject) -> str | None:
    conditions = _conditions(job)
    return conditions[-1].get("type") if conditions else None


def _true(job: KubeObject, type_: str) -> dict[str, Any] | None:
    """The condition of this type when its status is True; None otherwise."""
    return next((c for c in _conditions(job) if c.get("type") == type_ and c.get("status") == "True"), None)


def _ended(job: KubeObject, ending: Ending, cond: dict[str, Any]) -> JobStatus:
    return JobStatus(ending, _state(job), str(cond.get("reason", "")), str(cond.get("message", "")))


def _failed(job: KubeObject, cond: dict[str, Any], validation_reason: str) -> JobStatus:
    return _ended(job, "Invalid" if cond.get("reason") == validation_reason else "Failed", cond)


def mxjob_status(job: KubeObject) -> JobStatus:
    """An MXJob writes Succeeded, Failed (MXJobFailedValidation for a refused spec) and Suspended itself."""
    if succeeded := _true(job, "Succeeded"):
        return _ended(job, "Succeeded", succeeded)
    if failed := _true(job, "Failed"):
        return _failed(job, failed, MXJOB_FAILED_VALIDATION)
    if suspended := _true(job, "Suspended"):
        return _ended(job, "Suspended", suspended)
    return JobStatus(None, _state(job))


def chainerjob_status(job: KubeObject) -> JobStatus:
    """A ChainerJob mirrors its master Job's Complete and Failed (its own ChainerJobFailedValidation for a refused spec)."""
    if complete := _true(job, "Complete"):
        return _ended(job, "Succeeded", complete)
    if failed := _true(job, "Failed"):
        return _failed(job, failed, CHAINERJOB_FAILED_VALIDATION)
    return JobStatus(None, _state(job))


STATUS_READERS: Mapping[str, StatusReader] = MappingProxyType({"MXJob": mxjob_status, "ChainerJob": chainerjob_status})


def status_reader_for(kind: str) -> StatusReader:
    """The reader of a kind's status; UnknownKind when there is none."""
    try:
        return STATUS_READERS[kind]
    except KeyError:
        raise UnknownKind(f"no status reader for kind {kind!r} (known: {', '.join(STATUS_READERS)})") from None


@dataclass(frozen=True)
class Snapshot:
    """What `run` saw of a job at one moment: the job (None once it is gone) and the stand-in's hot-loop report."""

    kind: str
    key: str  # namespace/name
    job: KubeObject | None
    hot_loop: str | None = None


@dataclass(frozen=True)
class Outcome:
    end: RunEnd
    message: str


def outcome(snapshot: Snapshot, now: float, *, deadline: float, timeout: float) -> Outcome | None:
    """How the run ends at `now` (on the clock `deadline` is on), or None while it goes on."""
    subject = f"{snapshot.kind} {snapshot.key}"
    if snapshot.hot_loop:
        return Outcome("HotLoop", f"stand-in error: {subject}: {snapshot.hot_loop}")
    status = status_reader_for(snapshot.kind)(snapshot.job or {})
    if status.ending == "Succeeded":
        return Outcome("Succeeded", f"{subject} {status.state}")
    if status.ending == "Invalid":
        return Outcome("Invalid", status.message or f"{subject} has an invalid spec")
    if status.ending == "Failed":
        return Outcome("Failed", f"{subject} Failed: {status.reason}: {status.message}")
    if status.ending == "Suspended":
        return Outcome("Suspended", f"{subject} is suspended (spec.runPolicy.suspend: true), so nothing runs; "
                                    "set it to false to run the job")
    if now >= deadline:
        return Outcome("TimedOut", f"{subject} timed out after {timeout:g}s in state {status.state or '-'}"
                                   " (pods and log errors above)")
    return None
