"""localcluster/defaults.py without a server: the rules tests/localcluster/test_apiserver_stand_ins.py checked against one."""

from __future__ import annotations

import pytest

from localcluster.defaults import apply_defaults, image_tag
from localcluster.store import Store

DIGEST = "sha256:" + "ab" * 32


@pytest.mark.parametrize(("image", "tag"), [
    ("busybox", "latest"), ("busybox:1.36", "1.36"), (f"busybox@{DIGEST}", ""), (f"busybox:latest@{DIGEST}", "latest"),
    ("localhost:5000/team/busybox", "latest"), ("registry.example.com:5000/a/b:v1", "v1"), ("MyImage", ""),
    ("Registry.example.com/a", "latest"), ("busybox@sha256:abc", ""),
], ids=["none", "tag", "digest", "latest-and-digest", "registry-port", "registry-port-tag", "upper-case", "upper-case-domain",
        "short-digest"])
def test_image_tag_as_kubelet_parses_it(image: str, tag: str):
    assert image_tag(image) == tag


def pod(**spec: object) -> dict:
    obj = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
           "spec": {"containers": [{"name": "c", "image": "busybox"}], **spec}}
    apply_defaults(obj)
    return obj


def test_a_toleration_covers_a_default_only_for_no_execute_or_any_effect():
    keys = [t.get("key") for t in pod(tolerations=[{"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}])["spec"]["tolerations"]]
    assert keys == ["node.kubernetes.io/not-ready", "node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"]
    assert pod(tolerations=[{"operator": "Exists"}])["spec"]["tolerations"] == [{"operator": "Exists"}]


def test_zero_values_go_types_omit_are_not_stored():
    spec = pod(hostNetwork=False, nodeSelector={}, volumes=[], automountServiceAccountToken=False,
               containers=[{"name": "c", "image": "busybox", "env": [{"name": "A", "value": ""}], "args": [], "tty": False}])["spec"]
    assert "hostNetwork" not in spec and "nodeSelector" not in spec and "volumes" not in spec
    assert spec["automountServiceAccountToken"] is False  # a pointer: false is stored
    assert spec["containers"][0]["env"] == [{"name": "A"}] and "args" not in spec["containers"][0] and "tty" not in spec["containers"][0]


def test_a_limit_without_a_request_is_the_request():
    (container,) = pod(containers=[{"name": "c", "image": "x", "resources": {"limits": {"cpu": "1"}, "requests": {"memory": "1Gi"}}}])[
        "spec"]["containers"]
    assert container["resources"]["requests"] == {"memory": "1Gi", "cpu": "1"}


def test_a_new_job_gets_a_selector_and_labels_from_its_uid():
    store = Store(new_uid=lambda: "u1")
    job = store.create({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"},
                        "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "x"}]}}}})
    assert job["spec"]["selector"] == {"matchLabels": {"batch.kubernetes.io/controller-uid": "u1"}}
    assert job["metadata"]["labels"] == job["spec"]["template"]["metadata"]["labels"] == {
        "batch.kubernetes.io/controller-uid": "u1", "controller-uid": "u1", "batch.kubernetes.io/job-name": "j", "job-name": "j"}
