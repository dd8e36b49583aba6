"""Whole-job restarts of a ChainerJob: runPolicy.stallPolicy action RestartJob, and a pod taken by a
disruption (docs/chainerjob.md, "Progress and stalls" and "Disruptions").

A restart deletes the master Job and the worker StatefulSets and creates them anew as attempt n:
they and their pods carry the label ATTEMPT_LABEL, and the pods MXJOB_ATTEMPT=n, so a progress
report says which attempt it is of. It is remembered as an MXJob's whole-job restart is
(hooks.shared.memory): the record `<job>-attempt-<n>`, a child created once and never changed.
- The sync that decides a restart answers the record and keeps every child as it is.
- A sync that observes the record leaves out (so deletes) the master Job and StatefulSets of
  earlier attempts; the new attempt's are created once none of those is observed.
- The attempt is the highest of the observed records and the children's labels, never the
  status's. So a stale parent can neither count a restart twice nor bring an earlier attempt
  back, and stale children only show objects of an earlier attempt, which are left out again.
- A restart the status shows whose record is not observed yet (stale children, or a create that
  failed) is answered again, not decided again: one stall (or one loss) is one restart.

Why a restart began is its cause, as the conditions say it: `it stalled: <clause>` (the record keeps
the clause under `stalled`), `pod P was lost (<how it ended>)` (under `lost`, every pod lost in the
sync that decided it: hooks.chainerjob.related.lost_pods) or `Kueue evicted it (<reason>: '<message>')`
(under `queueEviction`, Kueue's reason and message: hooks.chainerjob.related.queue_evicted).

A restart because Kueue stopped the job's pod group is not counted against runPolicy.maxRestarts,
as an MXJob's is not counted against its budgets: the rule is hooks.shared.kueue's, for both kinds.

Suspending a job (spec.runPolicy.suspend) that has launched is the same move without the create:
its record says `suspended`, the attempt's master Job and StatefulSets go, and the next attempt's
are created when the job is resumed. So a stale read of the StatefulSets deleted at suspension
(still ready) can never start the resumed job's master: they belong to the earlier attempt. Such
attempts are not counted against runPolicy.maxRestarts.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple

from hooks.chainerjob import names
from hooks.chainerjob.vocabulary import EVICTED_BY_QUEUE, FAILED, RESTARTING, STALLED, SUSPENDED, subject
from hooks.shared.conditions import rfc3339
from hooks.shared.k8s import JSON
from hooks.shared.kueue import (
    QUEUE_EVICTION,
    counts_against_restarts,
    eviction_cause,
    eviction_from_cause,
    queue_eviction_of,
)
from hooks.shared.memory import (
    Record,
    attempt_record_name,
    attempt_records,
    observed_record_as_desired,
    record_config_map,
)
from hooks.shared.status import OldStatus, parse_time


@dataclass(frozen=True)
class Attempts:
    """What the children (and, for a restart not yet recorded, the old status) say of restarts."""

    known: int  # the attempt the children show: the highest record or label
    records: Mapping[int, Record]  # the observed `<job>-attempt-<n>` records, by n
    leaving: bool  # a master Job or worker StatefulSet of an earlier attempt is still observed
    pending: int  # the attempt the old status says a restart (or a suspension) began (0: none beyond `known`)
    pending_cause: str  # why, as the old status's Restarting condition said it (restarting_message)
    pending_reason: str = STALLED  # that condition's reason: STALLED, RESTARTING or EVICTED_BY_QUEUE
    pending_suspension: bool = False  # the pending attempt began with a suspension, not a restart

    @property
    def suspensions(self) -> int:
        """The attempts a suspension began (their records say so): not counted against maxRestarts."""
        return sum(1 for record in self.records.values() if SUSPENDED_KEY in record.data)

    @property
    def evictions(self) -> int:
        """The attempts a queue eviction began (their records say so): not counted against maxRestarts."""
        return sum(1 for record in self.records.values() if not counts_against_restarts(record.data))

    @property
    def counted(self) -> int:
        """The whole-job restarts stalls and losses caused, counted against runPolicy.maxRestarts."""
        return self.known - self.suspensions - self.evictions

    def began(self) -> datetime | None:
        """When the known attempt's restart was decided, as its record keeps it (None: attempt 0)."""
        record = self.records.get(self.known)
        return parse_time(record.data.get("time")) if record is not None else None


def attempt_of(child: Mapping[str, Any]) -> int:
    """The attempt a master Job or StatefulSet belongs to, from its label (unlabelled: 0)."""
    meta = child.get("metadata")
    return names.attempt_in(meta.get("labels") if isinstance(meta, Mapping) else None)


