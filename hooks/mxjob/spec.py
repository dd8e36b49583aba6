"""Parsing, defaulting and validation of an MXJob: the spec as users write it in, a typed MXJob out.

Defaults live here and only here (with runpolicy.py for spec.runPolicy and template.py for the
pod templates); they are applied on every sync and never written back to the object. Every
problem found is reported with its field path and what to do about it, all at once, so a user
fixes a manifest in one round trip.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from hooks.mxjob.names import child_name
from hooks.mxjob.network import PER_REPLICA, read_service_layout
from hooks.mxjob.runpolicy import RunPolicy, or_default, parse_run_policy
from hooks.mxjob.template import check_template, tuner_key_of
from hooks.mxjob.vocabulary import (
    JOB_MODES,
    REPLICA_TYPES,
    RESTART_POLICIES,
    SCHEDULER,
    SERVER,
    SUCCESS_POLICIES,
    TRAIN_TYPES,
    TUNE_TYPES,
    TUNER,
    TUNER_SERVER,
    TUNER_TRACKER,
    WORKER,
    JobMode,
    RestartPolicy,
    SuccessPolicy,
    choices,
    one_of,
)
from hooks.shared.errors import SpecError as SpecError  # re-exported: the kind's modules raise it from here
from hooks.shared.gang import check_min_available
from hooks.shared.identity import JobIdentity
from hooks.shared.kueue import PRIORITY_CLASS_LABEL, QUEUE_LABEL
from hooks.shared.messages import show
from hooks.shared.validation import DNS_1035_LABEL, is_non_negative_int

# Kueue (v0.5-v0.10) queues a job carrying this label (or, deprecated, this annotation) and
# reserves quota for the replica keys it finds spelt exactly as REPLICA_TYPES.
KUEUE_QUEUE_KEY = QUEUE_LABEL
# Kueue's WorkloadPriorityClass of a job: read off the MXJob (v0.5-v0.10) or, for a plain-pod group
# (v0.11 and later), off one pod of the group, whichever it lists first (Kueue v0.17.0's
# pkg/controller/jobs/pod Load): so every pod of a group must carry the same one.
KUEUE_PRIORITY_KEY = PRIORITY_CLASS_LABEL
MAX_NAME_LENGTH = 63  # DNS-1035 label: the limit for Service names
# Bounds checked before any work is sized by them; the CRD declares the same maximums.
MAX_REPLICAS = 5000  # per replica type; far above what MX_CONFIG lets start (see layout.size_problems)
MAX_PROBLEMS = 20  # a message listing more helps no one and makes status huge

_CANONICAL = {t.lower(): t for t in REPLICA_TYPES}


@dataclass(frozen=True)
class ReplicaSpec:
    """One entry of spec.mxReplicaSpecs with defaults applied."""

    type: str
    replicas: int
    restart_policy: RestartPolicy
    template: Mapping[str, Any]
    port: int
    tuner_key: str
    path: str = ""  # where it is in the spec, the key as the user spelt it, for messages

    @property
    def name(self) -> str:
        """The lower-case type used in names, labels and DMLC_ROLE."""
        return self.type.lower()


@dataclass(frozen=True)
class MXJob(JobIdentity):
    """A valid MXJob: identity plus the parsed spec."""

    job_mode: JobMode
    success_policy: SuccessPolicy
    run_policy: RunPolicy
    replicas: dict[str, ReplicaSpec] = field(default_factory=dict)  # canonical type order
    service_layout: str = PER_REPLICA  # hooks.mxjob.network
    queue: str = ""  # Kueue's LocalQueue (KUEUE_QUEUE_KEY), "" when the job is not queued
    # The WorkloadPriorityClass of the job's Kueue pod groups (KUEUE_PRIORITY_KEY): the job's label,
    # else the one its templates agree on; "" for none (hooks.mxjob.spec.group_priority_class).
    priority_class: str = ""

    def has(self, rtype: str) -> bool:
        """Whether the job has at least one replica of this type."""
        spec = self.replicas.get(rtype)
        return spec is not None and spec.replicas > 0

    @property
    def deciding_type(self) -> str:
        """The replica type whose pods decide the job: the one rule behind success and job-role.

        MXTune: the Tuner. MXTrain: the Scheduler, unless there is none or successPolicy is
        AllWorkers; then every Worker.
        """
        if self.job_mode == "MXTune":
            return TUNER
        if not self.has(SCHEDULER) or self.success_policy == "AllWorkers":
            return WORKER
        return SCHEDULER

    def is_master(self, rtype: str) -> bool:
        """Whether pods of this type carry job-role: master: the one pod whose exit decides the job.

        When several pods decide (every Worker), none of them is "the" master, so none is labelled.
        """
        return rtype == self.deciding_type and self.replicas[rtype].replicas == 1

    @property
    def total_replicas(self) -> int:
        """How many pods the job has: every replica of every type."""
        return total_replicas(self.replicas)

    def deciding_slots(self) -> list[tuple[str, int]]:
        """Every (replica type, index) whose pod must succeed for the job to succeed."""
        rtype = self.deciding_type
        return [(rtype, i) for i in range(self.replicas[rtype].replicas)]


def parse_mxjob(parent: Mapping[str, Any], *, gang: bool = False, kueue_pod_groups: bool = False) -> MXJob:
    """Parse and validate the parent MXJob, raising SpecError listing every problem.

    schedulingPolicy is read (and checked) only when gang scheduling is on: without it the field
    has no effect, so a job that applied before gang scheduling existed must not start failing.
    Likewise the priority class of a queued job's pod group only when its pods form Kueue pod
    groups (`kueue_pod_groups`: Kueue v0.11 and later).
    """
    problems: list[str] = []
    meta = parent.get("metadata") or {}
    name = meta.get("name", "")
    namespace = meta.get("namespace") or "default"
    spec = parent.get("spec")
    if not isinstance(spec, Mapping):
        raise SpecError(["spec: must be an object with mxReplicaSpecs; add a spec to the MXJob"])

    raw_mode = or_default(spec.get("jobMode"), "MXTrain")
    job_mode = one_of(raw_mode, JOB_MODES)
    if job_mode is None:
        problems.append(f"spec.jobMode: {show(raw_mode)} is not one of {choices(JOB_MODES)}")
    raw_success = or_default(spec.get("successPolicy"), "")
    success_policy = one_of(raw_success, SUCCESS_POLICIES)
    if success_policy is None:
        problems.append(f"spec.successPolicy: {show(raw_success)} is not one of {choices(SUCCESS_POLICIES)}")
    run_policy = parse_run_policy(spec, problems, gang=gang)
    replicas = _parse_replica_specs(spec.get("mxReplicaSpecs"), problems)
    _check_queued_keys(meta, replicas, problems)
    priority_class = group_priority_class(meta, replicas, problems) if kueue_pod_groups and queue_name(meta) else ""
    if job_mode is not None:
        _check_mode(job_mode, replicas, problems)
    _check_names(name, replicas, problems)
    service_layout = read_service_layout(meta, problems)
    check_min_available(run_policy.scheduling, total_replicas(replicas), run_policy.scheduling_path,
                        problems)
    if len(problems) > MAX_PROBLEMS:
        problems = [*problems[:MAX_PROBLEMS], f"and {len(problems) - MAX_PROBLEMS} more problems"]
    if problems or job_mode is None or success_policy is None:
        raise SpecError(problems)
    return MXJob(name=name, namespace=namespace, uid=meta.get("uid", ""), job_mode=job_mode,
                 success_policy=success_policy, run_policy=run_policy, replicas=replicas,
                 service_layout=service_layout, queue=queue_name(meta),
                 priority_class=priority_class)


def queue_name(meta: Mapping[str, Any]) -> str:
    """The job's Kueue LocalQueue: its label, else (deprecated) its annotation; "" for none."""
    for key in ("labels", "annotations"):
        found = meta.get(key)
        if isinstance(found, Mapping) and isinstance(found.get(KUEUE_QUEUE_KEY), str):
            return str(found[KUEUE_QUEUE_KEY])
    return ""


