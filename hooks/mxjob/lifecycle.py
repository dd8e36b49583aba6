"""The job lifecycle: from the old status, the observed pods and the time, the new status and plan.

The hook is stateless, so whatever must be remembered across syncs lives in status and is
recomputed idempotently: completed indexes (so a garbage-collected success is never rerun) and a
per-pod restart record keyed by the uid of the failed pod (so a stale cache that shows the same
failed pod twice counts it once). A field of that memory not in the shape written here is
treated as absent (hooks.shared.status): a lost restartHistory or restartCount counts again only
what the live pods still show, and lost completedIndexes rerun only indexes whose pods are gone.
The transition table in docs/lifecycle.md is checked against
this module by tests/test_lifecycle_table.py.
"""
from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, cast

from hooks.mxjob.observed import PodView
from hooks.mxjob.spec import MXJob
from hooks.shared.conditions import Conditions, parse_rfc3339, rfc3339
from hooks.shared.k8s import JSON, RestartRecord
from hooks.shared.status import WARNINGS_FIELD, OldStatus, is_counter, plus_seconds

RETRYABLE_EXIT_CODES = frozenset({130, 137, 138, 143})
# After a success, pods still running get this long to finish on their own before cleanPodPolicy
# deletes them: ps-lite servers and workers leave a moment after the scheduler, and deleting them
# at once would record a spurious exit 143. Failures clean up at once.
SUCCESS_GRACE_SECONDS = 30
_INDEX = re.compile(r"[0-9]{1,10}")


@dataclass
class Plan:
    """What one sync decides: the status, which children to keep or create, when to sync again."""

    status: JSON
    pods: list[str] = field(default_factory=list)
    services: list[str] = field(default_factory=list)
    resync_after: float | None = None
    finished: bool = False  # the job has succeeded or failed: it never gets a new pod

    @property
    def needs_cluster_map(self) -> bool:
        """The cluster ConfigMap is kept while the job has pods or may still get some.

        So it goes with the last pod: at completion under cleanPodPolicy All, at the TTL otherwise.
        """
        return bool(self.pods) or not self.finished


def is_retryable(exit_code: int | None) -> bool:
    """Signals (130, 137, 143), 138 (user asks for a retry), and no exit code at all (eviction)."""
    return exit_code is None or exit_code in RETRYABLE_EXIT_CODES


def decide(job: MXJob, old: Any, pods: Mapping[str, PodView],
           slots: Mapping[str, tuple[str, int]], observed_services: Mapping[str, Any],
           now: datetime) -> Plan:
    """The whole lifecycle step for a valid MXJob."""
    state = _State.load(job, old, pods, now)
    if state.conds.terminal():
        return state.finish(slots, observed_services)
    if job.run_policy.suspend:
        return state.suspend()
    state.start()
    fatal, recreate = state.classify_failures()
    deadline = state.deadline()
    if state.succeeded():
        state.conclude("Succeeded", "MXJobSucceeded", state.success_message())
    elif fatal:
        state.conclude("Failed", "MXJobFailed", _fatal_message(job, fatal))
    elif state.over_backoff_limit():
        state.conclude("Failed", "MXJobFailed",
                       f"MXJob {job.key} has reached the specified backoff limit: "
                       f"{state.restart_total()} restarts, backoffLimit "
                       f"{job.run_policy.backoff_limit}{state.exit_codes_note()}.")
    elif deadline is not None and now >= deadline:
        state.conclude("Failed", "MXJobFailed",
                       f"MXJob {job.key} was active longer than activeDeadlineSeconds "
                       f"({job.run_policy.active_deadline_seconds} s) and is stopped.")
    if state.conds.terminal():
        return state.finish(slots, observed_services)
    plan = state.run(slots, recreate)
    if deadline is not None:
        plan.resync_after = (deadline - now).total_seconds()
    return plan


