"""The layout guard: an edit of mxReplicaSpecs or jobMode that got past admission never touches a started job.

The request shows that a job has started through its cluster ConfigMap, and also through its live
children: a pod outside the new layout, or one built with another layout (its replica-layout
annotation, or the DMLC_NUM_* entries of a pod from before it), or a Service outside the new
layout. Any one is enough, so a job whose ConfigMap is not observed (deleted, terminating, or
older than the ConfigMap) is protected too (tests/fuzz_repro/turn3/02* and d552d2e/02* are the
reproducers).
"""
from __future__ import annotations

import copy
from datetime import UTC, datetime

from helpers.mcsim import Sim, mxjob

from hooks.mxjob.names import LAYOUT_ANNOTATION
from hooks.mxjob.sync import sync_mxjob

NOW = datetime(2026, 3, 1, 12, 5, tzinfo=UTC)


def _job(workers: int, replicas: dict | None = None, job_mode: str | None = None) -> dict:
    layout = replicas or {"Worker": workers}
    spec: dict = {"mxReplicaSpecs": {rtype: {"replicas": n, "template": {"spec": {
        "containers": [{"name": "mxnet", "image": "mxnet/python:1.9.1"}]}}} for rtype, n in layout.items()}}
    if job_mode:
        spec["jobMode"] = job_mode
    return {"apiVersion": "kubeflow.org/v1", "kind": "MXJob",
            "metadata": {"name": "j", "namespace": "default", "uid": "u"},
            "spec": spec, "status": {"startTime": "2026-03-01T12:00:00Z"}}


def _started(workers: int, replicas: dict | None = None, job_mode: str | None = None) -> dict:
    """The request of a job with running pods, as its own first answer made them."""
    request = {"parent": _job(workers, replicas, job_mode),
               "children": {"Pod.v1": {}, "Service.v1": {}, "ConfigMap.v1": {}}}
    for child in sync_mxjob(request, now=NOW)["children"]:
        key = f"{child['kind']}.v1"
        observed = copy.deepcopy(child)
        observed["metadata"]["uid"] = f"uid-{child['metadata']['name']}"
        if child["kind"] == "Pod":
            observed["status"] = {"phase": "Running"}
        request["children"][key][child["metadata"]["name"]] = observed
    return request


def _edited(request: dict, workers: int, *, drop_config_map: bool) -> dict:
    edited = copy.deepcopy(request)
    edited["parent"]["spec"]["mxReplicaSpecs"]["Worker"]["replicas"] = workers
    if drop_config_map:
        edited["children"]["ConfigMap.v1"] = {}
    return edited


def _kept_everything(request: dict) -> bool:
    answer = sync_mxjob(request, now=NOW)
    observed = {(k.split(".")[0], n) for k, objs in request["children"].items() for n in objs}
    return ("changed after the job's pods were created" in answer["status"].get("specError", "")
            and {(c["kind"], c["metadata"]["name"]) for c in answer["children"]} == observed)


def test_more_workers_without_an_observed_config_map_is_refused_by_the_pods_counts():
    # Every running pod keeps its name in the new layout; only its DMLC_NUM_WORKER tells.
    assert _kept_everything(_edited(_started(1), 2, drop_config_map=True))


def test_fewer_workers_without_an_observed_config_map_is_refused_by_a_pod_outside_the_layout():
    assert _kept_everything(_edited(_started(2), 1, drop_config_map=True))


def test_the_observed_config_map_alone_still_refuses_an_edit():
    request = _edited(_started(1), 2, drop_config_map=False)
    request["children"]["Pod.v1"] = {}
    assert _kept_everything(request)


def test_terminating_children_outside_the_layout_do_not_count():
    # Nothing live tells of the old layout: the pod and Service of the removed replica are on their
    # way out, and the remaining pod carries no layout (a pod from before the annotation, env cleared).
    request = _edited(_started(2), 1, drop_config_map=True)
    for key in ("Pod.v1", "Service.v1"):
        request["children"][key]["j-worker-1"]["metadata"]["deletionTimestamp"] = "2026-03-01T12:04:00Z"
    pod = request["children"]["Pod.v1"]["j-worker-0"]
    pod["spec"]["containers"][0]["env"] = []
    del pod["metadata"]["annotations"][LAYOUT_ANNOTATION]
    answer = sync_mxjob(request, now=NOW)
    assert "specError" not in answer["status"]


