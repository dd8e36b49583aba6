"""The layout guard: refuse a job its pods could never run, and an edit of its layout once it runs.

Both are found only with the whole job in view (the cluster map it wires, the children observed),
so they are checked here, after the spec itself (hooks.mxjob.spec), and raise the same SpecError.
"""
from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from hooks.mxjob.children import service_layout_problems, service_names
from hooks.mxjob.env import CLUSTER_KEY, ClusterWiring, layout_env
from hooks.mxjob.names import LAYOUT_ANNOTATION
from hooks.mxjob.observed import Observed, Slot
from hooks.mxjob.observed import is_live as _live  # one rule for "live", shared with children.py
from hooks.mxjob.spec import MXJob, SpecError

MAX_ARG_STRLEN = 131072  # Linux: 32 pages, the longest single "NAME=value" string execve accepts


def check_layout(job: MXJob, wiring: ClusterWiring, slots: Mapping[str, Slot], observed: Observed) -> None:
    """Raise SpecError when the job's pods could never start, or its layout changed since they were created."""
    problems = (size_problems(job, wiring) or service_layout_problems(job, slots, observed.pods, observed.services)
                or changed_since_created(job, wiring, slots, observed))
    if problems:
        raise SpecError(problems)


def size_problems(job: MXJob, wiring: ClusterWiring) -> list[str]:
    """Limits a job's pods would hit outside our control: they could never start, so refuse them.

    The process sees MX_CONFIG with the whole cluster map expanded into it, so it grows with the
    job. Linux refuses to exec a process with one environment string over MAX_ARG_STRLEN. (The
    ConfigMap holding the map, limited to 1 MiB, and the pods, which now only refer to it, stay
    far below the API server's limits at any size this admits.)
    """
    longest = max(wiring.expanded_length(t, s.replicas - 1) for t, s in job.replicas.items())
    env_bytes = len("MX_CONFIG=") + longest + 1
    if env_bytes <= MAX_ARG_STRLEN:
        return []
    total = sum(s.replicas for s in job.replicas.values())
    fits = total * MAX_ARG_STRLEN // env_bytes
    return [f"spec.mxReplicaSpecs: {total} replicas make each pod's MX_CONFIG "
            f"{env_bytes} bytes, over Linux's limit of {MAX_ARG_STRLEN} bytes for one "
            f"environment variable, so no pod could start; use at most about {fits} "
            f"replicas (fewer with a longer job name)"]


def changed_since_created(job: MXJob, wiring: ClusterWiring, slots: Mapping[str, Slot],
                          observed: Observed) -> list[str]:
    """Catch an edit of mxReplicaSpecs or jobMode that got past admission (no CEL on the server).

    Acting on a changed layout would delete pods and Services (fewer replicas) or mix two cluster
    layouts (more), so any sign in the request that the job was started with another layout
    refuses it:
    - the observed `<job>-cluster` ConfigMap holds another cluster map than the spec gives now;
    - a live pod (not terminating) has a name outside the new layout, or carries another layout:
      its replica-layout annotation, or, on a pod from before that annotation, its
      DMLC_NUM_SERVER or DMLC_NUM_WORKER;
    - a live Service has a name outside the new layout (a Service outlives its terminating pod,
      and an MXTune pod has no DMLC_NUM_* of its own).
    The children are checked too because the ConfigMap is not always observed while pods run:
    deleted by hand, terminating, or a job created before the ConfigMap existed.
    """
    if (_config_map_differs(wiring, observed.config_maps) or _pods_differ(job, wiring, slots, observed.pods)
            or _services_differ(service_names(job, slots), observed.services)):
        return ["spec.mxReplicaSpecs: changed after the job's pods were created (each pod "
                "has the replica layout built in); restore the previous mxReplicaSpecs "
                "and jobMode, or delete the MXJob and create it again"]
    return []


def _services_differ(names: Collection[str], services: Mapping[str, Any]) -> bool:
    return any(name not in names for name, service in services.items() if _live(service))


def _config_map_differs(wiring: ClusterWiring, config_maps: Mapping[str, Any]) -> bool:
    observed = config_maps.get(wiring.config_map)
    if not _live(observed):
        return False
    data = observed.get("data")
    return not (isinstance(data, Mapping) and data.get(CLUSTER_KEY) == wiring.cluster)


def _pods_differ(job: MXJob, wiring: ClusterWiring, slots: Mapping[str, Slot], pods: Mapping[str, Any]) -> bool:
    counts = layout_env(job)
    for name, pod in pods.items():
        if not _live(pod):
            continue
        if name not in slots:
            return True
        layout = ((pod.get("metadata") or {}).get("annotations") or {}).get(LAYOUT_ANNOTATION)
        if layout is not None:
            if layout != wiring.layout:
                return True
            continue
        for container in (pod.get("spec") or {}).get("containers") or []:
            for entry in (container.get("env") or []) if isinstance(container, Mapping) else []:
                if (isinstance(entry, Mapping) and entry.get("name") in counts
                        and "value" in entry and entry["value"] != counts[entry["name"]]):
                    return True
    return False
