"""One headless Service per job (the `training.kubeflow.org/headless-service: per-job` opt-in).

Each pod gets `hostname: <pod>` and `subdomain: <job>`, so `<pod>.<job>` is its DNS name; every
host name the operator writes (MX_CONFIG's urls, DMLC_PS_ROOT_URI) must be such a name, of a pod
the job's one Service selects. Without the annotation (or with `per-replica`) the answer is the
one every existing manifest gets (the golden tests hold its bytes).
"""
from __future__ import annotations

import json

import pytest
from helpers.mcsim import Sim, mxjob, running

from hooks.mxjob.layout import MAX_ARG_STRLEN
from hooks.mxjob.network import PER_JOB, PER_REPLICA, SERVICE_ANNOTATION
from localcluster.node.podenv import resolve_env


def job(layout: str | None = PER_JOB, name: str = "mx", **replicas: int) -> dict:
    parent = mxjob(name, replicas=replicas or {"Scheduler": 1, "Server": 2, "Worker": 3})
    if layout is not None:
        parent["metadata"]["annotations"] = {SERVICE_ANNOTATION: layout}
    return parent


def process_env(sim: Sim) -> dict[str, dict[str, str]]:
    """Each pod's mxnet env as its process sees it (the kubelet's resolution of the ConfigMap ref)."""
    config_maps = sim.config_maps
    return {name: resolve_env(pod["spec"]["containers"][0], pod, config_map=config_maps.get, runtime={})
            for name, pod in sim.pods.items()}


def selects(service: dict, pod: dict) -> bool:
    labels = pod["metadata"].get("labels") or {}
    return all(labels.get(k) == v for k, v in service["spec"]["selector"].items())


def test_one_headless_service_selects_every_pod_and_each_pod_is_named_under_it():
    sim = running(job())
    assert list(sim.services) == ["mx"]
    service = sim.services["mx"]
    assert service["spec"]["clusterIP"] == "None" and service["spec"]["publishNotReadyAddresses"] is True
    assert len(sim.pods) == 6
    for name, pod in sim.pods.items():
        assert (pod["spec"]["hostname"], pod["spec"]["subdomain"]) == (name, "mx")
        assert selects(service, pod)


def test_every_host_name_the_processes_see_is_a_pod_under_the_job_service():
    sim = running(job())
    dns_names = {f"{p['spec']['hostname']}.{p['spec']['subdomain']}" for p in sim.pods.values()}
    for name, env in process_env(sim).items():
        assert env["DMLC_PS_ROOT_URI"] == "mx-scheduler-0.mx"
        config = json.loads(env["MX_CONFIG"])
        urls = {entry["url"] for entries in config["cluster"].values() for entry in entries}
        assert urls == dns_names, name


def test_creating_a_job_takes_one_service_instead_of_one_per_replica():
    per_job, per_replica = Sim(job(Worker=40)), Sim(job(None, Worker=40))
    per_job.sync()
    per_replica.sync()
    assert (len(per_job.pods), len(per_job.services), len(per_job.config_maps)) == (40, 1, 1)
    assert (len(per_replica.pods), len(per_replica.services), len(per_replica.config_maps)) == (40, 40, 1)


def test_per_replica_or_no_annotation_answers_as_before():
    absent, explicit = Sim(job(None)), Sim(job(PER_REPLICA))
    assert absent.sync() == explicit.sync()
    assert set(absent.services) == set(absent.pods)
    assert all("hostname" not in pod["spec"] for pod in absent.pods.values())


@pytest.mark.parametrize("value", ["PerJob", "true", ""])
def test_any_other_value_fails_validation_naming_the_annotation(value):
    sim = Sim(job(value))
    sim.sync()
    assert sim.state() == "Failed" and not sim.pods and not sim.services
    assert f"metadata.annotations[{SERVICE_ANNOTATION}]" in sim.condition("Failed")["message"]


@pytest.mark.parametrize("before, after", [(None, PER_JOB), (PER_JOB, None), (PER_JOB, PER_REPLICA)])
def test_changing_the_layout_of_a_running_job_is_refused_and_keeps_every_child(before, after):
    sim = running(job(before))
    pods, services = sim.pods, sim.services

    def set_layout(parent: dict) -> None:
        parent["metadata"]["annotations"] = {SERVICE_ANNOTATION: after} if after else {}

    sim.change("kubeflow.org/v1", "MXJob", "mx", set_layout)
    sim.sync()
    assert f"metadata.annotations[{SERVICE_ANNOTATION}]: changed after" in sim.status["specError"]
    assert sim.pods == pods and sim.services == services


@pytest.mark.parametrize("policy, kept", [("None", True), ("All", False)])
def test_a_finished_job_keeps_its_service_while_it_keeps_pods(policy, kept):
    sim = running(job(Scheduler=1, Server=1, Worker=2))
    sim.edit({"runPolicy": {"cleanPodPolicy": policy}})
    sim.sync()
    for pod in sim.pods:
        sim.set_phase(pod, "Succeeded", exit_code=0)
    sim.sync()
    sim.sync()
    assert sim.state() == "Succeeded"
    assert bool(sim.pods) is kept and bool(sim.services) is kept


def test_the_size_limit_counts_the_longer_host_names():
    """`<pod>.<job>` is longer than `<pod>`, so fewer replicas fit Linux's limit on MX_CONFIG."""
    workers = 2000
    per_replica, per_job = (Sim(job(layout, "imagenet-resnet50", Scheduler=1, Server=1, Worker=workers))
                            for layout in (None, PER_JOB))
    per_replica.sync()
    per_job.sync()
    assert per_replica.state() != "Failed"
    assert per_job.state() == "Failed"
    assert f"{MAX_ARG_STRLEN} bytes" in per_job.condition("Failed")["message"]


def test_a_templates_own_hostname_and_subdomain_give_way_to_the_layout():
    parent = job(Worker=1)
    parent["spec"]["mxReplicaSpecs"]["Worker"]["template"]["spec"].update(hostname="mine", subdomain="elsewhere")
    sim = Sim(parent)
    sim.sync()
    spec = sim.pods["mx-worker-0"]["spec"]
    assert (spec["hostname"], spec["subdomain"]) == ("mx-worker-0", "mx")