class _State:
    """The status being rebuilt for one sync."""

    def __init__(self, job: MXJob, old: Any, pods: Mapping[str, PodView],
                 now: datetime):
        self.job, self.pods, self.now = job, pods, now
        self.old = OldStatus(old)
        self.conds = Conditions(self.old.conditions(), now)
        self.start_time = self.old.time("startTime")
        self.completion_time = self.old.time("completionTime")
        self.cleaned_up_time = self.old.time("cleanedUpTime")
        self.old_restart_count = self.old.counter("restartCount") or 0
        self.history = _read_history(self.old)
        # Pods this sync's answer deletes; counting them would change status on the next sync.
        self.leaving: set[str] = set()
        self.completed = _completed_before(job, self.old)

    @classmethod
    def load(cls, job: MXJob, old: Any, pods: Mapping[str, PodView],
             now: datetime) -> _State:
        """The state as last written, with this sync's successes folded in."""
        state = cls(job, old, pods, now)
        # Also after the job has finished: workers often exit a moment after the scheduler.
        for pod in pods.values():
            if pod.phase == "Succeeded":
                state.completed[pod.rtype].add(pod.index)
        return state

    # --- transitions -------------------------------------------------------------------------

    def start(self) -> None:
        """Created on the first sync; startTime when children are first created or on resume."""
        key = self.job.key
        if self.conds.is_true("Suspended"):
            self.conds.set("Suspended", False, "MXJobResumed", f"MXJob {key} is resumed.")
            self.start_time = None
        self.conds.set("Created", True, "MXJobCreated", f"MXJob {key} is created.")
        if self.start_time is None:
            self.start_time = rfc3339(self.now)

    def suspend(self) -> Plan:
        """No children at all; startTime is kept so the record of the earlier run stays."""
        key = self.job.key
        self.conds.set("Created", True, "MXJobCreated", f"MXJob {key} is created.")
        self.conds.set("Suspended", True, "MXJobSuspended", f"MXJob {key} is suspended.")
        for ctype in ("Running", "Restarting"):
            self.conds.clear(ctype, "MXJobSuspended", f"MXJob {key} is suspended.")
        self.leaving = set(self.pods)
        return Plan(status=self.status())

    def classify_failures(self) -> tuple[list[PodView], list[PodView]]:
        """Split failed pods into job failures and pods to recreate; count recreations once."""
        fatal, recreate = [], []
        for pod in self._sorted(self.pods.values()):
            if pod.phase != "Failed" or pod.terminating:
                continue
            policy = self.job.replicas[pod.rtype].restart_policy
            if policy == "Never" or (policy == "ExitCode" and not is_retryable(pod.exit_code)):
                fatal.append(pod)
                continue
            recreate.append(pod)
            record = self.history.setdefault(pod.name, {})
            if record.get("lastFailedUID") != pod.uid:
                record["lastFailedUID"] = pod.uid
                if pod.exit_code is not None:
                    record["lastExitCode"] = pod.exit_code
                else:
                    record.pop("lastExitCode", None)
                record["recreations"] = record.get("recreations", 0) + 1
                record["priorContainerRestarts"] = (record.get("priorContainerRestarts", 0)
                                                    + pod.restarts)
        return fatal, recreate

    def conclude(self, ctype: str, reason: str, message: str) -> None:
        """Enter a terminal state: Running and Restarting go False, completionTime is set."""
        self.conds.set(ctype, True, reason, message)
        for other in ("Running", "Restarting"):
            self.conds.clear(other, reason, message)
        self.completion_time = rfc3339(self.now)

    def finish(self, slots: Mapping[str, tuple[str, int]],
               observed_services: Mapping[str, Any]) -> Plan:
        """A finished job: never a new pod; the success grace, cleanPodPolicy, then the TTL, decide what stays."""
        if self.completion_time is None:  # lost from status: the TTL counts from now
            self.completion_time = rfc3339(self.now)
        policy = self.job.run_policy.clean_pod_policy
        grace_left = self._success_grace_left()
        in_grace = [p for p in self.pods.values() if grace_left is not None and p.active]
        keep = [p.name for p in self._sorted(self.pods.values()) if not p.terminating and (
            policy == "None" or (policy == "Running" and p.finished) or p in in_grace)]
        services = sorted(observed_services) if policy == "None" else keep
        # A Service of no slot (left from an earlier layout) is deleted, as a stray pod is.
        services = [name for name in services if name in observed_services and name in slots]
        plan = Plan(status={}, pods=keep, services=services, finished=True)
        self.leaving = set(self.pods) - set(keep)
        if in_grace and policy != "None":
            plan.resync_after = grace_left  # the policy applies to whatever still runs then
        ttl = self.job.run_policy.ttl_seconds_after_finished
        expiry = None
        if ttl is not None and self.completion_time:
            expiry = plus_seconds(parse_rfc3339(self.completion_time), ttl)
        if expiry is not None:
            if self.now >= expiry:
                plan.pods, plan.services = [], []
                self.leaving = set(self.pods)
                self.cleaned_up_time = rfc3339(expiry)
            else:
                left = (expiry - self.now).total_seconds()
                plan.resync_after = left if plan.resync_after is None else min(plan.resync_after, left)
        plan.status = self.status()
        return plan

    def _success_grace_left(self) -> float | None:
        """Seconds left of the success grace, or None (not a success, no completionTime, or over)."""
        if not self.conds.is_true("Succeeded") or not self.completion_time:
            return None
        end = parse_rfc3339(self.completion_time) + timedelta(seconds=SUCCESS_GRACE_SECONDS)
        left = (end - self.now).total_seconds()
        return left if left > 0 else None

    def run(self, slots: Mapping[str, tuple[str, int]], recreate: list[PodView]) -> Plan:
        """A running job: every slot gets its pod except finished ones gone and ones to recreate."""
        gone = {p.name for p in recreate}
        self.leaving = gone
        pods = [name for name, (rtype, index) in slots.items()
                if name not in gone and (name in self.pods or index not in self.completed[rtype])]
        waiting = self._awaiting_recreation(gone, slots)
        key = self.job.key
        if waiting:
            message = self._restart_message(waiting)
            self.conds.set("Restarting", True, "MXJobRestarting", message)
            self.conds.clear("Running", "MXJobRestarting", message)
        else:
            self.conds.clear("Restarting", "MXJobRunning",
                             f"MXJob {key}: every recreated pod is running again.")
            if self._deciding_pods_run():
                self.conds.set("Running", True, "MXJobRunning", f"MXJob {key} is running.")
        return Plan(status=self.status(), pods=pods, services=list(slots))

    # --- rules -------------------------------------------------------------------------------

    def succeeded(self) -> bool:
        """Every deciding pod (MXJob.deciding_slots) has succeeded."""
        return all(index in self.completed[rtype] for rtype, index in self.job.deciding_slots())

    def success_message(self) -> str:
        """Names what decided the success."""
        rtype = self.job.deciding_type
        n = self.job.replicas[rtype].replicas
        done = (f"all {n} Worker replicas succeeded" if rtype == "Worker"
                else f"{rtype} 0 succeeded")
        return f"MXJob {self.job.key} successfully completed: {done}."

    def _deciding_pods_run(self) -> bool:
        deciding = self.job.deciding_slots()
        by_slot = {(p.rtype, p.index): p for p in self.pods.values()}
        states = [by_slot.get(slot) for slot in deciding]
        return (any(p is not None and p.active for p in states)
                and all((p is not None and p.active) or slot[1] in self.completed[slot[0]]
                        for p, slot in zip(states, deciding, strict=True)))

    def over_backoff_limit(self) -> bool:
        """Container restarts plus recreations, over the whole job, beyond backoffLimit."""
        limit = self.job.run_policy.backoff_limit
        return limit is not None and self.restart_total() > limit

    def restart_total(self) -> int:
        """Every restart so far: earlier pods' (from history) plus the live pods' own.

        Never less than the count already written: a pod that goes away (cleaned up, deleted by
        hand) takes its restartCount with it, and the count must not drop.
        """
        past = sum(r.get("recreations", 0) + r.get("priorContainerRestarts", 0)
                   for r in self.history.values())
        live = sum(p.restarts for p in self.pods.values()
                   if p.uid != self.history.get(p.name, {}).get("lastFailedUID"))
        return max(past + live, self.old_restart_count)

    def exit_codes_note(self) -> str:
        """'; last exit codes: pod code, ...' for the pods that restarted, so the cause is in the message."""
        codes: dict[str, int] = {}
        for name, record in self.history.items():
            if isinstance(record.get("lastExitCode"), int):
                codes[name] = record["lastExitCode"]
        for pod in self.pods.values():
            code = pod.exit_code if pod.phase == "Failed" else pod.last_exit_code
            if code is not None and (pod.restarts or pod.phase == "Failed"):
                codes[pod.name] = code
        if not codes:
            return ""
        return "; last exit codes: " + ", ".join(f"{name} {codes[name]}" for name in sorted(codes))

    def deadline(self) -> datetime | None:
        """startTime + activeDeadlineSeconds, if both are set."""
        seconds = self.job.run_policy.active_deadline_seconds
        if seconds is None or self.start_time is None:
            return None
        return plus_seconds(parse_rfc3339(self.start_time), seconds)

    def _awaiting_recreation(self, gone: set[str],
                             slots: Mapping[str, tuple[str, int]]) -> list[str]:
        waiting = set(gone)
        for name, record in self.history.items():
            pod = self.pods.get(name)
            if pod is None:
                slot = slots.get(name)
                if slot is not None and slot[1] not in self.completed[slot[0]]:
                    waiting.add(name)
            elif pod.uid == record.get("lastFailedUID") or pod.phase == "Pending":
                waiting.add(name)
        return sorted(waiting)

    def _restart_message(self, names: list[str]) -> str:
        parts = []
        for name in names:
            record = self.history.get(name, {})
            code = record.get("lastExitCode")
            cause = f"exited with code {code}" if code is not None else "failed without an exit code"
            parts.append(f"pod {name} {cause} and is recreated")
        limit = self.job.run_policy.backoff_limit
        budget = f" of backoffLimit {limit}" if limit is not None else ""
        return (f"MXJob {self.job.key} is restarting: {'; '.join(parts)} "
                f"(restarts so far: {self.restart_total()}{budget}).")

    # --- output ------------------------------------------------------------------------------

    def status(self) -> JSON:
        """The status to write: the same observations always give the same bytes."""
        status: JSON = {"conditions": self.conds.ordered(), "replicaStatuses": self._replicas()}
        if self.start_time:
            status["startTime"] = self.start_time
        if self.completion_time:
            status["completionTime"] = self.completion_time
        total = self.restart_total()
        if total:
            status["restartCount"] = total
        if self.history:
            status["restartHistory"] = {k: self.history[k] for k in sorted(self.history)}
        if self.cleaned_up_time:
            status["cleanedUpTime"] = self.cleaned_up_time
        warnings = self.old.warnings()
        if warnings:
            status[WARNINGS_FIELD] = warnings
        return status

    def _replicas(self) -> JSON:
        counts: JSON = {}
        for rtype in self.job.replicas:
            mine = [p for p in self.pods.values()
                    if p.rtype == rtype and not p.terminating and p.name not in self.leaving]
            entry: JSON = {"active": sum(p.phase == "Running" for p in mine),
                     "succeeded": len(self.completed[rtype]),
                     "failed": sum(p.phase == "Failed" for p in mine)}
            if self.completed[rtype]:
                entry["completedIndexes"] = _format_indexes(self.completed[rtype])
            counts[rtype] = entry
        return counts

    def _sorted(self, pods: Any) -> list[PodView]:
        order = {rtype: n for n, rtype in enumerate(self.job.replicas)}
        return sorted(pods, key=lambda p: (order[p.rtype], p.index))


