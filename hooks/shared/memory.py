"""What a job's hook remembers in its children, so that a stale parent cannot make it forget.

Real Metacontroller reads the parent and the children from separate caches and writes the status
after the children: a sync often sees the status of one sync earlier with the children of now
(docs/lifecycle.md, "Why the outcome is recorded in a child"). So the hook never acts
irreversibly on memory kept only in status: it first writes the fact into a child, and takes a
destructive step (deleting pods) only on a later sync that observes that child.

The records are ConfigMaps created once and never changed (`immutable: true`, the CompositeController
rule OnDelete or an unchanged InPlace object): a create is the one write that either happens
whole or not at all, and an immutable record cannot be edited into something else. One record
holds a JSON object under one key. This module owns their shape; each kind decides what goes in.
- `<job>-outcome`: the job's outcome, the whole terminal status as the hook wrote it. Once it is
  observed the job is terminal, whatever the status says, and the status is the record's.
- `<pod>-restart-<n>`: the n-th recreation of one pod (MXJob), with what the failure showed.
- `<job>-attempt-<n>`: the n-th restart of the whole job (MXJob, failurePolicy RestartJob), with
  the pod whose loss caused it and what it showed. Pods of an earlier attempt are deleted only on
  a sync that sees it.
- `<job>-suspension`: when the job was suspended (MXJob), kept while it is: a suspended job has no
  pod or Service left to keep that time. It goes when the job is resumed.

Times are kept too, as annotations of the children they concern (`stamp`, `stamped_time`): when a
condition changed is then read back by every later sync, not stamped again from a later sync's clock.
"""
from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any, NamedTuple

from hooks.shared.k8s import JSON
from hooks.shared.status import parse_time

RECORD_KEY = "record"
OUTCOME_SUFFIX = "-outcome"
SUSPENSION_SUFFIX = "-suspension"
SUSPENDED_AT = "suspendedAt"
RESTART_INFIX = "-restart-"
ATTEMPT_INFIX = "-attempt-"
MAX_RECORD_TEXT = 512 * 1024  # far below a ConfigMap's 1 MiB; a record of ours is a few KB


class Record(NamedTuple):
    """An observed record: its JSON object, or why it cannot be read (then `data` is empty)."""

    data: Mapping[str, Any]
    problem: str | None = None


def outcome_name(job_name: str) -> str:
    """`<job>-outcome`: no pod or other ConfigMap of a job ends so (theirs end in an index or a fixed word)."""
    return job_name + OUTCOME_SUFFIX


def suspension_name(job_name: str) -> str:
    """`<job>-suspension`: as `<job>-outcome`, no other child of a job ends so."""
    return job_name + SUSPENSION_SUFFIX


def restart_record_name(pod_name: str, attempt: int) -> str:
    """`<pod>-restart-<attempt>`: the record of the attempt-th recreation of that pod."""
    return f"{pod_name}{RESTART_INFIX}{attempt}"


def attempt_record_name(job_name: str, attempt: int) -> str:
    """`<job>-attempt-<n>`: the record of the n-th restart of the whole job (no pod, Service or
    other ConfigMap of a job ends so: theirs end in `-<type>-<index>`, `-restart-<n>` or a word)."""
    return f"{job_name}{ATTEMPT_INFIX}{attempt}"


def attempt_records(config_maps: Mapping[str, Any], job_name: str) -> dict[int, Record]:
    """Every observed job-restart record of the job, by attempt number."""
    found: dict[int, Record] = {}
    prefix = job_name + ATTEMPT_INFIX
    for name, obj in config_maps.items():
        tail = name[len(prefix):] if name.startswith(prefix) else ""
        if tail.isdigit() and len(tail) <= 9 and tail[0] != "0":
            record = read_record(obj)
            if record is not None:
                found[int(tail)] = record
    return found


def record_config_map(name: str, namespace: str | None, labels: Mapping[str, str], data: Mapping[str, Any]) -> JSON:
    """A record ConfigMap: the compact JSON of `data`, keys in the order given (the order the hook
    writes them, so the status read back from a record has the bytes it was written with)."""
    meta: JSON = {"name": name, "labels": dict(labels)}
    if namespace is not None:
        meta["namespace"] = namespace
    text = json.dumps(data, separators=(",", ":"))
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "immutable": True,
            "data": {RECORD_KEY: text}}