def group_priority_class(meta: Mapping[str, Any], replicas: Mapping[str, ReplicaSpec], problems: list[str]) -> str:
    """The WorkloadPriorityClass every pod of a queued job's Kueue pod group carries: the MXJob's label
    KUEUE_PRIORITY_KEY, else the one its replica templates carry; "" for none.

    Kueue reads a group's priority off whichever of its pods it lists first, so templates that
    name different classes (or another than the job's) would give the Workload either one: that
    is refused, naming the fields."""
    labels = meta.get("labels")
    own = labels.get(KUEUE_PRIORITY_KEY) if isinstance(labels, Mapping) else None
    job_class = own if isinstance(own, str) else ""
    named: dict[str, str] = {}
    for spec in replicas.values():
        found = (spec.template.get("metadata") or {}).get("labels") or {}
        value = found.get(KUEUE_PRIORITY_KEY) if isinstance(found, Mapping) else None
        if isinstance(value, str):
            named[f"{spec.path}.template.metadata.labels[{KUEUE_PRIORITY_KEY}]"] = value
    chosen = job_class or next(iter(named.values()), "")
    for path, value in named.items():
        if value != chosen:
            whose = f"the MXJob's label {show(job_class)}" if job_class else f"another template's {show(chosen)}"
            problems.append(f"{path}: {show(value)} differs from {whose}; Kueue gives a pod group one "
                            f"priority, read off any one of its pods: set {KUEUE_PRIORITY_KEY} on the MXJob "
                            f"alone, or the same value everywhere")
    return chosen


