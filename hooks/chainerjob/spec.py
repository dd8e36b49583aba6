"""Parsing, defaulting and validation of a ChainerJob: the spec as users write it in, a typed ChainerJob out.

The defaults are the original operator's, applied to a copy on every sync and never written back
(so GPU-derived slot counts follow template edits), with one change: a slot count is at least 1.
Every problem is reported at once, each with its field path and what to do about it.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from hooks.chainerjob import names
from hooks.chainerjob.names import ASSETS_DIR, ASSETS_VOLUME, KUBECTL_DIR, KUBECTL_INIT_CONTAINER, KUBECTL_VOLUME
from hooks.chainerjob.vocabulary import BACKENDS, MASTER_RESTART_POLICIES, WORKER_RESTART_POLICY, Backend
from hooks.shared.errors import SpecError
from hooks.shared.identity import JobIdentity
from hooks.shared.jsoncopy import json_copy
from hooks.shared.kueue import QUEUE_LABEL
from hooks.shared.messages import show
from hooks.shared.podtemplate import (
    check_containers,
    check_merged_lists,
    check_pod_spec,
    check_template_metadata,
    optional_map,
)
from hooks.shared.progress import NO_PROGRESS, ProgressPolicy, parse_progress_policy
from hooks.shared.quantity import parse_quantity
from hooks.shared.validation import DNS_1035_LABEL, DNS_1123_LABEL, MAX_INT32, MAX_LABEL_LENGTH, is_non_negative_int

__all__ = ["ChainerJob", "Master", "SpecError", "WorkerSet", "parse_chainerjob"]

DEFAULT_CONTAINER = "chainer"
GPU_RESOURCE = "nvidia.com/gpu"
# A StatefulSet's pods carry controller-revision-hash=<name>-<10 characters>, a label value of at
# most 63 characters, so the StatefulSet name can have at most 52.
MAX_STATEFULSET_NAME = 52
# Workers over all sets. The launcher Role names every worker pod twice and the hostfile once, and
# Metacontroller copies each child into its last-applied annotation (256 KiB for all annotations):
# 1,000 workers with the longest names fill about half of it. Checked before any work is sized by
# it; the CRD declares the same maximum per set.
MAX_WORKERS = 1000
# spec.runPolicy of a ChainerJob holds only progress reporting, the whole-job restarts a stall or a
# disruption may cause (docs/chainerjob.md, "Progress", "Disruptions") and suspend, where an MXJob has it
# (docs/chainerjob.md, "Suspend"): v1alpha1 keeps its other run settings on the master
# (spec.master.backoffLimit, ...).
RUN_POLICY_FIELDS = ("progress", "stallPolicy", "maxRestarts", "suspend")
# Whole-job restarts (stallPolicy action RestartJob, disruptions) a job gets when it leaves runPolicy.maxRestarts
# out: a job that stalls on every attempt must end, not restart for ever (docs/chainerjob.md).
DEFAULT_MAX_RESTARTS = 3


@dataclass(frozen=True)
class Master:
    """spec.master with defaults applied."""

    template: Mapping[str, Any]
    main_container: str
    slots: int
    backoff_limit: int | None = None
    active_deadline_seconds: int | None = None


@dataclass(frozen=True)
class WorkerSet:
    """One entry of spec.workerSets with defaults applied."""

    name: str
    replicas: int
    slots: int
    template: Mapping[str, Any]
    main_container: str


@dataclass(frozen=True)
class ChainerJob(JobIdentity):
    """A valid ChainerJob: identity plus the parsed spec, worker sets in name order."""

    labels: Mapping[str, str]
    master: Master
    worker_sets: dict[str, WorkerSet] = field(default_factory=dict)
    backend: Backend | Literal[""] = ""  # "" for a job without workerSets
    progress: ProgressPolicy = NO_PROGRESS  # spec.runPolicy.progress and stallPolicy (hooks.shared.progress)
    max_restarts: int = DEFAULT_MAX_RESTARTS  # spec.runPolicy.maxRestarts: whole-job restarts (stalls, disruptions)
    suspend: bool = False  # spec.runPolicy.suspend: no master Job and no workers while true

    @property
    def queue(self) -> str:
        """The Kueue LocalQueue its label names (hooks.shared.kueue.QUEUE_LABEL); "" when not queued."""
        return self.labels.get(QUEUE_LABEL, "")

    @property
    def distributed(self) -> bool:
        """Whether the job has worker sets (and so runs MPI across pods), as the original decides."""
        return bool(self.worker_sets)

    @property
    def workers(self) -> int:
        """The number of worker pods the spec asks for."""
        return sum(ws.replicas for ws in self.worker_sets.values())


def parse_chainerjob(parent: Mapping[str, Any]) -> ChainerJob:
    """Parse, default and validate the parent ChainerJob, raising SpecError listing every problem."""
    problems: list[str] = []
    meta = parent.get("metadata") or {}
    name = meta.get("name", "")
    spec = parent.get("spec")
    if not isinstance(spec, Mapping):
        raise SpecError(["spec: required; give at least spec.master.template with a container"])
    raw_sets = spec.get("workerSets") or {}
    if not isinstance(raw_sets, Mapping):
        problems.append("spec.workerSets: must be a map from worker set name to its spec")
        raw_sets = {}
    distributed = bool(raw_sets)
    backend = spec.get("backend") or ("mpi" if distributed else "")
    if distributed and backend not in BACKENDS:
        problems.append(f"spec.backend: {backend!r} is not supported; use mpi (or leave it out) for a "
                        f"job with workerSets")
    master = _parse_master(spec.get("master"), distributed, problems)
    worker_sets = {key: ws for key in sorted(raw_sets)
                   if (ws := _parse_worker_set(str(key), raw_sets[key], problems)) is not None}
    total = sum(ws.replicas for ws in worker_sets.values())
    if total > MAX_WORKERS:
        problems.append(f"spec.workerSets: {total} workers in all; at most {MAX_WORKERS} fit (the launcher "
                        f"Role and the hostfile list every worker pod)")
    _check_names(name, worker_sets, problems)
    progress = _parse_run_policy(spec.get("runPolicy"), problems)
    max_restarts = _parse_max_restarts(spec.get("runPolicy"), problems)
    suspend = _parse_suspend(spec.get("runPolicy"), problems)
    if problems or master is None:
        raise SpecError(problems)
    labels = meta.get("labels") if isinstance(meta.get("labels"), Mapping) else {}
    return ChainerJob(name=name, namespace=meta.get("namespace") or "default", uid=meta.get("uid", ""),
                      labels=dict(labels or {}), master=master, worker_sets=worker_sets,
                      # Checked above: a distributed job's backend is one of BACKENDS.
                      backend=next(b for b in BACKENDS if b == backend) if distributed else "",
                      progress=progress, max_restarts=max_restarts, suspend=suspend)


def _parse_run_policy(raw: Any, problems: list[str]) -> ProgressPolicy:
    """spec.runPolicy: {progress, stallPolicy}, in the shape and meaning of an MXJob's runPolicy."""
    if raw is None:
        return NO_PROGRESS
    if not isinstance(raw, Mapping):
        problems.append("spec.runPolicy: must be an object with progress, stallPolicy, maxRestarts and suspend")
        return NO_PROGRESS
    for key in sorted(set(raw) - set(RUN_POLICY_FIELDS)):
        problems.append(f"spec.runPolicy.{key}: a ChainerJob's runPolicy has only {', '.join(RUN_POLICY_FIELDS)}; "
                        f"the master's run settings are under spec.master (backoffLimit, activeDeadlineSeconds)")
    return parse_progress_policy(raw, problems, "spec.runPolicy")