def observed_record_as_desired(observed: Mapping[str, Any], namespace: str | None, labels: Mapping[str, str]) -> JSON:
    """An observed record answered back with its data as it is, so an answer never changes (or
    deletes) it; the rest as the builder writes it (Metacontroller adds its own labels, such as
    controller-uid, which the answer leaves to it, as for every child)."""
    meta: JSON = {"name": (observed.get("metadata") or {}).get("name"), "labels": dict(labels)}
    if namespace is not None:
        meta["namespace"] = namespace
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "immutable": True,
            "data": dict(observed.get("data") or {})}


def outcome_child(observed_config_maps: Mapping[str, Any], job_name: str, namespace: str | None,
                  labels: Mapping[str, str], new: Mapping[str, Any] | None) -> JSON | None:
    """The job's outcome record in an answer: the observed one as it is (it is never changed), else
    a new one holding `new` when the job has just finished, else none."""
    observed = observed_config_maps.get(outcome_name(job_name))
    if observed is not None:
        return observed_record_as_desired(observed, namespace, labels)
    return record_config_map(outcome_name(job_name), namespace, labels, new) if new is not None else None


def suspension_child(observed_config_maps: Mapping[str, Any], job_name: str, namespace: str | None,
                     labels: Mapping[str, str], since: str) -> JSON:
    """The record of a suspended job: the observed one as it is, else a new one saying `since`."""
    name = suspension_name(job_name)
    observed = observed_config_maps.get(name)
    if observed is not None:
        return observed_record_as_desired(observed, namespace, labels)
    return record_config_map(name, namespace, labels, {SUSPENDED_AT: since})


def suspended_since(observed_config_maps: Mapping[str, Any], job_name: str) -> datetime | None:
    """When the job was suspended, as its live suspension record keeps it (None: no such record)."""
    observed = observed_config_maps.get(suspension_name(job_name))
    if not isinstance(observed, Mapping) or (observed.get("metadata") or {}).get("deletionTimestamp"):
        return None
    record = read_record(observed)
    return parse_time(record.data.get(SUSPENDED_AT)) if record is not None else None


def read_record(observed: Mapping[str, Any] | None) -> Record | None:
    """The record in an observed ConfigMap; None when there is none."""
    if observed is None:
        return None
    data = observed.get("data")
    text = data.get(RECORD_KEY) if isinstance(data, Mapping) else None
    if not isinstance(text, str) or len(text) > MAX_RECORD_TEXT:
        return Record({}, f"ConfigMap {_name(observed)} has no data.{RECORD_KEY} the hook can read")
    try:
        value = json.loads(text)
    except ValueError:
        return Record({}, f"ConfigMap {_name(observed)} data.{RECORD_KEY} is not JSON")
    if not isinstance(value, dict):
        return Record({}, f"ConfigMap {_name(observed)} data.{RECORD_KEY} is not a JSON object")
    return Record(value)


def restart_records(config_maps: Mapping[str, Any]) -> dict[str, dict[int, Record]]:
    """Every observed restart record, by pod name, then by attempt number."""
    found: dict[str, dict[int, Record]] = {}
    for name, obj in config_maps.items():
        pod, infix, tail = name.rpartition(RESTART_INFIX)
        if not (infix and pod and tail.isdigit() and len(tail) <= 9 and tail[0] != "0"):
            continue
        record = read_record(obj)
        if record is not None:
            found.setdefault(pod, {})[int(tail)] = record
    return found


def _name(observed: Mapping[str, Any]) -> str:
    meta = observed.get("metadata")
    return str(meta.get("name")) if isinstance(meta, Mapping) else "?"


def stamp(children: Iterable[JSON], annotation: str, moment: str) -> None:
    """Annotate children built by this sync (fresh dicts) with a time for later syncs to read back."""
    for child in children:
        meta = child.setdefault("metadata", {})
        meta["annotations"] = {**(meta.get("annotations") or {}), annotation: moment}


def stamped_time(observed: Iterable[Any], annotation: str) -> datetime | None:
    """The earliest time the live observed children keep under `annotation` (None: none does).

    A sync may read the parent without the status the sync before it wrote (Metacontroller's parent
    cache lags its own status writes): a time stamped from each sync's own clock would alternate
    between two seconds, a status write on every sync. A child keeps the time the sync that first
    answered it stamped, and every later sync reads that one. The earliest, should two syncs that
    raced have stamped different ones; a child being deleted no longer counts."""
    times = [parsed for child in observed if isinstance(child, Mapping)
             if isinstance(meta := child.get("metadata"), Mapping) and not meta.get("deletionTimestamp")
             if (parsed := parse_time((meta.get("annotations") or {}).get(annotation))) is not None]
    return min(times) if times else None