def _fatal_message(job: MXJob, fatal: list[PodView]) -> str:
    parts = []
    for pod in fatal:
        policy = job.replicas[pod.rtype].restart_policy
        code = f"exit code {pod.exit_code}" if pod.exit_code is not None else "no exit code"
        why = ("restartPolicy Never does not retry" if policy == "Never"
               else "a permanent error under restartPolicy ExitCode")
        parts.append(f"{pod.rtype} {pod.index} (pod {pod.name}) failed with {code}; {why}")
    return f"MXJob {job.key} failed: {'; '.join(parts)}."


def _completed_before(job: MXJob, old: OldStatus) -> dict[str, set[int]]:
    """Replica indexes that already succeeded, as the last status recorded them.

    Jobs adopted from an older operator carry its status: mxnet-operator before v1.1 wrote
    `mxReplicaStatuses`, later ones `replicaStatuses` without `completedIndexes`, both with counts
    only, keyed by the replica key as the user spelt it. A succeeded count that covers every
    replica of a type names every index (there is one pod per index); a smaller count cannot say
    which indexes, so those are left to the pods still observed. This hook writes
    completedIndexes whenever an index has completed, so the counts only matter on the first sync
    of an adopted job.
    """
    field, recorded = "replicaStatuses", old.object("replicaStatuses")
    if not recorded:
        field, recorded = "mxReplicaStatuses", old.object("mxReplicaStatuses")
    by_type = {str(key).lower(): (key, entry) for key, entry in recorded.items()}
    completed: dict[str, set[int]] = {}
    for rtype, spec in job.replicas.items():
        key, entry = by_type.get(rtype.lower(), (rtype, {}))
        if not isinstance(entry, Mapping):
            old.warn(f"status.{field}.{key}", "is not an object")
            entry = {}
        if "completedIndexes" in entry:
            completed[rtype] = _read_indexes(old, entry.get("completedIndexes"), rtype, spec.replicas)
            continue
        succeeded = entry.get("succeeded")
        if succeeded is not None and not is_counter(succeeded):
            old.warn(f"status.{field}.{key}.succeeded", "is not a non-negative int32 counter")
            succeeded = None
        everyone = isinstance(succeeded, int) and 0 < spec.replicas <= succeeded
        completed[rtype] = set(range(spec.replicas)) if everyone else set()
    return completed


