"""Builders of the desired children: one Pod and one headless Service per replica index."""
from __future__ import annotations

from typing import Any

from hooks.mxjob.env import env_for, merge_env
from hooks.mxjob.names import child_name, labels_for, selector_for
from hooks.mxjob.spec import MAIN_CONTAINER, PORT_NAME, MXJob, ReplicaSpec
from hooks.shared.jsoncopy import json_copy
from hooks.shared.k8s import JSON


def pod_for(job: MXJob, spec: ReplicaSpec, index: int, *, prefix: str) -> JSON:
    """The desired Pod of one replica: the template with the operator's changes, nothing else."""
    template = spec.template
    meta = template.get("metadata") or {}
    pod_spec = json_copy(template.get("spec") or {})
    # ExitCode is the operator's policy, not the kubelet's: the pod must not be restarted in
    # place so that the operator sees the exit code and decides.
    pod_spec["restartPolicy"] = "Never" if spec.restart_policy == "ExitCode" else spec.restart_policy
    operator_env = env_for(job, spec.type, index, prefix=prefix)
    for container in pod_spec["containers"]:
        container["env"] = merge_env(operator_env, container.get("env"))
        if container["name"] == MAIN_CONTAINER:
            container["ports"] = _ports_with_mxjob_port(container.get("ports"), spec.port)

    metadata: JSON = {
        "name": child_name(job.name, spec.type, index),
        "namespace": job.namespace,
        "labels": {**(meta.get("labels") or {}), **labels_for(job, spec.type, index)},
    }
    if meta.get("annotations"):
        metadata["annotations"] = dict(meta["annotations"])
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": pod_spec}


def service_for(job: MXJob, spec: ReplicaSpec, index: int) -> JSON:
    """The headless Service that gives one replica its stable DNS name."""
    main = next(c for c in spec.template["spec"]["containers"] if c["name"] == MAIN_CONTAINER)
    ports = _ports_with_mxjob_port(main.get("ports"), spec.port)
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
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": child_name(job.name, spec.type, index),
            "namespace": job.namespace,
            "labels": labels_for(job, spec.type, index),
        },
        "spec": {
            "clusterIP": "None",
            # The scheduler's name must resolve before its pod is Ready, or the other roles
            # cannot find it while it starts.
            "publishNotReadyAddresses": True,
            "selector": selector_for(job.name, spec.type, index),
            "ports": service_ports,
        },
    }


def _ports_with_mxjob_port(ports: Any, port: int) -> list:
    """The mxnet container's ports plus mxjob-port, unless it is there by name or by number.

    A user port already on the same number/TCP stays as it is: adding mxjob-port beside it would
    give the Service two ports with one number and protocol, which the API server refuses.
    """
    ports = [dict(p) for p in ports or []]
    if not any(p.get("name") == PORT_NAME or (p.get("containerPort") == port
                                              and (p.get("protocol") or "TCP") == "TCP")
               for p in ports):
        ports.append({"name": PORT_NAME, "containerPort": port})
    return ports