def read_attempts(job_name: str, config_maps: Mapping[str, Any], jobs: Mapping[str, Any],
                  statefulsets: Mapping[str, Any], old: OldStatus) -> Attempts:
    """The job's attempts from its observed children and, for a restart not recorded yet, its old status."""
    records = attempt_records(config_maps, job_name)
    launched = [*jobs.values(), *statefulsets.values()]
    known = max([0, *records, *(attempt_of(c) for c in launched)])
    leaving = any(attempt_of(c) < known for c in launched)
    shown = old.counter("attempt") or 0
    said = {c.get("type"): c for c in old.conditions()}
    restarting, suspended = said.get("Restarting"), said.get("Suspended")
    if (shown > known and restarting is not None and restarting.get("status") == "True"
            and restarting.get("reason") in (STALLED, RESTARTING, EVICTED_BY_QUEUE)):
        message = restarting.get("message")
        return Attempts(known=known, records=records, leaving=leaving, pending=shown,
                        pending_cause=_cause_of(message if isinstance(message, str) else "", shown),
                        pending_reason=str(restarting["reason"]))
    if (shown > known and suspended is not None and suspended.get("status") == "True"
            and suspended.get("reason") == SUSPENDED):
        return Attempts(known=known, records=records, leaving=leaving, pending=shown, pending_cause="",
                        pending_suspension=True)
    return Attempts(known=known, records=records, leaving=leaving, pending=0, pending_cause="")


def launched(attempts: Attempts, jobs: Mapping[str, Any], statefulsets: Mapping[str, Any]) -> bool:
    """Whether the known attempt has a master Job or a StatefulSet observed: a suspension then ends it."""
    return any(attempt_of(c) == attempts.known for c in [*jobs.values(), *statefulsets.values()])


def current(children: Mapping[str, Any], attempt: int) -> dict[str, Any]:
    """The observed children of one attempt (those of earlier ones are left out, so deleted)."""
    return {name: obj for name, obj in children.items() if attempt_of(obj) == attempt}


@dataclass(frozen=True)
class Restart:
    """The whole-job restart the job is in (or has come through): its attempt and why."""

    attempt: int
    cause: str  # why, as the conditions say it: `it stalled: ...` or `pod P was lost (...)`
    recorded_at: datetime | None  # when it was decided, from its record (None: not observed yet)
    new_record: JSON | None  # the record to answer (decided now, or answered again)
    reason: str = STALLED  # the Restarting condition's reason: STALLED, RESTARTING (a lost pod), EVICTED_BY_QUEUE
    suspended: bool = False  # the attempt began with a suspension (runPolicy.suspend), not a restart
    counted: int = 0  # the restarts stalls and losses caused so far, this one included (Attempts.counted)


@dataclass(frozen=True)
class Cause:
    """Why a new attempt is decided now: a stall (its clause), pods taken away (`pod P was lost (...)`),
    Kueue stopping the job's pod group (its reason and message: hooks.shared.kueue.eviction_record),
    or a suspension."""

    stalled: str | None = None
    lost: str | None = None
    suspended: bool = False
    evicted: Mapping[str, str] | None = None

    def record(self) -> dict[str, Any]:
        if self.suspended:
            return {SUSPENDED_KEY: SUSPEND_FIELD}
        if self.evicted is not None:
            return {QUEUE_EVICTION: dict(self.evicted)}
        return {"stalled": self.stalled} if self.stalled is not None else {"lost": self.lost or ""}


# An attempt record's key when a suspension began it, and its value: the field that did.
SUSPENDED_KEY = "suspended"
SUSPEND_FIELD = "spec.runPolicy.suspend"


STALLED_CAUSE = "it stalled: "


def restart_of(attempts: Attempts, *, decided: Cause | None, job_name: str, namespace: str,
               labels: Mapping[str, str], now: datetime) -> Restart | None:
    """The restart this sync shows: the one decided now, else one the old status shows that is not
    recorded yet, else the known attempt's; None at attempt 0."""
    if decided is not None:
        return _new(attempts, attempts.known + 1, decided, job_name, namespace, labels, now)
    if attempts.pending:
        cause = attempts.pending_cause
        pending = (Cause(suspended=True) if attempts.pending_suspension
                   else Cause(evicted=eviction_from_cause(cause)) if attempts.pending_reason == EVICTED_BY_QUEUE
                   else Cause(lost=cause) if attempts.pending_reason == RESTARTING
                   else Cause(stalled=cause.removeprefix(STALLED_CAUSE)))
        return _new(attempts, attempts.pending, pending, job_name, namespace, labels, now)
    if not attempts.known:
        return None
    record = attempts.records.get(attempts.known)
    data = record.data if record is not None else {}
    stalled, lost = data.get("stalled"), data.get("lost")
    if SUSPENDED_KEY in data:
        return Restart(attempts.known, "", attempts.began(), None, suspended=True, counted=attempts.counted)
    if (queue := queue_eviction_of(data)) is not None:
        return Restart(attempts.known, eviction_cause(queue), attempts.began(), None, EVICTED_BY_QUEUE,
                       counted=attempts.counted)
    if isinstance(lost, str) and not isinstance(stalled, str):
        return Restart(attempts.known, lost, attempts.began(), None, RESTARTING, counted=attempts.counted)
    return Restart(attempts.known, STALLED_CAUSE + (stalled if isinstance(stalled, str) else ""), attempts.began(),
                   None, counted=attempts.counted)


