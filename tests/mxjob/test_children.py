"""Pods and Services the sync asks for: names, labels, env wiring, ports, and Kubernetes' own schemas."""
from __future__ import annotations

import copy
import json
from pathlib import Path

import kubernetes_validate
import pytest
from helpers import yamlio
from helpers.mcsim import T0, mxjob

from hooks.mxjob.sync import sync_mxjob
from localcluster.node.podenv import resolve_env

ROOT = Path(__file__).resolve().parents[2]
KUBERNETES_VERSION = "1.34"


def first_sync(parent: dict) -> dict:
    return sync_mxjob({"parent": parent, "children": {"Pod.v1": {}, "Service.v1": {}, "ConfigMap.v1": {}}}, now=T0)


def sync_with_pods(parent: dict) -> dict:
    """The first answer that creates the job's pods: the first sync's, or for a job with
    runPolicy.progress the next one's, once its ServiceAccount is observed (docs/progress.md)."""
    from helpers.mcsim import Sim

    sim = Sim({**parent, "metadata": {"uid": "uid-example", "generation": 1, **parent["metadata"]}})
    answer = sim.sync()
    return answer if any(c["kind"] == "Pod" for c in answer["children"]) else sim.sync()


def child(answer: dict, kind: str, name: str) -> dict:
    return next(c for c in answer["children"] if c["kind"] == kind and c["metadata"]["name"] == name)


def env_of(pod: dict, container: str = "mxnet") -> list[dict]:
    return next(c for c in pod["spec"]["containers"] if c["name"] == container)["env"]


def kubelet_env(pod: dict, config_map: dict, container: str = "mxnet") -> dict[str, str]:
    """The env the container's process gets, resolved and expanded as the kubelet does."""
    main = next(c for c in pod["spec"]["containers"] if c["name"] == container)
    by_name = {config_map["metadata"]["name"]: config_map}
    return resolve_env(main, pod, config_map=by_name.get, runtime={})


def test_worker_env_is_wired_in_the_documented_order():
    answer = first_sync(mxjob("dist", replicas={"Scheduler": 1, "Server": 2, "Worker": 2}))
    env = env_of(child(answer, "Pod", "dist-worker-1"))
    assert [e["name"] for e in env] == ["MXJOB_CLUSTER", "MX_CONFIG", "DMLC_PS_ROOT_PORT", "DMLC_PS_ROOT_URI",
                                        "DMLC_NUM_SERVER", "DMLC_NUM_WORKER", "DMLC_ROLE",
                                        "DMLC_USE_KUBERNETES", "DMLC_WORKER_ID", "MXJOB_ATTEMPT"]
    assert env[0] == {"name": "MXJOB_CLUSTER",
                      "valueFrom": {"configMapKeyRef": {"name": "dist-cluster", "key": "cluster"}}}
    values = {e["name"]: e["value"] for e in env[1:]}
    assert values["DMLC_PS_ROOT_URI"] == "dist-scheduler-0"
    assert (values["DMLC_PS_ROOT_PORT"], values["DMLC_NUM_SERVER"], values["DMLC_NUM_WORKER"],
            values["DMLC_ROLE"], values["DMLC_USE_KUBERNETES"], values["DMLC_WORKER_ID"]) == \
        ("9091", "2", "2", "worker", "1", "1")


def test_mx_config_expands_to_compact_sorted_json_with_every_replica():
    answer = first_sync(mxjob("dist", replicas={"Scheduler": 1, "Server": 1, "Worker": 2}))
    pod = child(answer, "Pod", "dist-server-0")
    config_map = child(answer, "ConfigMap", "dist-cluster")
    expected = {
        "cluster": {
            "scheduler": [{"port": 9091, "url": "dist-scheduler-0"}],
            "server": [{"port": 9091, "url": "dist-server-0"}],
            "worker": [{"port": 9091, "url": "dist-worker-0"}, {"port": 9091, "url": "dist-worker-1"}],
        },
        "labels": {"scheduler": "", "server": "", "worker": ""},
        "task": {"index": 0, "type": "server"},
    }
    assert config_map["data"] == {"cluster": json.dumps(expected["cluster"], sort_keys=True, separators=(",", ":"))}
    raw = next(e["value"] for e in env_of(pod) if e["name"] == "MX_CONFIG")
    assert raw.startswith('{"cluster":$(MXJOB_CLUSTER),"labels":')
    assert kubelet_env(pod, config_map)["MX_CONFIG"] == json.dumps(expected, sort_keys=True, separators=(",", ":"))


