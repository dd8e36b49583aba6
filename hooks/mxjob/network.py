"""How the replicas of a job find each other: one headless Service per replica, or one per job.

Per replica (the default, and the only layout before the opt-in existed): every replica has a
headless Service `<job>-<type>-<index>`, and that name is its host name in MX_CONFIG and
DMLC_PS_ROOT_URI. Users' scripts read those names, so it stays the default.

Per job (the opt-in, as JobSet does it): one headless Service named `<job>` selects every pod of
the job, and each pod gets `hostname: <job>-<type>-<index>` and `subdomain: <job>`, so the
cluster's DNS answers `<pod>.<job>` (in the pod's namespace, through its search path) and
`<pod>.<job>.<namespace>.svc[.<cluster domain>]`. Creating a job then takes one Service write
instead of one per replica (docs/mxjob-choices.md has the measurements).

The choice is an annotation on the MXJob, not a spec field: clients built on the published
kubeflow.org/v1 types keep every annotation when they write a job back, but drop a spec field
they do not know (docs/mxjob-choices.md). Plain values in and out, so spec.py can read it without an
import cycle.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hooks.mxjob.names import child_name
from hooks.shared.messages import show

SERVICE_ANNOTATION = "training.kubeflow.org/headless-service"
PER_REPLICA = "per-replica"
PER_JOB = "per-job"
SERVICE_LAYOUTS = (PER_REPLICA, PER_JOB)


def read_service_layout(meta: Mapping[str, Any], problems: list[str]) -> str:
    """The job's Service layout from its annotation; PER_REPLICA when absent. A value that is not
    one of SERVICE_LAYOUTS is a problem (a typo must not silently give the other layout)."""
    annotations = meta.get("annotations")
    value = annotations.get(SERVICE_ANNOTATION) if isinstance(annotations, Mapping) else None
    if value is None:
        return PER_REPLICA
    if value not in SERVICE_LAYOUTS:
        problems.append(f"metadata.annotations[{SERVICE_ANNOTATION}]: {show(value)} is not one of "
                        f"{', '.join(SERVICE_LAYOUTS)}")
        return PER_REPLICA
    return str(value)


def job_service_name(job_name: str) -> str:
    """Name of the one headless Service of a per-job layout: the job's own name, the pods' subdomain.

    It cannot collide with a child of the same job (those end in `-<index>` or `-cluster`).
    """
    return job_name


def replica_host(job_name: str, rtype: str, index: int, layout: str) -> str:
    """The host name other replicas reach one replica by (MX_CONFIG's url, DMLC_PS_ROOT_URI).

    Per job it is `<pod>.<job>`, relative like the per-replica Service name, so it resolves from
    the job's namespace whatever the cluster's domain is, and MX_CONFIG stays as short as it can.
    """
    pod = child_name(job_name, rtype, index)
    return f"{pod}.{job_service_name(job_name)}" if layout == PER_JOB else pod
