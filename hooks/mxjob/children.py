"""Builders of the desired children: the job's cluster ConfigMap, one Pod per replica index, the
headless Services (one per replica index, or one per job: hooks.mxjob.network), and the job's
PodGroup under gang scheduling."""
from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

from hooks.mxjob.env import CLUSTER_KEY, LAYOUT_SERVICE_KEY, ClusterWiring, env_builder, merge_env
from hooks.mxjob.names import (
    JOB_ATTEMPT_LABEL,
    LAYOUT_ANNOTATION,
    RESTART_ATTEMPT_LABEL,
    RUN_STARTED_ANNOTATION,
    child_name,
    job_labels,
    job_selector,
    labels_for,
    pod_group_name,
    selector_for,
)
from hooks.mxjob.network import PER_JOB, SERVICE_ANNOTATION, job_service_name
from hooks.mxjob.observed import Slot, is_live
from hooks.mxjob.spec import KUEUE_PRIORITY_KEY, MXJob, ReplicaSpec, SpecError
from hooks.mxjob.template import MAIN_CONTAINER, main_ports
from hooks.shared.conditions import rfc3339
from hooks.shared.gang import Gang, mark_pod, min_resources, podgroup_for
from hooks.shared.jsoncopy import copier
from hooks.shared.k8s import JSON
from hooks.shared.kueue import group_marks
from hooks.shared.memory import stamp, stamped_time
from hooks.shared.termination import with_log_fallback


def cluster_config_map(job: MXJob, wiring: ClusterWiring) -> JSON:
    """The ConfigMap every pod of the job reads its cluster map from (MXJOB_CLUSTER).

    Immutable: the layout of a job never changes after its pods exist, and the kubelet need not
    watch an immutable ConfigMap.
    """
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": wiring.config_map, "namespace": job.namespace, "labels": job_labels(job.name)},
        "immutable": True,
        "data": {CLUSTER_KEY: wiring.cluster},
    }


def pod_builder(job: MXJob, spec: ReplicaSpec, wiring: ClusterWiring, *,
                gang: Gang | None = None, kueue_pod_groups: bool = False,
                group_size: int | None = None) -> Callable[[int, int, int], JSON]:
    """The builder of the desired Pods of one replica type: the template with the operator's
    changes, nothing else. What every pod of the type shares is prepared once. `kueue_pod_groups`: the
    installation's Kueue (v0.11 and later) queues a queued job's pods as one plain-pod group per attempt,
    of `group_size` pods (the attempt's: hooks.mxjob.sync.attempt_group_size; the job's by default)."""
    template = spec.template
    meta = template.get("metadata") or {}
    template_labels = meta.get("labels") or {}
    annotations = meta.get("annotations")
    fresh_spec = copier(template.get("spec") or {})
    # ExitCode is the operator's policy, not the kubelet's: the pod must not be restarted in
    # place so that the operator sees the exit code and decides.
    restart_policy = "Never" if spec.restart_policy == "ExitCode" else spec.restart_policy
    operator_env_for = env_builder(job, spec.type, wiring=wiring)
    master = job.is_master(spec.type)
    containers = (template.get("spec") or {}).get("containers") or []
    main = next((c for c in containers if c.get("name") == MAIN_CONTAINER), None)
    ports = main_ports(main.get("ports"), spec.port) if main is not None else []
    # Per-job Service layout: the pod's own name under the job's Service is its DNS name
    # (`<pod>.<job>`), as a StatefulSet's pods are named under their governing Service.
    subdomain = job_service_name(job.name) if job.service_layout == PER_JOB else None

    def pod(index: int, attempt: int = 0, job_attempt: int = 0) -> JSON:
        pod_spec = fresh_spec()
        pod_spec["restartPolicy"] = restart_policy
        if subdomain is not None:
            pod_spec["hostname"] = child_name(job.name, spec.type, index)
            pod_spec["subdomain"] = subdomain
        operator_env = operator_env_for(index, job_attempt)
        for container in pod_spec["containers"]:
            container["env"] = merge_env(operator_env, container.get("env"))
            if container["name"] == MAIN_CONTAINER:
                container["ports"] = [dict(p) for p in ports]
                container.update(with_log_fallback(container))
        metadata: JSON = {
            "name": child_name(job.name, spec.type, index),
            "namespace": job.namespace,
            "labels": {**template_labels, **labels_for(job.name, spec.type, index, master=master)},
        }
        if attempt:
            # The restart count survives a stale status through the pods themselves.
            metadata["labels"][RESTART_ATTEMPT_LABEL] = str(attempt)
        if job_attempt:
            # So does the job's attempt: pods of an earlier one are told apart by it.
            metadata["labels"][JOB_ATTEMPT_LABEL] = str(job_attempt)
        metadata["annotations"] = {**(annotations or {}), LAYOUT_ANNOTATION: wiring.layout}
        if kueue_pod_groups and job.queue:
            group_labels, group_annotations = group_marks(
                job.queue, pod_group_name(job.name, job.uid, job_attempt),
                job.total_replicas if group_size is None else group_size)
            metadata["labels"].update(group_labels)
            metadata["annotations"].update(group_annotations)
            if job.priority_class:
                metadata["labels"][KUEUE_PRIORITY_KEY] = job.priority_class
        if gang is not None:
            mark_pod(gang, metadata, pod_spec, group=job.name, task=spec.name,
                     priority_class=job.run_policy.scheduling.priority_class)
        return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": pod_spec}

    return pod