def test_the_cluster_config_map_is_immutable_and_labelled_for_the_job():
    answer = first_sync(mxjob("dist", replicas={"Scheduler": 1, "Server": 1, "Worker": 2}))
    config_map = child(answer, "ConfigMap", "dist-cluster")
    assert config_map["immutable"] is True
    assert config_map["metadata"] == {"name": "dist-cluster", "namespace": "ns", "labels": {
        "training.kubeflow.org/operator-name": "mxjob-controller", "training.kubeflow.org/job-name": "dist",
        "group-name": "kubeflow.org", "job-name": "dist"}}
    pod_labels = child(answer, "Pod", "dist-worker-0")["metadata"]["labels"]
    assert config_map["metadata"]["labels"].items() <= pod_labels.items()
    assert [c["kind"] for c in answer["children"]].count("ConfigMap") == 1


@pytest.mark.parametrize("key", ["plain", "cost$5", "$(HOME)", "$$", "ends-with-$", "$(MXJOB_CLUSTER)"])
def test_a_dollar_in_a_tuner_key_reaches_the_process_unchanged(key):
    answer = first_sync(mxjob("tune", jobMode="MXTune", replicas={
        "TunerTracker": 1, "Tuner": 1,
        "TunerServer": {"replicas": 1, "template": {"metadata": {"annotations": {"tuner-server-key": key}},
                                                    "spec": {"containers": [{"name": "mxnet", "image": "i"}]}}}}))
    env = kubelet_env(child(answer, "Pod", "tune-tunerserver-0"), child(answer, "ConfigMap", "tune-cluster"))
    assert json.loads(env["MX_CONFIG"])["labels"]["tunerserver"] == key


def test_scheduler_and_server_have_no_worker_id():
    answer = first_sync(mxjob())
    for name in ("mx-scheduler-0", "mx-server-0"):
        assert "DMLC_WORKER_ID" not in {e["name"] for e in env_of(child(answer, "Pod", name))}


@pytest.mark.parametrize("replicas,mode", [
    ({"Worker": 2}, "MXTrain"),
    ({"TunerTracker": 1, "TunerServer": 1, "Tuner": 1}, "MXTune"),
], ids=["worker-only", "tune"])
def test_no_scheduler_means_no_root_uri_or_port(replicas, mode):
    answer = first_sync(mxjob(jobMode=mode, replicas=replicas))
    for pod in (c for c in answer["children"] if c["kind"] == "Pod"):
        names = {e["name"] for e in env_of(pod)}
        assert not names & {"DMLC_PS_ROOT_URI", "DMLC_PS_ROOT_PORT"}
        assert all(e.get("value") != "" for e in env_of(pod))


def test_operator_env_replaces_user_entries_in_every_container_but_init_containers():
    tmpl = {"spec": {
        "initContainers": [{"name": "init", "image": "busybox"}],
        "containers": [
            {"name": "mxnet", "image": "i", "env": [{"name": "DMLC_ROLE", "value": "mine"},
                                                    {"name": "KEEP", "value": "$(DMLC_ROLE)"}]},
            {"name": "sidecar", "image": "s"}]}}
    answer = first_sync(mxjob(replicas={"Worker": {"template": tmpl}}))
    pod = child(answer, "Pod", "mx-worker-0")
    env = env_of(pod)
    assert [e["value"] for e in env if e["name"] == "DMLC_ROLE"] == ["worker"]
    assert env[-1] == {"name": "KEEP", "value": "$(DMLC_ROLE)"}  # after ours, so it can refer to them
    assert any(e["name"] == "MX_CONFIG" for e in env_of(pod, "sidecar"))
    assert "env" not in pod["spec"]["initContainers"][0]


def test_template_is_not_mutated():
    parent = mxjob(replicas={"Scheduler": 1, "Server": 1,
                             "Worker": {"replicas": 2, "restartPolicy": "ExitCode"}})
    before = copy.deepcopy(parent)
    first_sync(parent)
    assert parent == before


@pytest.mark.parametrize("policy,pod_policy", [
    ("Never", "Never"), ("OnFailure", "OnFailure"), ("Always", "Always"), ("ExitCode", "Never"),
], ids=lambda v: v)
def test_restart_policy_mapping(policy, pod_policy):
    answer = first_sync(mxjob(replicas={"Worker": {"replicas": 1, "restartPolicy": policy}}))
    assert child(answer, "Pod", "mx-worker-0")["spec"]["restartPolicy"] == pod_policy


