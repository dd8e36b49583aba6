"""Replica counts: which indexes have completed, and status.replicaStatuses.

Completed indexes are remembered in status (`completedIndexes`, in the batch/v1 Job form) and by
the succeeded pods themselves, which the hook never deletes while the job runs.
"""
from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from hooks.mxjob.observed import PodView
from hooks.mxjob.spec import MXJob
from hooks.mxjob.vocabulary import Outcome
from hooks.shared.k8s import JSON
from hooks.shared.status import OldStatus, is_counter

_INDEX = re.compile(r"[0-9]{1,10}")


def completed_before(job: MXJob, old: OldStatus) -> dict[str, set[int]]:
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
            completed[rtype] = read_indexes(old, entry.get("completedIndexes"), rtype, spec.replicas)
            continue
        succeeded = entry.get("succeeded")
        if succeeded is not None and not is_counter(succeeded):
            old.warn(f"status.{field}.{key}.succeeded", "is not a non-negative int32 counter")
            succeeded = None
        everyone = isinstance(succeeded, int) and 0 < spec.replicas <= succeeded
        completed[rtype] = set(range(spec.replicas)) if everyone else set()
    return completed


def read_indexes(old: OldStatus, text: Any, rtype: str, replicas: int) -> set[int]:
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
        # Ascending, disjoint, adjacent runs merged: the form format_indexes writes. That also
        # caps the expanded total at the replica count, however long the text.
        if not (_INDEX.fullmatch(low) and (high == "" or _INDEX.fullmatch(high))
                and last + 1 < int(low) <= int(high or low) < replicas):
            old.warn(f"status.replicaStatuses.{rtype}.completedIndexes",
                     f"is not ascending index ranges below {replicas} (like 0-2,5)")
            return set()
        last = int(high or low)
        indexes.update(range(int(low), last + 1))
    return indexes


def format_indexes(indexes: frozenset[int] | set[int]) -> str:
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


def frozen_from(old: OldStatus) -> JSON:
    """replicaStatuses read back, each counter kept only in the shape written."""
    frozen: JSON = {}
    for rtype, entry in old.object("replicaStatuses").items():
        if not isinstance(entry, Mapping):
            continue
        kept: JSON = {k: entry[k] for k in ("active", "succeeded", "failed") if is_counter(entry.get(k))}
        if isinstance(entry.get("completedIndexes"), str):
            kept["completedIndexes"] = entry["completedIndexes"]
        frozen[str(rtype)] = kept
    return frozen


def replica_counts(job: MXJob, pods: Mapping[str, PodView], completed: Mapping[str, frozenset[int]],
                   not_counted: frozenset[str]) -> JSON:
    """replicaStatuses of a job that runs: active and failed pods (but `not_counted`), completed indexes."""
    counts: JSON = {}
    for rtype in job.replicas:
        mine = [p for p in pods.values() if p.rtype == rtype and not p.terminating and p.name not in not_counted]
        entry: JSON = {"active": sum(p.phase == "Running" for p in mine),
                       "succeeded": len(completed[rtype]),
                       "failed": sum(p.phase == "Failed" for p in mine)}
        if completed[rtype]:
            entry["completedIndexes"] = format_indexes(completed[rtype])
        counts[rtype] = entry
    return counts


def final_counts(job: MXJob, pods: Mapping[str, PodView], completed: Mapping[str, frozenset[int]],
                 not_counted: frozenset[str], outcome: Outcome | None) -> JSON:
    """replicaStatuses as the job ends with `outcome`, counted now (Argo's conditions read them).

    Pods still running that the policy stops count as succeeded on success, as training-operator
    counts them, and as no longer active on failure.
    """
    counts = replica_counts(job, pods, completed, not_counted)
    if outcome == "Failed" and job.run_policy.clean_pod_policy != "None":
        for entry in counts.values():
            entry["active"] = 0  # the policy stops them: the record does not show them running
    if outcome == "Succeeded":
        for rtype, entry in counts.items():
            running = {p.index for p in pods.values() if p.rtype == rtype and p.active and p.name not in not_counted}
            done = completed[rtype] | running
            entry.update({"active": 0, "succeeded": len(done)})
            if done:
                entry["completedIndexes"] = format_indexes(done)
    return counts