def _parse_max_restarts(raw: Any, problems: list[str]) -> int:
    """spec.runPolicy.maxRestarts: how many whole-job restarts a stall or a disruption may cause (an
    MXJob's runPolicy.failurePolicy.maxRestarts; a ChainerJob restarts whole only for those two)."""
    value = raw.get("maxRestarts") if isinstance(raw, Mapping) else None
    if value is None:
        return DEFAULT_MAX_RESTARTS
    if not is_non_negative_int(value, MAX_INT32):
        problems.append(f"spec.runPolicy.maxRestarts: must be an integer from 0 to {MAX_INT32}, got {show(value)}")
        return DEFAULT_MAX_RESTARTS
    return int(value)


def _parse_suspend(raw: Any, problems: list[str]) -> bool:
    """spec.runPolicy.suspend: true stops the job (its pods go) and keeps it; false runs it again."""
    value = raw.get("suspend") if isinstance(raw, Mapping) else None
    if value is None:
        return False
    if not isinstance(value, bool):
        problems.append(f"spec.runPolicy.suspend: must be true or false, got {show(value)}")
        return False
    return value


def _parse_master(raw: Any, distributed: bool, problems: list[str]) -> Master | None:
    path = "spec.master"
    if not isinstance(raw, Mapping):
        problems.append(f"{path}: required; give a template with the container that runs training "
                        f"(mpiexec for a job with workerSets)")
        return None
    ints: dict[str, int | None] = {}
    # What the master Job's fields hold: backoffLimit is an int32, activeDeadlineSeconds an int64.
    for key, least, most in (("backoffLimit", 0, MAX_INT32), ("activeDeadlineSeconds", 1, 2**63 - 1)):
        value = raw.get(key)
        if value is not None and not (is_non_negative_int(value, most) and value >= least):
            problems.append(f"{path}.{key}: must be an integer from {least} to {most}, got {show(value)}")
            value = None
        ints[key] = value
    template = _default_template(raw.get("template"))
    pod_spec = template.get("spec") if template is not None else None
    # Unset as the original read it (a Go string: absent or ""); any other value, `{}` included, is checked.
    if isinstance(pod_spec, dict) and pod_spec.get("restartPolicy") in (None, ""):
        pod_spec["restartPolicy"] = "Never"
    main = _check_template(path, template, problems)
    restart = pod_spec.get("restartPolicy") if isinstance(pod_spec, Mapping) else None
    if restart is not None and restart not in MASTER_RESTART_POLICIES:
        problems.append(f"{path}.template.spec.restartPolicy: {restart!r} is not allowed for the "
                        f"master Job; use Never (the default) or OnFailure")
    slots = _slots(path, raw.get("mpiConfig"), template, distributed, problems)
    if template is None or main is None:
        return None
    return Master(template=template, main_container=main, slots=slots,
                  backoff_limit=ints["backoffLimit"], active_deadline_seconds=ints["activeDeadlineSeconds"])