def _read_history(old: OldStatus) -> dict[str, RestartRecord]:
    """status.restartHistory, each record kept only if every field has the type written here."""
    history: dict[str, RestartRecord] = {}
    for name, record in old.object("restartHistory").items():
        if not (isinstance(record, Mapping)
                and isinstance(record.get("lastFailedUID", ""), str)
                and isinstance(record.get("lastExitCode", 0), int)
                and not isinstance(record.get("lastExitCode"), bool)
                and -(2**31) <= record.get("lastExitCode", 0) < 2**31
                and all(is_counter(record.get(k, 0))
                        for k in ("recreations", "priorContainerRestarts"))):
            old.warn(f"status.restartHistory[{name[:80]}]", "is not a restart record")
            continue
        history[name] = cast(RestartRecord, {k: record[k] for k in RestartRecord.__annotations__
                                             if k in record})
    return history


def _read_indexes(old: OldStatus, text: Any, rtype: str, replicas: int) -> set[int]:
    """'0-2,5' -> {0, 1, 2, 5}; a value we would not have written counts as nothing completed.

    Each range is checked against the replica count before it is expanded, so the work is
    bounded by the job's size, whatever the text says.
    """
    if text is None or text == "":
        return set()
    indexes: set[int] = set()
    parts = text.split(",", replicas) if isinstance(text, str) else [""]
    last = -2
    for part in parts:
        low, _, high = part.partition("-")
        # Ascending, disjoint, adjacent runs merged: the form _format_indexes writes. That also
        # caps the expanded total at the replica count, however long the text.
        if not (_INDEX.fullmatch(low) and (high == "" or _INDEX.fullmatch(high))
                and last + 1 < int(low) <= int(high or low) < replicas):
            old.warn(f"status.replicaStatuses.{rtype}.completedIndexes",
                     f"is not ascending index ranges below {replicas} (like 0-2,5)")
            return set()
        last = int(high or low)
        indexes.update(range(int(low), last + 1))
    return indexes


def _format_indexes(indexes: set[int]) -> str:
    """{0, 1, 2, 5} -> '0-2,5', the batch/v1 Job completedIndexes form."""
    ranges: list[list[int]] = []
    run: list[int] = []
    for i in sorted(indexes):
        if run and i == run[-1] + 1:
            run.append(i)
            continue
        if run:
            ranges.append(run)
        run = [i]
    if run:
        ranges.append(run)
    return ",".join(f"{r[0]}-{r[-1]}" if len(r) > 1 else str(r[0]) for r in ranges)