def test_labels_both_families_operator_wins_and_master_role():
    tmpl = {"metadata": {"labels": {"job-name": "spoofed", "team": "ml"}},
            "spec": {"containers": [{"name": "mxnet", "image": "i"}]}}
    answer = first_sync(mxjob(replicas={"Scheduler": {"template": tmpl}, "Server": 1, "Worker": 1}))
    labels = child(answer, "Pod", "mx-scheduler-0")["metadata"]["labels"]
    assert labels["job-name"] == "mx" and labels["team"] == "ml"
    assert labels["training.kubeflow.org/job-role"] == "master"
    assert labels["training.kubeflow.org/replica-index"] == "0"
    assert labels["group-name"] == "kubeflow.org"
    worker = child(answer, "Pod", "mx-worker-0")["metadata"]["labels"]
    assert "training.kubeflow.org/job-role" not in worker


@pytest.mark.parametrize("replicas,spec,master", [
    pytest.param({"Scheduler": 1, "Server": 1, "Worker": 2}, {}, ["mx-scheduler-0"], id="scheduler-decides"),
    pytest.param({"Scheduler": 1, "Server": 1, "Worker": 1}, {"successPolicy": "AllWorkers"}, ["mx-worker-0"],
                 id="all-workers-one-worker"),
    pytest.param({"Scheduler": 1, "Server": 1, "Worker": 3}, {"successPolicy": "AllWorkers"}, [],
                 id="all-workers-several-none-is-the-master"),
    pytest.param({"Worker": 1}, {}, ["mx-worker-0"], id="lone-worker"),
    pytest.param({"Worker": 2}, {}, [], id="worker-only-several"),
    pytest.param({"TunerTracker": 1, "TunerServer": 2, "Tuner": 1}, {"jobMode": "MXTune"}, ["mx-tuner-0"], id="tuner"),
])
def test_job_role_master_marks_exactly_the_pod_whose_exit_decides_the_job(replicas, spec, master):
    from hooks.mxjob.spec import parse_mxjob

    parent = mxjob(replicas=replicas, **spec)
    answer = first_sync(parent)
    labelled = sorted(c["metadata"]["name"] for c in answer["children"] if c["kind"] == "Pod"
                      and c["metadata"]["labels"].get("training.kubeflow.org/job-role") == "master")
    assert labelled == master
    job = parse_mxjob(parent)
    # The label and the success rule come from the same place: labelled pods are deciding pods.
    deciding = {f"mx-{t.lower()}-{i}" for t, i in job.deciding_slots()}
    assert set(labelled) <= deciding
    assert all(job.is_master(t) == (len(deciding) == 1 and t == job.deciding_type) for t in job.replicas)


def test_service_is_headless_with_every_mxnet_port_named_in_order():
    tmpl = {"spec": {"containers": [{"name": "mxnet", "image": "i", "ports": [
        {"containerPort": 8000}, {"name": "metrics", "containerPort": 9100, "protocol": "TCP"}]}]}}
    answer = first_sync(mxjob(replicas={"Worker": {"template": tmpl}}))
    svc = child(answer, "Service", "mx-worker-0")
    assert svc["spec"]["clusterIP"] == "None" and svc["spec"]["publishNotReadyAddresses"] is True
    assert [(p["name"], p["port"]) for p in svc["spec"]["ports"]] == \
        [("port-8000", 8000), ("metrics", 9100), ("mxjob-port", 9091)]
    pod = child(answer, "Pod", "mx-worker-0")
    assert svc["spec"]["selector"].items() <= pod["metadata"]["labels"].items()


def test_existing_mxjob_port_is_not_added_twice():
    tmpl = {"spec": {"containers": [{"name": "mxnet", "image": "i", "ports": [
        {"name": "mxjob-port", "containerPort": 9000}]}]}}
    answer = first_sync(mxjob(replicas={"Worker": {"template": tmpl}}))
    ports = child(answer, "Pod", "mx-worker-0")["spec"]["containers"][0]["ports"]
    assert ports == [{"name": "mxjob-port", "containerPort": 9000}]


def example_mxjobs() -> list[Path]:
    found = []
    for path in sorted((ROOT / "examples").rglob("*.yaml")):
        docs = [d for d in yamlio.load_all(path.read_text()) if d]
        if any(d.get("kind") == "MXJob" for d in docs):
            found.append(path)
    return found


def test_there_are_examples_to_check():
    names = {p.name for p in example_mxjobs()}
    assert {"dist-cpu-train.yaml", "tune.yaml", "single-worker.yaml"} <= names, names


