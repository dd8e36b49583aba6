"""The environment the operator wires into every container: MXJOB_CLUSTER, MX_CONFIG and DMLC_*.

The cluster map (one entry per replica) lives once per job, in the `<job>-cluster` ConfigMap. Each
container reads it into MXJOB_CLUSTER (a configMapKeyRef), and MX_CONFIG refers to it as
`$(MXJOB_CLUSTER)`, which the kubelet expands, so the process sees the same MX_CONFIG bytes as if
the whole map were inline while every pod spec (and so every sync request) stays small.
"""
from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hooks.mxjob.names import cluster_config_map_name
from hooks.mxjob.network import PER_REPLICA, replica_host
from hooks.mxjob.spec import MXJob
from hooks.mxjob.vocabulary import SCHEDULER, SERVER, WORKER
from hooks.shared.k8s import JSON

CLUSTER_ENV = "MXJOB_CLUSTER"
CLUSTER_KEY = "cluster"  # the ConfigMap's data key
ATTEMPT_ENV = "MXJOB_ATTEMPT"  # how many times the whole job has been restarted: 0, 1, ...

OPERATOR_ENV_NAMES = frozenset({
    CLUSTER_ENV, "MX_CONFIG", "DMLC_PS_ROOT_PORT", "DMLC_PS_ROOT_URI", "DMLC_NUM_SERVER",
    "DMLC_NUM_WORKER", "DMLC_ROLE", "DMLC_USE_KUBERNETES", "DMLC_WORKER_ID", ATTEMPT_ENV,
})

_CLUSTER_REF = f"$({CLUSTER_ENV})"
LAYOUT_SERVICE_KEY = "headlessService"  # in the replica-layout annotation of a per-job layout's pods


@dataclass(frozen=True)
class ClusterWiring:
    """The job-wide parts of MX_CONFIG, serialised once per sync rather than once per pod.

    `cluster` is the ConfigMap's value: the compact, sorted-keys JSON of the cluster map. `labels`
    is the JSON of the tuner labels as the process must see it (not yet escaped for the kubelet).
    `layout` is what the cluster map is made of, each type's count and port, small enough for
    every pod to carry (its replica-layout annotation): the same job name and layout give the
    same map, so the layout guard reads either.
    """

    config_map: str
    cluster: str
    labels: str
    layout: str

    def mx_config(self, rtype: str, index: int) -> str:
        """One pod's MX_CONFIG as written into its spec: `$(MXJOB_CLUSTER)` stands for the map.

        The kubelet turns `$$` into `$`, so every `$` of our own text is doubled; otherwise a
        tuner key holding `$(X)` would be expanded, or one ending in `$` would swallow the next
        character's meaning.
        """
        rest = self.labels + ',"task":' + _task(rtype, index) + "}"
        return '{"cluster":' + _CLUSTER_REF + ',"labels":' + rest.replace("$", "$$")

    def expanded_length(self, rtype: str, index: int) -> int:
        """Length of the MX_CONFIG the process sees (kubelet-expanded), without building it."""
        return (len('{"cluster":') + len(self.cluster) + len(',"labels":') + len(self.labels)
                + len(',"task":') + len(_task(rtype, index)) + 1)


def cluster_wiring(job: MXJob) -> ClusterWiring:
    """The job's cluster map and labels; sorted keys ("cluster" < "labels" < "task") as MXNet reads them."""
    cluster = {
        spec.name: [{"port": spec.port, "url": replica_host(job.name, rtype, i, job.service_layout)}
                    for i in range(spec.replicas)]
        for rtype, spec in job.replicas.items()
    }
    labels = {spec.name: spec.tuner_key for spec in job.replicas.values()}
    layout: dict[str, object] = {spec.name: {"port": spec.port, "replicas": spec.replicas}
                                 for spec in job.replicas.values()}
    if job.service_layout != PER_REPLICA:
        # The host names in the map change with the Service layout, so a pod tells its layout
        # too (no replica type is called this; left out by default, so older pods still match).
        layout[LAYOUT_SERVICE_KEY] = job.service_layout
    return ClusterWiring(config_map=cluster_config_map_name(job.name), cluster=_compact(cluster),
                         labels=_compact(labels), layout=_compact(layout))


def env_for(job: MXJob, rtype: str, index: int, *, wiring: ClusterWiring, attempt: int = 0) -> list[JSON]:
    """Operator env entries of one pod, in the documented order (see env_builder)."""
    return env_builder(job, rtype, wiring=wiring)(index, attempt)


def env_builder(job: MXJob, rtype: str, *, wiring: ClusterWiring) -> Callable[[int, int], list[JSON]]:
    """The operator env entries of the pods of one replica type, by index and job attempt, in the documented order.

    MXJOB_CLUSTER comes first: the kubelet expands `$(NAME)` only with entries defined earlier.
    What every pod of the type shares is worked out once; each call returns fresh entries.
    """
    shared: list[tuple[str, str]] = []
    scheduler = job.replicas.get(SCHEDULER)
    # Without a Scheduler there is nothing to point at; an empty value would be dropped by the
    # API server and make the pod differ from what we applied.
    if scheduler is not None and scheduler.replicas > 0:
        shared.append(("DMLC_PS_ROOT_PORT", str(scheduler.port)))
        shared.append(("DMLC_PS_ROOT_URI", replica_host(job.name, SCHEDULER, 0, job.service_layout)))
    shared.extend(layout_env(job).items())
    shared.append(("DMLC_ROLE", rtype.lower()))
    shared.append(("DMLC_USE_KUBERNETES", "1"))
    worker = rtype == WORKER

    def env(index: int, attempt: int = 0) -> list[JSON]:
        entries: list[JSON] = [
            {"name": CLUSTER_ENV, "valueFrom": {"configMapKeyRef": {"name": wiring.config_map, "key": CLUSTER_KEY}}},
            {"name": "MX_CONFIG", "value": wiring.mx_config(rtype, index)},
        ]
        entries += [{"name": name, "value": value} for name, value in shared]
        if worker:
            entries.append({"name": "DMLC_WORKER_ID", "value": str(index)})
        entries.append({"name": ATTEMPT_ENV, "value": str(attempt)})
        return entries

    return env


def layout_env(job: MXJob) -> dict[str, str]:
    """The env entries that carry the job's replica counts, by name (the layout guard reads them back)."""
    return {"DMLC_NUM_SERVER": str(_count(job, SERVER)), "DMLC_NUM_WORKER": str(_count(job, WORKER))}


def merge_env(operator_env: list[JSON], user_env: list[Any]) -> list[Any]:
    """Operator entries first, then the user's entries that do not collide with them.

    Operator entries win over user entries of the same name. They come first so that user
    entries can refer to them with $(DMLC_WORKER_ID)-style expansion.
    """
    return operator_env + [e for e in user_env or []
                           if not (isinstance(e, dict) and e.get("name") in OPERATOR_ENV_NAMES)]


def _task(rtype: str, index: int) -> str:
    return f'{{"index":{index},"type":"{rtype.lower()}"}}'


def _compact(value: object) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def _count(job: MXJob, rtype: str) -> int:
    spec = job.replicas.get(rtype)
    return spec.replicas if spec is not None else 0