def podgroup_for_job(job: MXJob, gang: Gang) -> JSON:
    """The job's PodGroup: every pod is a member unless schedulingPolicy.minAvailable says fewer.

    Raises SpecError when minResources must be computed and a template's resources cannot be read.
    """
    policy = job.run_policy.scheduling
    min_member = policy.min_available if policy.min_available is not None else job.total_replicas
    if policy.min_resources is not None:
        resources = {name: q.canonical() for name, q in sorted(policy.min_resources.items())}
    else:
        problems: list[str] = []
        # The first pods created: replica types in their fixed order, indexes ascending.
        members = [(f"{s.path or f'spec.mxReplicaSpecs.{rtype}'}.template.spec", s.template.get("spec") or {},
                    s.replicas) for rtype, s in job.replicas.items()]
        resources = min_resources(members, min_member, problems)
        if problems:
            raise SpecError(problems)
    return podgroup_for(gang, name=job.name, namespace=job.namespace, labels=job_labels(job.name),
                        min_member=min_member, policy=policy, resources=resources)


def services_for(job: MXJob, slots: Mapping[str, Slot], names: Sequence[str], *, started: str | None) -> list[JSON]:
    """The desired Services of a job whose lifecycle keeps the Services of the slots `names`:
    each one's own, or, per job, the job's one Service while any of them is kept; each says when
    the run began (`started`, the status's startTime: `run_started` reads it back)."""
    if job.service_layout == PER_JOB:
        services = [job_service_for(job)] if names else []
    else:
        builders = {rtype: service_builder(job, spec) for rtype, spec in job.replicas.items()}
        services = [builders[slots[n].rtype](slots[n].index) for n in names]
    if started is not None:
        stamp(services, RUN_STARTED_ANNOTATION, started)
    return services


def run_started(observed_services: Mapping[str, Any]) -> str | None:
    """When the job's run began, as its live Services keep it (hooks.shared.memory.stamped_time).

    The Services are created with the run (its first sync with children, or its resume: a
    suspended job has none) and kept while it runs, so every sync of one run reads the same time."""
    started = stamped_time(observed_services.values(), RUN_STARTED_ANNOTATION)
    return rfc3339(started) if started is not None else None


