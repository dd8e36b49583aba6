"""The status an MXJob writes, and the outcome record that holds a finished job's status.

A finished job's status is recorded in the `<job>-outcome` child (hooks.shared.memory), because a
sync often reads a stale parent (docs/lifecycle.md, "Why the outcome is recorded in a child").
Once the record is observed it is the status, on a valid spec and on an invalid edit alike.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from typing import NamedTuple

from hooks.mxjob.replicas import frozen_from
from hooks.mxjob.restarts import read_history
from hooks.mxjob.vocabulary import FAILED, STATE_ORDER, TERMINAL, ConditionType, subject
from hooks.shared.conditions import Conditions, parse_rfc3339, rfc3339
from hooks.shared.k8s import JSON, RestartRecord
from hooks.shared.memory import Record
from hooks.shared.status import WARNINGS_FIELD, OldStatus

# The status fields an outcome record holds: the whole terminal status but what a later sync adds.
OUTCOME_FIELDS = ("conditions", "replicaStatuses", "startTime", "completionTime", "restartCount",
                  "attempt", "restartHistory")


class ReadOutcome(NamedTuple):
    """A finished job as its observed outcome record tells it."""

    recorded: OldStatus  # the record's fields; for a record that cannot be read, the last status
    conds: Conditions[ConditionType]  # always with Succeeded or Failed True
    completion_time: str


def read_outcome(record: Record, old: OldStatus, *, key: str, now: datetime) -> ReadOutcome:
    """The outcome an observed `<job>-outcome` record holds; `old` is the status the parent shows.

    Only the hook writes the record, so one that cannot be read, or holds no Succeeded or Failed
    condition, is a damaged object: the job has an outcome nobody can read. It stays finished (a
    rerun is the worse mistake): Failed, with a message naming the record.
    """
    recorded = OldStatus(record.data, condition_types=STATE_ORDER)
    conds = Conditions(recorded.conditions(), now, state_order=STATE_ORDER)
    completion = recorded.time("completionTime") or old.time("completionTime")
    if record.problem is not None or conds.terminal(TERMINAL) is None:
        why = record.problem or "it holds no Succeeded or Failed condition"
        conds = Conditions(old.conditions(), parse_rfc3339(completion) if completion else now, state_order=STATE_ORDER)
        conds.set("Failed", True, FAILED,
                  f"{subject(key)} has an outcome record that cannot be read ({why}); "
                  f"the job is treated as finished.")
        for other in ("Running", "Restarting"):
            conds.clear(other, FAILED, "The outcome record cannot be read.")
        recorded = OldStatus({**old.raw, "conditions": conds.ordered()}, condition_types=STATE_ORDER)
    return ReadOutcome(recorded, conds, completion or rfc3339(now))


def recorded_status(outcome: ReadOutcome, old: OldStatus, *, cleaned_up_time: str | None,
                    counted: Callable[[], JSON] = dict) -> JSON:
    """The status of a job whose outcome record is observed: the record, whatever the parent's
    status says (a stale read, an edited status), plus cleanedUpTime and statusWarnings.

    Every answer that sees the record writes this, on a valid spec and on an invalid edit alike,
    so a stale read gives byte for byte the status already written (docs/lifecycle.md).
    `counted` gives replicaStatuses for a record that holds none.
    """
    recorded = outcome.recorded
    return status_fields(conds=outcome.conds, replicas=frozen_from(recorded) or counted(),
                         start_time=recorded.time("startTime"), completion_time=outcome.completion_time,
                         restart_count=recorded.counter("restartCount") or 0,
                         attempt=recorded.counter("attempt") or 0, history=read_history(recorded),
                         cleaned_up_time=cleaned_up_time, old=old)


def status_fields(*, conds: Conditions[ConditionType], replicas: JSON, start_time: str | None,
                  completion_time: str | None, restart_count: int, attempt: int,
                  history: Mapping[str, RestartRecord], cleaned_up_time: str | None, old: OldStatus) -> JSON:
    """The status to write, fields in one order: the same values always give the same bytes."""
    status: JSON = {"conditions": conds.ordered(), "replicaStatuses": replicas}
    if start_time:
        status["startTime"] = start_time
    if completion_time:
        status["completionTime"] = completion_time
    if restart_count:
        status["restartCount"] = restart_count
    if attempt:
        status["attempt"] = attempt
    if history:
        # Fields in one order, however the record was read (status or a restart record).
        status["restartHistory"] = {k: {f: history[k][f] for f in RestartRecord.__annotations__  # type: ignore[literal-required]
                                        if f in history[k]} for k in sorted(history)}
    if cleaned_up_time:
        status["cleanedUpTime"] = cleaned_up_time
    warnings = old.warnings()
    if warnings:
        status[WARNINGS_FIELD] = warnings
    return status