def _parse_worker_set(key: str, raw: Any, problems: list[str]) -> WorkerSet | None:
    path = f"spec.workerSets.{key}"
    if not isinstance(raw, Mapping):
        problems.append(f"{path}: must be an object with replicas, mpiConfig and template")
        return None
    replicas = raw.get("replicas")
    if replicas is None:
        replicas = 1
    if not is_non_negative_int(replicas, MAX_WORKERS):
        problems.append(f"{path}.replicas: must be a non-negative integer of at most {MAX_WORKERS}, "
                        f"got {show(replicas)}")
        replicas = 0
    template = _default_template(raw.get("template"))
    main = _check_template(path, template, problems, merged=True)
    pod_spec = template.get("spec") if template is not None else None
    restart = pod_spec.get("restartPolicy") if isinstance(pod_spec, Mapping) else None
    if restart not in (None, "", WORKER_RESTART_POLICY):  # "" is unset: the API server defaults it to Always
        problems.append(f"{path}.template.spec.restartPolicy: {restart!r} is not allowed for the pods "
                        f"of a StatefulSet; use Always or leave it out")
    slots = _slots(path, raw.get("mpiConfig"), template, True, problems)
    if template is None or main is None:
        return None
    return WorkerSet(name=key, replicas=replicas, slots=slots, template=template, main_container=main)