def test_a_live_service_outside_the_layout_refuses_the_edit_when_its_pod_is_terminating():
    # MXTune pods carry no DMLC_NUM_* counts; a pod from before the layout annotation shows nothing,
    # but the Service of the removed replica outlives its terminating pod (d552d2e/02b).
    request = _edited(_started(2), 1, drop_config_map=True)
    request["children"]["Pod.v1"]["j-worker-1"]["metadata"]["deletionTimestamp"] = "2026-03-01T12:04:00Z"
    pod = request["children"]["Pod.v1"]["j-worker-0"]
    pod["spec"]["containers"][0]["env"] = []
    del pod["metadata"]["annotations"][LAYOUT_ANNOTATION]
    assert _kept_everything(request)


MXTUNE = {"TunerTracker": 1, "TunerServer": 2, "Tuner": 1}


def _mxtune_edited(servers: int, *, port: int | None = None) -> dict:
    request = _started(0, MXTUNE, "MXTune")
    request["children"]["ConfigMap.v1"] = {}
    spec = request["parent"]["spec"]["mxReplicaSpecs"]["TunerServer"]
    spec["replicas"] = servers
    if port is not None:
        spec["template"]["spec"]["containers"][0]["ports"] = [{"name": "mxjob-port", "containerPort": port}]
    return request


def test_an_mxtune_job_is_refused_any_layout_edit_by_its_pods_layout_annotation():
    # Every pod keeps its name in the new layout, no Service is outside it, and MXTune pods have no
    # DMLC_NUM_*: only the layout each pod was built with tells. More servers, fewer with the removed
    # one gone, or another port: each would give the running tuner another cluster map.
    assert _kept_everything(_mxtune_edited(3))
    assert _kept_everything(_mxtune_edited(2, port=9999))
    fewer = _mxtune_edited(1)
    for key in ("Pod.v1", "Service.v1"):
        del fewer["children"][key]["j-tunerserver-1"]
    assert _kept_everything(fewer)


def test_every_pod_carries_the_layout_it_was_built_with():
    request = _started(0, MXTUNE, "MXTune")
    layouts = {pod["metadata"]["annotations"][LAYOUT_ANNOTATION] for pod in request["children"]["Pod.v1"].values()}
    assert layouts == {'{"tuner":{"port":9091,"replicas":1},"tunerserver":{"port":9091,"replicas":2},'
                       '"tunertracker":{"port":9091,"replicas":1}}'}


def test_an_unchanged_job_is_not_refused():
    request = _started(2)
    assert "specError" not in sync_mxjob(request, now=NOW)["status"]
    request["children"]["ConfigMap.v1"] = {}
    assert "specError" not in sync_mxjob(request, now=NOW)["status"]


def test_a_port_moved_while_suspended_is_refused_at_resume():
    # The CRD lets a suspended job's templates change (Kueue writes into them), but a replica's
    # mxjob-port is in the cluster map every pod was (or will be) wired with: the hook refuses it.
    sim = Sim(mxjob(replicas={"Scheduler": 1, "Server": 1, "Worker": 1}, runPolicy={"suspend": True}))
    sim.sync()
    sim.sync()
    assert sim.state() == "Suspended" and "mx-cluster" in sim.config_maps

    def move_port_and_resume(job: dict) -> None:
        container = job["spec"]["mxReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
        container["ports"] = [{"name": "mxjob-port", "containerPort": 9999}]
        job["spec"]["runPolicy"]["suspend"] = False

    sim.change("kubeflow.org/v1", "MXJob", "mx", move_port_and_resume)
    sim.sync()
    sim.sync()
    assert sim.pods == {}
    assert "changed after the job's pods were created" in sim.status["specError"]