def _parse_replica_specs(raw: Any, problems: list[str]) -> dict[str, ReplicaSpec]:
    if not isinstance(raw, Mapping) or not raw:
        problems.append("spec.mxReplicaSpecs: required; give at least a Worker replica spec")
        return {}
    seen: dict[str, str] = {}
    parsed: dict[str, ReplicaSpec] = {}
    for key in raw:
        path = f"spec.mxReplicaSpecs.{show(key, quote=False)}"
        rtype = _CANONICAL.get(str(key).lower())
        if rtype is None:
            problems.append(f"{path}: unknown replica type; use one of {', '.join(REPLICA_TYPES)}")
            continue
        if rtype in seen:
            problems.append(f"{path}: duplicates {show(seen[rtype])} (replica types are "
                            f"case-insensitive); keep one of them")
            continue
        seen[rtype] = key
        spec = _parse_replica_spec(rtype, path, raw[key], problems)
        if spec is not None:
            parsed[rtype] = spec
    return {t: parsed[t] for t in REPLICA_TYPES if t in parsed}


def _check_queued_keys(meta: Mapping[str, Any], replicas: Mapping[str, ReplicaSpec],
                       problems: list[str]) -> None:
    """A job queued in Kueue must spell its replica keys exactly: Kueue counts no other key.

    Kueue looks replica keys up verbatim, so the pods of a `worker` key would run outside the
    quota its queue reserved. Without a queue the keys stay case-insensitive, as always.
    """
    queued = any(isinstance(m, Mapping) and KUEUE_QUEUE_KEY in m
                 for m in (meta.get("labels"), meta.get("annotations")))
    if not queued:
        return
    for rtype, spec in replicas.items():
        if spec.path != f"spec.mxReplicaSpecs.{rtype}":
            problems.append(f"{spec.path}: a job queued in Kueue (label {KUEUE_QUEUE_KEY}) must "
                            f"spell its replica types exactly, as Kueue counts them; rename it to {rtype}")