def _default_template(raw: Any) -> dict[str, Any] | None:
    """A copy of a pod template with the original's one container default: a lone unnamed container is `chainer`."""
    if not isinstance(raw, Mapping):
        return None
    template: dict[str, Any] = json_copy(dict(raw))
    pod_spec = template.get("spec")
    containers = pod_spec.get("containers") if isinstance(pod_spec, dict) else None
    if isinstance(containers, list) and len(containers) == 1 and isinstance(containers[0], dict) \
            and not containers[0].get("name"):
        containers[0]["name"] = DEFAULT_CONTAINER
    return template


def _check_template(path: str, template: Mapping[str, Any] | None, problems: list[str], *,
                    merged: bool = False) -> str | None:
    """Check every part of a pod template the hook reads or adds to; return the main container's
    name (`chainer`, else the first). `merged`: the template goes into an InPlace child (a worker
    StatefulSet), which Metacontroller updates with its list merge."""
    fix = f'add a container (named "{DEFAULT_CONTAINER}") with the training image'
    if template is None:
        problems.append(f"{path}.template: required; {fix}")
        return None
    check_template_metadata(f"{path}.template.metadata", template.get("metadata"), problems)
    pod_spec = template.get("spec")
    if not isinstance(pod_spec, Mapping):
        problems.append(f"{path}.template.spec: required, an object (a PodSpec); {fix}")
        return None
    spath = f"{path}.template.spec"
    containers = pod_spec.get("containers")
    if not isinstance(containers, list) or not containers:
        problems.append(f"{spath}.containers: required; {fix}")
        return None
    # A lone unnamed container was named chainer (_default_template).
    container_names, _ = check_containers(f"{spath}.containers", containers, problems,
                                          reserved=(KUBECTL_INIT_CONTAINER,),
                                          unnamed="required when a template has several containers; "
                                                  "name every container")
    check_pod_spec(spath, pod_spec, container_names, problems, reserved_containers=(KUBECTL_INIT_CONTAINER,),
                   reserved_volumes=(ASSETS_VOLUME, KUBECTL_VOLUME))
    for kind in ("containers", "initContainers"):
        listed = pod_spec.get(kind)
        for i, container in enumerate(listed if isinstance(listed, list) else []):
            if isinstance(container, Mapping):
                _check_container_extras(f"{spath}.{kind}[{i}]", container, problems)
                if merged:
                    check_merged_lists(f"{spath}.{kind}[{i}]", container, problems)
    if len(container_names) != len(containers):
        return None
    return DEFAULT_CONTAINER if DEFAULT_CONTAINER in container_names else container_names[0]


def _check_container_extras(path: str, container: Mapping[str, Any], problems: list[str]) -> None:
    """The fields the operator merges into (volumeMounts) or reads (resources) of a container."""
    mounts = container.get("volumeMounts")
    if mounts is not None and not (isinstance(mounts, list) and all(isinstance(m, Mapping) for m in mounts)):
        problems.append(f"{path}.volumeMounts: must be a list of {{name, mountPath}} objects")
    elif mounts:
        for j, mount in enumerate(mounts):
            if mount.get("mountPath") in (ASSETS_DIR, KUBECTL_DIR):
                problems.append(f"{path}.volumeMounts[{j}].mountPath: {mount['mountPath']} is where the "
                                f"operator mounts its launcher files; use another path")
    resources = optional_map(f"{path}.resources", container.get("resources"), problems,
                             expected="an object with limits and requests")
    for field_name in ("limits", "requests"):
        values = optional_map(f"{path}.resources.{field_name}", resources.get(field_name), problems,
                              expected="a map of resource name to quantity")
        for resource, value in values.items():
            try:
                parse_quantity(value)
            except ValueError as err:
                problems.append(f"{path}.resources.{field_name}[{show(resource)}]: {err}")