def service_names(job: MXJob, slots: Mapping[str, Slot]) -> Collection[str]:
    """The names of every Service the job may have in its layout."""
    return (job_service_name(job.name),) if job.service_layout == PER_JOB else slots.keys()


def services_by_slot(job: MXJob, slots: Mapping[str, Slot], observed: Mapping[str, Any]) -> Mapping[str, Any]:
    """The observed Services as the lifecycle reads them, by slot name: per job, the job's one
    Service stands for every slot's (the lifecycle keeps a finished job's Services by slot)."""
    if job.service_layout != PER_JOB:
        return observed
    service = observed.get(job_service_name(job.name))
    return dict.fromkeys(slots, service) if service is not None else {}


def service_layout_problems(job: MXJob, slots: Mapping[str, Slot], pods: Mapping[str, Any],
                            services: Mapping[str, Any]) -> list[str]:
    """The Service layout annotation changed after the job's pods were created: a live Service of the
    other layout, or a live pod built with the other one (its replica-layout annotation says it).
    Acting on it would give the running pods host names their peers no longer resolve."""
    per_job = job.service_layout == PER_JOB
    other_services = slots.keys() if per_job else (job_service_name(job.name),)
    changed = any(name in other_services for name, service in services.items() if is_live(service))
    for pod in pods.values():
        if changed:
            break
        layout = ((pod.get("metadata") or {}).get("annotations") or {}).get(LAYOUT_ANNOTATION) if is_live(pod) else None
        changed = isinstance(layout, str) and (f'"{LAYOUT_SERVICE_KEY}"' in layout) != per_job
    if not changed:
        return []
    return [f"metadata.annotations[{SERVICE_ANNOTATION}]: changed after the job's pods were created "
            f"(every pod has its peers' host names built in); restore it as it was, or delete the "
            f"MXJob and create it again"]


def job_service_for(job: MXJob) -> JSON:
    """The one headless Service of a per-job layout: it selects every pod of the job, so each pod's
    `<hostname>.<job>` resolves. No ports: a headless Service needs none for its DNS names, and the
    replica types' ports may share names."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": job_service_name(job.name), "namespace": job.namespace, "labels": job_labels(job.name)},
        "spec": {
            "clusterIP": "None",
            # As for a replica's Service: the scheduler's name must resolve before it is Ready.
            "publishNotReadyAddresses": True,
            "selector": job_selector(job.name),
        },
    }


def service_builder(job: MXJob, spec: ReplicaSpec) -> Callable[[int], JSON]:
    """The builder of the headless Services (one per replica index, its stable DNS name) of one
    replica type: the ports, the same for every index, are worked out once."""
    main = next(c for c in spec.template["spec"]["containers"] if c["name"] == MAIN_CONTAINER)
    ports = main_ports(main.get("ports"), spec.port)
    taken = {p["name"] for p in ports if p.get("name")}
    service_ports = []
    for p in ports:
        name = p.get("name")
        if not name:
            # An unnamed port gets a name (a Service with several ports needs them) that no
            # named port of the container already uses.
            name, n = f"port-{p['containerPort']}", 1
            while name in taken:
                n += 1
                name = f"port-{p['containerPort']}-{n}"
            taken.add(name)
        service_ports.append({"name": name, "port": p["containerPort"],
                              "protocol": p.get("protocol") or "TCP",
                              "targetPort": p["containerPort"]})
    master = job.is_master(spec.type)

    def service(index: int) -> JSON:
        return {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {
                "name": child_name(job.name, spec.type, index),
                "namespace": job.namespace,
                "labels": labels_for(job.name, spec.type, index, master=master),
            },
            "spec": {
                "clusterIP": "None",
                # The scheduler's name must resolve before its pod is Ready, or the other roles
                # cannot find it while it starts.
                "publishNotReadyAddresses": True,
                "selector": selector_for(job.name, spec.type, index),
                "ports": [dict(p) for p in service_ports],
            },
        }

    return service