@pytest.mark.parametrize("path", example_mxjobs(), ids=lambda p: str(p.relative_to(ROOT)))
def test_example_children_validate_against_kubernetes_schemas(path):
    for doc in yamlio.load_all(path.read_text()):
        if not doc or doc.get("kind") != "MXJob":
            continue
        doc.setdefault("metadata", {}).setdefault("namespace", "default")
        answer = sync_with_pods(doc)
        assert answer["children"], answer["status"]
        pods = [c for c in answer["children"] if c["kind"] == "Pod"]
        services = [c for c in answer["children"] if c["kind"] == "Service"]
        replicas = sum(s.get("replicas", 1) for s in doc["spec"]["mxReplicaSpecs"].values())
        assert len(pods) == len(services) == replicas
        for obj in answer["children"]:
            kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)


def test_the_schema_check_really_rejects_a_bad_pod():
    pod = child(first_sync(mxjob()), "Pod", "mx-worker-0")
    pod["spec"]["containers"][0]["evn"] = []
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(pod, KUBERNETES_VERSION, strict=True)


@pytest.mark.parametrize("path", example_mxjobs(), ids=lambda p: str(p.relative_to(ROOT)))
def test_example_children_fed_back_running_give_the_same_answer(path):
    from helpers.mcsim import Sim

    doc = next(d for d in yamlio.load_all(path.read_text()) if d and d.get("kind") == "MXJob")
    doc["metadata"].update(namespace="default", uid="uid-example", generation=1)
    sim = Sim(doc)
    first = sim.sync()
    if not any(c["kind"] == "Pod" for c in first["children"]):
        first = sim.sync()  # runPolicy.progress: pods wait for the job's ServiceAccount (docs/progress.md)
    for pod in first["children"]:
        if pod["kind"] == "Pod":
            env = [e["name"] for e in env_of(pod)]
            wiring = [n for n in env if n.startswith(("MXJOB_CLUSTER", "MX_CONFIG", "DMLC_"))]
            assert env[:len(wiring)] == wiring and wiring[:2] == ["MXJOB_CLUSTER", "MX_CONFIG"]
    sim.run()
    second = sim.sync()
    third = sync_mxjob(sim.request(), now=sim.now)
    assert second["children"] == first["children"] == third["children"]
    assert json.dumps(third["status"], sort_keys=True) == json.dumps(second["status"], sort_keys=True)


@pytest.mark.parametrize("key", ["", "cost$5", "$(HOME)"], ids=["no-key", "dollar", "reference"])
def test_the_size_check_measures_the_mx_config_the_process_sees(key):
    from hooks.mxjob.env import cluster_wiring
    from hooks.mxjob.spec import parse_mxjob

    parent = mxjob("tune", jobMode="MXTune", replicas={
        "TunerTracker": 1, "Tuner": 1,
        "TunerServer": {"replicas": 12, "template": {"metadata": {"annotations": {"tuner-server-key": key}},
                                                     "spec": {"containers": [{"name": "mxnet", "image": "i"}]}}}})
    answer = first_sync(parent)
    wiring = cluster_wiring(parse_mxjob(parent))
    env = kubelet_env(child(answer, "Pod", "tune-tunerserver-11"), child(answer, "ConfigMap", "tune-cluster"))
    assert wiring.expanded_length("TunerServer", 11) == len(env["MX_CONFIG"])


@pytest.mark.parametrize("replicas,mode", [
    ({"Scheduler": 1, "Server": 2, "Worker": 3}, "MXTrain"),
    ({"Worker": 2}, "MXTrain"),
    ({"TunerTracker": 1, "TunerServer": 2, "Tuner": 1}, "MXTune"),
])
def test_every_container_of_every_pod_gets_dmlc_use_kubernetes_1(replicas, mode):
    # Load-bearing, not decoration: with DMLC_USE_KUBERNETES=1 the ps-lite scheduler binds 0.0.0.0.
    # Without it, it takes its own DMLC_PS_ROOT_URI (its Service name) as a literal bind address
    # and exits 1 ("van.cc:311 ... bind failed") when that name does not resolve yet, which is
    # usual on a real cluster: Metacontroller creates Pods before their Services, and a headless
    # name resolves only once its pod has an IP (docs/lifecycle.md). Every container gets it, as
    # a sidecar may run the ps-lite role too.
    parent = mxjob("dmlc", jobMode=mode, replicas=replicas)
    for spec in parent["spec"]["mxReplicaSpecs"].values():
        spec["template"]["spec"]["containers"].append({"name": "sidecar", "image": "busybox:1.36"})
    answer = first_sync(parent)
    pods = [c for c in answer["children"] if c["kind"] == "Pod"]
    assert len(pods) == sum(replicas.values())
    for pod in pods:
        for container in pod["spec"]["containers"]:
            values = [e.get("value") for e in container["env"] if e["name"] == "DMLC_USE_KUBERNETES"]
            assert values == ["1"], (pod["metadata"]["name"], container["name"])