def _parse_replica_spec(rtype: str, path: str, raw: Any, problems: list[str]) -> ReplicaSpec | None:
    if not isinstance(raw, Mapping):
        problems.append(f"{path}: must be an object with replicas, restartPolicy and template")
        return None
    replicas = raw.get("replicas", 1)
    if replicas is None:
        replicas = 1
    if not is_non_negative_int(replicas, MAX_REPLICAS):
        # Checked before anything is sized by it: names, MX_CONFIG and slots all grow with it.
        problems.append(f"{path}.replicas: must be a non-negative integer of at most {MAX_REPLICAS}, "
                        f"got {show(replicas)}")
        replicas = 0
    # Only an absent or null field takes the default: a falsy {} or "" is a mistake to report.
    raw_policy = or_default(raw.get("restartPolicy"), "Never")
    restart_policy = one_of(raw_policy, RESTART_POLICIES)
    if restart_policy is None:
        problems.append(f"{path}.restartPolicy: {show(raw_policy)} is not one of {choices(RESTART_POLICIES)}")
        restart_policy = "Never"
    if raw.get("label") is not None and not isinstance(raw["label"], str):
        problems.append(f"{path}.label: must be a string (the TunerServer RPC key)")
    template = raw.get("template")
    port = check_template(path, template, problems)
    tuner_key = tuner_key_of(template, raw.get("label"))
    return ReplicaSpec(type=rtype, replicas=replicas, restart_policy=restart_policy,
                       template=template if isinstance(template, Mapping) else {},
                       port=port, tuner_key=tuner_key, path=path)


def _check_mode(job_mode: JobMode, replicas: dict[str, ReplicaSpec], problems: list[str]) -> None:
    own, other = (TRAIN_TYPES, TUNE_TYPES) if job_mode == "MXTrain" else (TUNE_TYPES, TRAIN_TYPES)
    for rtype in replicas:
        if rtype in other:
            problems.append(f"spec.mxReplicaSpecs.{rtype}: not used by jobMode {job_mode}; "
                            f"use {', '.join(own)}")

    def count(rtype: str) -> int | None:
        return replicas[rtype].replicas if rtype in replicas else None

    def need(rtype: str, ok: bool, rule: str) -> None:
        # A count that is itself invalid was reported already; a rule about it would only repeat that.
        if any(p.startswith(f"spec.mxReplicaSpecs.{rtype}.replicas:") for p in problems):
            return
        if not ok:
            got = "none" if count(rtype) is None else count(rtype)
            problems.append(f"spec.mxReplicaSpecs.{rtype}.replicas: {rule}, got {got}")

    if job_mode == "MXTrain":
        need(WORKER, (count(WORKER) or 0) >= 1, f"at least 1 {WORKER} is required")
        distributed = SCHEDULER in replicas or SERVER in replicas
        if distributed:
            need(SCHEDULER, count(SCHEDULER) == 1,
                 f"a distributed job needs exactly 1 {SCHEDULER}")
            need(SERVER, (count(SERVER) or 0) >= 1,
                 f"a distributed job needs at least 1 {SERVER}")
    else:
        need(TUNER_TRACKER, count(TUNER_TRACKER) == 1, f"MXTune needs exactly 1 {TUNER_TRACKER}")
        need(TUNER_SERVER, (count(TUNER_SERVER) or 0) >= 1, f"MXTune needs at least 1 {TUNER_SERVER}")
        need(TUNER, count(TUNER) == 1, f"MXTune needs exactly 1 {TUNER}")


def _check_names(name: str, replicas: dict[str, ReplicaSpec], problems: list[str]) -> None:
    if not name:
        problems.append("metadata.name: required")
        return
    if not DNS_1035_LABEL.match(name):
        problems.append(f"metadata.name: {show(name)} must start with a letter and contain only "
                        f"lower-case letters, digits and '-' (it prefixes Service names)")
        return
    longest = max((child_name(name, s.type, max(s.replicas - 1, 0)) for s in replicas.values()),
                  key=len, default="")
    if len(longest) > MAX_NAME_LENGTH:
        allowed = MAX_NAME_LENGTH - (len(longest) - len(name))
        problems.append(f"metadata.name: too long: the Service name {longest!r} would have "
                        f"{len(longest)} characters (the limit is {MAX_NAME_LENGTH}); use a job "
                        f"name of at most {allowed} characters")


def total_replicas(replicas: Mapping[str, ReplicaSpec]) -> int:
    """How many pods a job with these replica specs has."""
    return sum(s.replicas for s in replicas.values())