def _slots(path: str, mpi_config: Any, template: Mapping[str, Any] | None, distributed: bool,
           problems: list[str]) -> int:
    """mpiConfig.slots, else the GPU limit of the `chainer` container, else 1; never below 1."""
    if mpi_config is not None and not isinstance(mpi_config, Mapping):
        problems.append(f"{path}.mpiConfig: must be an object with slots")
        mpi_config = None
    given = (mpi_config or {}).get("slots")
    if given is not None:
        if not (is_non_negative_int(given, MAX_INT32) and given >= 1):
            problems.append(f"{path}.mpiConfig.slots: must be an integer from 1 to {MAX_INT32}, got {show(given)}")
            return 1
        return given
    if not distributed:
        return 1
    return max(_gpu_limit(template), 1)


def _gpu_limit(template: Mapping[str, Any] | None) -> int:
    pod_spec = (template or {}).get("spec")
    containers = pod_spec.get("containers") if isinstance(pod_spec, Mapping) else None
    for container in containers if isinstance(containers, list) else []:
        if isinstance(container, Mapping) and container.get("name") == DEFAULT_CONTAINER:
            resources = container.get("resources")
            limits = resources.get("limits") if isinstance(resources, Mapping) else None
            value = limits.get(GPU_RESOURCE) if isinstance(limits, Mapping) else None
            # A quantity: 4 in YAML, or "4" once the API server has normalised it.
            if isinstance(value, str) and value.isdigit() and len(value) <= len(str(MAX_INT32)):
                return min(int(value), MAX_INT32)
            return min(value, MAX_INT32) if isinstance(value, int) and is_non_negative_int(value) else 0
    return 0


def _check_names(name: str, worker_sets: Mapping[str, WorkerSet], problems: list[str]) -> None:
    if not name:
        problems.append("metadata.name: required")
        return
    if worker_sets and not DNS_1035_LABEL.match(name):
        problems.append(f"metadata.name: {name!r} must start with a letter and contain only lower-case "
                        f"letters, digits and '-' (with worker sets it prefixes Service names)")
        return
    # Without worker sets there are no Services, so a name the original ran (say "9lives") still runs.
    if not DNS_1123_LABEL.match(name):
        problems.append(f"metadata.name: {name!r} must contain only lower-case letters, digits and "
                        f"'-', and start and end with a letter or digit (it is a label value)")
        return
    master = names.master(name)
    if len(master) > MAX_LABEL_LENGTH:
        problems.append(f"metadata.name: too long: the master's host name {master!r} would have "
                        f"{len(master)} characters (the limit is {MAX_LABEL_LENGTH}); use a job name "
                        f"of at most {MAX_LABEL_LENGTH - (len(master) - len(name))} characters")
    for key, ws in worker_sets.items():
        path = f"spec.workerSets.{key}"
        if not DNS_1123_LABEL.match(key):
            problems.append(f"{path}: the worker set name {key!r} must contain only lower-case letters, "
                            f"digits and '-', and start and end with a letter or digit (it is part of "
                            f"StatefulSet and pod names)")
            continue
        statefulset = names.worker_set(name, key)
        if len(statefulset) > MAX_STATEFULSET_NAME:
            problems.append(f"{path}: names too long: the StatefulSet {statefulset!r} would have "
                            f"{len(statefulset)} characters (the limit is {MAX_STATEFULSET_NAME}, so that "
                            f"its pods' revision label fits in 63); shorten the job name or the worker "
                            f"set name by {_characters(len(statefulset) - MAX_STATEFULSET_NAME)}")
            continue
        host = names.worker_pod(name, key, max(ws.replicas - 1, 0))
        if len(host) > MAX_LABEL_LENGTH:
            problems.append(f"{path}: names too long: the host name {host!r} would have {len(host)} "
                            f"characters (the limit is {MAX_LABEL_LENGTH}); shorten the job name or the "
                            f"worker set name")


def _characters(count: int) -> str:
    return f"{count} character" + ("" if count == 1 else "s")
