"""The local cluster's emulation of what ChainerJob's children need, without processes: mapped volume
paths, the kubectl stand-in's command line, and one stand-in per shipped CompositeController. (The
Job and StatefulSet controllers are the real control plane's.)"""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import yamlio
from helpers.crd import pruned_paths, schema_errors

from localcluster.cli.commands import load_job
from localcluster.cluster import finished
from localcluster.config import load_controller_configs
from localcluster.node.kubectl import parse
from localcluster.node.podprocess import is_kubectl_image
from localcluster.node.volumes import MissingConfigMap, PathMap, prepare_volumes

POD_TEMPLATE = {"spec": {"containers": [{"name": "c", "image": "i", "command": ["true"]}]}}


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
    crd = yamlio.load((root / "crd" / "chainerjob-crd.yaml").read_text())
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    doc = yamlio.load((root / "examples" / "local" / "chainer-mn-digits.yaml").read_text())
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