class AfterLoss(NamedTuple):
    """What pods lost now do: restart the job (the cause), or fail it past maxRestarts (its Failed condition)."""

    restart: Cause | None = None
    failed: JSON | None = None


def after_loss(key: str, lost: str, *, attempt: int, max_restarts: int, now: datetime,
               evicted: Mapping[str, str] | None = None) -> AfterLoss:
    """Pods of the running attempt taken away (`lost`: hooks.chainerjob.related.lost_pods; "" when
    none): the job restarts whole, as a new attempt, while the restarts counted so far (`attempt`:
    Attempts.counted) are fewer than runPolicy.maxRestarts; past it,
    it fails, naming them. Counted as any restart (DESIGN's rule for MXJob: a disruption counts).

    Pods Kueue stopped (`evicted`: Kueue's reason and message, hooks.chainerjob.related.queue_evicted)
    restart the job whatever the budget, uncounted (hooks.shared.kueue); Kueue stops the whole group,
    so pods disrupted in the same sync go with it and are not counted either."""
    if evicted is not None:
        return AfterLoss(restart=Cause(evicted=evicted))
    if not lost:
        return AfterLoss()
    if attempt < max_restarts:
        return AfterLoss(restart=Cause(lost=lost))
    at = rfc3339(now)
    return AfterLoss(failed={"type": "Failed", "status": "True", "reason": FAILED,
                             "message": f"{subject(key)} has reached runPolicy.maxRestarts ({max_restarts}): {lost}; "
                                        f"so its master Job is deleted and its workers scaled to 0.",
                             "lastProbeTime": at, "lastTransitionTime": at})


def _new(attempts: Attempts, attempt: int, cause: Cause, job_name: str, namespace: str, labels: Mapping[str, str],
         now: datetime) -> Restart:
    record = record_config_map(attempt_record_name(job_name, attempt), namespace, labels,
                               {**cause.record(), "time": rfc3339(now)})
    if cause.suspended:
        return Restart(attempt, "", None, record, suspended=True, counted=attempts.counted)
    if cause.evicted is not None:
        return Restart(attempt, eviction_cause(cause.evicted), None, record, EVICTED_BY_QUEUE, counted=attempts.counted)
    counted = attempts.counted + attempt - attempts.known
    if cause.stalled is not None:
        return Restart(attempt, STALLED_CAUSE + cause.stalled, None, record, counted=counted)
    return Restart(attempt, cause.lost or "", None, record, RESTARTING, counted=counted)


def kept_records(config_maps: Mapping[str, Any], job_name: str, namespace: str,
                 labels: Mapping[str, str]) -> list[JSON]:
    """Every observed attempt record, answered as it is (an answer that left one out would delete it)."""
    found = attempt_records(config_maps, job_name)
    return [observed_record_as_desired(config_maps[attempt_record_name(job_name, n)], namespace, labels)
            for n in sorted(found)]


RESTARTING_WORDS = " is restarting as attempt "
DELETED_WORDS = "; its master Job and worker StatefulSets are deleted and created again"


def restarting_message(key: str, restart: Restart, max_restarts: int) -> str:
    """The Restarting condition while the new attempt starts: the attempt, why, the budget; for a queue
    eviction, that the new attempt is queued again and that the eviction is not counted."""
    queued = (", in a new pod group that Kueue queues and admits again; an eviction by the queue is not counted "
              "against runPolicy.maxRestarts") if restart.reason == EVICTED_BY_QUEUE else ""
    return (f"{subject(key)}{RESTARTING_WORDS}{restart.attempt}: {restart.cause}{DELETED_WORDS} "
            f"with MXJOB_ATTEMPT={restart.attempt}{queued} (restarts so far: {restart.counted} of "
            f"runPolicy.maxRestarts {max_restarts}).")


def restarted_message(key: str, restart: Restart) -> str:
    """The Restarting condition, False, once the new attempt's master runs."""
    return f"{subject(key)}: attempt {restart.attempt} runs (the job was restarted after {restart.cause})."


def _cause_of(message: str, attempt: int) -> str:
    """The cause in a Restarting message this module wrote for `attempt` (restarting_message)."""
    _, found, rest = message.partition(f"{RESTARTING_WORDS}{attempt}: ")
    return rest.partition(DELETED_WORDS)[0] if found else ""
