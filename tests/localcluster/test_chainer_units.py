"""The local cluster's emulation of what ChainerJob's children need, without processes: Job and
StatefulSet controllers driven by hand-written objects and pod statuses, mapped volume paths, the
kubectl stand-in's command line, and one stand-in per shipped CompositeController."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import yaml
from helpers.crd import pruned_paths, schema_errors

from localcluster.cli import load_job
from localcluster.cluster import finished
from localcluster.config import load_controller_configs
from localcluster.jobcontroller import JobController
from localcluster.kubectl import parse
from localcluster.podprocess import is_kubectl_image
from localcluster.statefulset import StatefulSetController
from localcluster.store import Store
from localcluster.volumes import MissingConfigMap, PathMap, prepare_volumes

POD_TEMPLATE = {"spec": {"containers": [{"name": "c", "image": "i", "command": ["true"]}]}}


def wait_for(check, timeout: float = 5.0):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {check}")


def set_phase(store: Store, pod: dict, phase: str, ready: bool = False) -> None:
    conditions = [{"type": "Ready", "status": "True" if ready else "False"}]
    store.update_status("v1", "Pod", "default", pod["metadata"]["name"], {"phase": phase, "conditions": conditions})


def pods(store: Store) -> list[dict]:
    return sorted(store.list("v1", "Pod"), key=lambda p: p["metadata"]["name"])


@pytest.fixture
def store() -> Store:
    return Store()


@pytest.fixture
def jobs(store: Store):  # type: ignore[no-untyped-def]
    controller = JobController(store)
    controller.start()
    yield controller
    controller.stop()


@pytest.fixture
def statefulsets(store: Store):  # type: ignore[no-untyped-def]
    controller = StatefulSetController(store)
    controller.start()
    yield controller
    controller.stop()


def make_job(store: Store, **spec: object) -> dict:
    return store.create({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "m"},
                         "spec": {"template": {"metadata": {"labels": {"role": "master"}},
                                               "spec": {**POD_TEMPLATE["spec"], "restartPolicy": "Never", "hostname": "m"}},
                                  **spec}})


def job_status(store: Store) -> dict:
    return (store.get("batch/v1", "Job", "default", "m") or {}).get("status", {})


def condition(status: dict, type_: str) -> dict | None:
    return next((c for c in status.get("conditions", []) if c["type"] == type_), None)


def test_a_job_runs_one_pod_with_a_generated_name_its_labels_and_hostname(store, jobs):
    job = make_job(store)
    pod = wait_for(lambda: pods(store))[0]
    assert pod["metadata"]["name"].startswith("m-") and len(pod["metadata"]["name"]) == len("m-") + 5
    assert pod["metadata"]["labels"]["job-name"] == "m" and pod["metadata"]["labels"]["role"] == "master"
    assert pod["metadata"]["ownerReferences"][0]["uid"] == job["metadata"]["uid"]
    assert pod["spec"]["hostname"] == "m"
    assert wait_for(lambda: job_status(store).get("active")) == 1 and "startTime" in job_status(store)


def test_a_succeeded_pod_completes_the_job(store, jobs):
    make_job(store)
    set_phase(store, wait_for(lambda: pods(store))[0], "Succeeded")
    complete = wait_for(lambda: condition(job_status(store), "Complete"))
    assert complete["status"] == "True"
    status = job_status(store)
    assert status["succeeded"] == 1 and "active" not in status and "completionTime" in status
    assert len(pods(store)) == 1


@pytest.mark.parametrize("backoff_limit", [0, 1], ids=["backoffLimit-0", "backoffLimit-1"])
def test_failed_pods_are_replaced_until_the_backoff_limit_then_the_job_fails(store, jobs, backoff_limit):
    make_job(store, backoffLimit=backoff_limit)
    for attempt in range(backoff_limit + 1):
        pod = wait_for(lambda n=attempt: len(pods(store)) == n + 1 and pods(store))  # type: ignore[misc]
        fresh = [p for p in pod if p.get("status", {}).get("phase") != "Failed"]
        set_phase(store, fresh[0], "Failed")
    failed = wait_for(lambda: condition(job_status(store), "Failed"))
    assert failed["reason"] == "BackoffLimitExceeded"
    assert job_status(store)["failed"] == backoff_limit + 1
    time.sleep(0.3)
    assert len(pods(store)) == backoff_limit + 1  # no pod after the limit


def test_on_failure_fails_when_container_restarts_reach_the_backoff_limit(store, jobs):
    """pastBackoffLimitOnFailure: restarts >= backoffLimit (2 restarts with backoffLimit 2), not failed + restarts > it."""
    make_job(store, backoffLimit=2, template={"spec": {**POD_TEMPLATE["spec"], "restartPolicy": "OnFailure"}})
    pod = wait_for(lambda: pods(store))[0]
    running = {"phase": "Running", "containerStatuses": [{"name": "c", "restartCount": 1}]}
    store.update_status("v1", "Pod", "default", pod["metadata"]["name"], running)
    time.sleep(0.3)
    assert not condition(job_status(store), "FailureTarget")  # one restart: below the limit
    running["containerStatuses"][0]["restartCount"] = 2
    store.update_status("v1", "Pod", "default", pod["metadata"]["name"], running)
    assert wait_for(lambda: condition(job_status(store), "Failed"))["reason"] == "BackoffLimitExceeded"


def test_the_outcome_is_posted_as_an_interim_condition_before_complete(store, jobs):
    seen: list[list[str]] = []
    store.watch(lambda event, obj: obj["kind"] == "Job" and seen.append(
        [c["type"] for c in obj.get("status", {}).get("conditions", [])]))
    make_job(store)
    set_phase(store, wait_for(lambda: pods(store))[0], "Succeeded")
    wait_for(lambda: condition(job_status(store), "Complete"))
    assert ["SuccessCriteriaMet"] in seen  # a status with the interim condition alone came first
    assert seen[-1] == ["SuccessCriteriaMet", "Complete"]
    assert "completionTime" in job_status(store)


def test_active_deadline_fails_the_job_and_deletes_its_running_pod(store, jobs):
    make_job(store, activeDeadlineSeconds=1)
    set_phase(store, wait_for(lambda: pods(store))[0], "Running", ready=True)
    failed = wait_for(lambda: condition(job_status(store), "Failed"), timeout=5)
    assert failed["reason"] == "DeadlineExceeded"
    wait_for(lambda: not pods(store))  # not bound to a node here, so deleted at once


def make_sts(store: Store, replicas: int, policy: str = "Parallel") -> dict:
    return store.create({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "w"},
                         "spec": {"replicas": replicas, "podManagementPolicy": policy, "serviceName": "w",
                                  "selector": {"matchLabels": {"app": "w"}},
                                  "template": {"metadata": {"labels": {"app": "w"}}, "spec": POD_TEMPLATE["spec"]}}})


def sts_status(store: Store) -> dict:
    return (store.get("apps/v1", "StatefulSet", "default", "w") or {}).get("status", {})


def test_a_statefulset_runs_ordinal_pods_and_counts_the_ready_ones(store, statefulsets):
    make_sts(store, 2)
    created = wait_for(lambda: len(pods(store)) == 2 and pods(store))
    assert [p["metadata"]["name"] for p in created] == ["w-0", "w-1"]
    assert [p["spec"]["hostname"] for p in created] == ["w-0", "w-1"] and created[0]["spec"]["subdomain"] == "w"
    assert created[1]["metadata"]["labels"]["statefulset.kubernetes.io/pod-name"] == "w-1"
    assert "readyReplicas" not in wait_for(lambda: sts_status(store).get("replicas") == 2 and sts_status(store))
    set_phase(store, created[0], "Running", ready=True)
    assert wait_for(lambda: sts_status(store).get("readyReplicas")) == 1
    set_phase(store, created[1], "Running", ready=True)
    assert wait_for(lambda: sts_status(store).get("readyReplicas") == 2)


def test_ordered_ready_creates_the_next_ordinal_only_once_the_previous_is_ready(store, statefulsets):
    make_sts(store, 2, policy="OrderedReady")
    first = wait_for(lambda: pods(store))
    time.sleep(0.2)
    assert [p["metadata"]["name"] for p in pods(store)] == ["w-0"]
    set_phase(store, first[0], "Running", ready=True)
    wait_for(lambda: len(pods(store)) == 2)


def test_scaling_a_statefulset_to_zero_deletes_its_pods_and_an_ended_pod_comes_back(store, statefulsets):
    sts = make_sts(store, 2)
    created = wait_for(lambda: len(pods(store)) == 2 and pods(store))
    set_phase(store, created[1], "Failed")
    wait_for(lambda: any(p["metadata"]["name"] == "w-1" and p["metadata"]["uid"] != created[1]["metadata"]["uid"] for p in pods(store)))
    sts["spec"]["replicas"] = 0
    sts["metadata"].pop("resourceVersion")
    store.update(sts)
    wait_for(lambda: not pods(store))
    assert wait_for(lambda: sts_status(store).get("replicas") == 0 and sts_status(store))["observedGeneration"] == 2


def edit_template(store: Store, image: str, strategy: dict | None = None) -> None:
    sts = store.get("apps/v1", "StatefulSet", "default", "w")
    assert sts is not None
    sts["spec"]["template"]["spec"]["containers"][0]["image"] = image
    if strategy is not None:
        sts["spec"]["updateStrategy"] = strategy
    store.update(sts)


def uid_of(store: Store, name: str) -> str | None:
    pod = store.get("v1", "Pod", "default", name)
    return pod["metadata"]["uid"] if pod else None


def test_a_template_edit_rolls_running_pods_one_at_a_time_highest_ordinal_first(store, statefulsets):
    """RollingUpdate, the API default: w-1 goes first; w-0 only once the new w-1 is Running and Ready."""
    make_sts(store, 2)
    created = wait_for(lambda: len(pods(store)) == 2 and pods(store))
    for pod in created:
        set_phase(store, pod, "Running", ready=True)
    old = {p["metadata"]["name"]: p["metadata"]["uid"] for p in created}
    edit_template(store, "i:2")
    new_w1 = wait_for(lambda: (u := uid_of(store, "w-1")) and u != old["w-1"] and u)
    time.sleep(0.3)
    assert uid_of(store, "w-0") == old["w-0"]  # one at a time: w-0 waits for the new w-1
    pod = store.get("v1", "Pod", "default", "w-1")
    assert pod is not None and pod["spec"]["containers"][0]["image"] == "i:2"
    set_phase(store, pod, "Running", ready=True)
    wait_for(lambda: (u := uid_of(store, "w-0")) and u != old["w-0"])
    assert uid_of(store, "w-1") == new_w1


def test_on_delete_keeps_running_pods_on_their_template(store, statefulsets):
    make_sts(store, 2)
    created = wait_for(lambda: len(pods(store)) == 2 and pods(store))
    for pod in created:
        set_phase(store, pod, "Running", ready=True)
    edit_template(store, "i:2", strategy={"type": "OnDelete"})
    wait_for(lambda: sts_status(store).get("observedGeneration") == 2)
    time.sleep(0.3)
    assert [p["metadata"]["uid"] for p in pods(store)] == [p["metadata"]["uid"] for p in created]
    assert "updatedReplicas" not in sts_status(store)  # both pods still of the older revision


@pytest.mark.parametrize(("value", "expected"), [
    ("/kubeflow/chainer-operator/assets/kubexeb.sh", "/v/assets/kubexeb.sh"),
    ("/kubeflow/chainer-operator/kube", "/v/kube"),
    ("$(KUBECTL_DIR):/kubeflow/chainer-operator/kube/kubectl", "$(KUBECTL_DIR):/v/kube/kubectl"),
    ("/kubeflow/chainer-operator/kubernetes", "/kubeflow/chainer-operator/kubernetes"),
    ("/kubeflow/chainer-operator", "/kubeflow/chainer-operator"),
], ids=["file-under-mount", "mount-itself", "inside-a-longer-value", "longer-name-untouched", "parent-untouched"])
def test_mount_paths_are_rewritten_only_as_whole_path_prefixes(value, expected):
    mapping = PathMap({"/kubeflow/chainer-operator/assets": Path("/v/assets"), "/kubeflow/chainer-operator/kube/": Path("/v/kube")})
    assert mapping.rewrite(value) == expected


def test_configmap_volumes_write_items_with_their_modes_and_wait_for_a_missing_configmap(tmp_path):
    pod = {"metadata": {"name": "p", "namespace": "default"}, "spec": {"volumes": [
        {"name": "assets", "configMap": {"name": "cm", "items": [{"key": "run.sh", "path": "run.sh", "mode": 0o555}]}},
        {"name": "scratch", "emptyDir": {}},
    ]}}
    with pytest.raises(MissingConfigMap, match='configmap "cm" not found'):
        prepare_volumes(tmp_path, pod, lambda ns, name: None)
    cm = {"data": {"run.sh": "#!/bin/sh\n", "other": "x"}}
    assert prepare_volumes(tmp_path, pod, lambda ns, name: cm) == []
    script = tmp_path / "volumes" / "assets" / "run.sh"
    assert script.read_text() == "#!/bin/sh\n" and script.stat().st_mode & 0o777 == 0o555
    assert not (tmp_path / "volumes" / "assets" / "other").exists()
    assert (tmp_path / "volumes" / "scratch").is_dir()


@pytest.mark.parametrize(("image", "expected"), [
    ("registry.k8s.io/kubectl:v1.34.1", True), ("bitnami/kubectl", True), ("bitnami/kubectl@sha256:abc", True),
    ("python:3.11", False), ("example.com/kubectl-tools:1", False),
], ids=["k8s-registry", "bitnami", "digest", "python", "other-name"])
def test_kubectl_images_are_recognised_by_repository_name(image, expected):
    assert is_kubectl_image(image) is expected


def test_the_kubectl_stand_in_reads_exec_flags_as_kubectl_does():
    opts, command = parse(["-i", "job-workerset-ws0-1", "-c", "chainer", "-n", "ns", "--", "/bin/sh", "-c", "prted -x"])
    assert opts == {"pod": "job-workerset-ws0-1", "c": "chainer", "n": "ns"}
    assert command == ["/bin/sh", "-c", "prted -x"]
    with pytest.raises(SystemExit, match="expected one pod name"):
        parse(["--", "true"])


def test_the_stand_in_follows_every_shipped_composite_controller():
    configs = {config.parent_kind: config for config in load_controller_configs()}
    assert set(configs) == {"MXJob", "ChainerJob"}
    chainer = configs["ChainerJob"]
    assert chainer.hook_path == "/chainerjob/sync" and chainer.generate_selector
    assert {(r["kind"], r["updateStrategy"]) for r in chainer.children} >= {("StatefulSet", "InPlace"), ("Job", "OnDelete")}


@pytest.mark.parametrize(("kind", "conditions", "expected"), [
    ("ChainerJob", [("Waiting", "True")], None),
    ("ChainerJob", [("Created", "True"), ("Complete", "True")], "Succeeded"),
    ("ChainerJob", [("Created", "True"), ("Failed", "True")], "Failed"),
    ("ChainerJob", [("Succeeded", "True")], None),
    ("MXJob", [("Succeeded", "True")], "Succeeded"),
    ("MXJob", [("Complete", "True")], None),
], ids=["chainer-waiting", "chainer-complete", "chainer-failed", "chainer-ignores-succeeded", "mxjob-succeeded", "mxjob-ignores-complete"])
def test_a_job_is_finished_by_its_own_kinds_terminal_condition(kind, conditions, expected):
    job = {"kind": kind, "status": {"conditions": [{"type": t, "status": s} for t, s in conditions]}}
    assert finished(job) == expected


def test_the_cli_loads_one_job_of_either_kind_and_names_the_right_api_version(tmp_path):
    path = tmp_path / "j.yaml"
    path.write_text("apiVersion: kubeflow.org/v1alpha1\nkind: ChainerJob\nmetadata: {name: c}\nspec: {}\n")
    assert load_job(path)["kind"] == "ChainerJob"
    path.write_text("apiVersion: kubeflow.org/v1\nkind: ChainerJob\nmetadata: {name: c}\nspec: {}\n")
    with pytest.raises(ValueError, match=r"apiVersion .kubeflow\.org/v1. is not served for ChainerJob; use one of kubeflow\.org/v1alpha1"):
        load_job(path)


def test_the_local_chainer_example_validates_against_the_chainerjob_crd():
    root = Path(__file__).resolve().parents[2]
    crd = yaml.safe_load((root / "crd" / "chainerjob-crd.yaml").read_text())
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    doc = yaml.safe_load((root / "examples" / "local" / "chainer-mn-digits.yaml").read_text())
    assert schema_errors(doc, schema) == []
    assert pruned_paths(doc, schema) == []


def _controller(name: str, api_version: str, resource: str) -> str:
    return (f"apiVersion: metacontroller.k8s.io/v1alpha1\nkind: CompositeController\nmetadata: {{name: {name}}}\n"
            f"spec:\n  generateSelector: true\n  parentResource: {{apiVersion: {api_version}, resource: {resource}}}\n"
            f"  childResources: [{{apiVersion: batch/v1, resource: jobs}}]\n"
            f"  hooks: {{sync: {{webhook: {{url: 'http://h/{name}/sync'}}}}}}\n")


def test_every_composite_controller_in_the_folder_is_followed_and_one_kind_twice_is_refused(tmp_path):
    (tmp_path / "a.yaml").write_text(_controller("mx", "kubeflow.org/v1", "mxjobs"))
    (tmp_path / "b.yaml").write_text(_controller("ch", "kubeflow.org/v1alpha1", "chainerjobs") + "---\nkind: Service\n")
    configs = load_controller_configs(tmp_path)
    assert [(c.name, c.parent_kind, c.hook_path) for c in configs] == [
        ("mx", "MXJob", "/mx/sync"), ("ch", "ChainerJob", "/ch/sync")]
    assert configs[1].children[0]["updateStrategy"] == "OnDelete"  # Metacontroller's default
    (tmp_path / "c.yaml").write_text(_controller("ch2", "kubeflow.org/v1alpha1", "chainerjobs"))
    with pytest.raises(ValueError, match="more than one CompositeController for ChainerJob"):
        load_controller_configs(tmp_path)
