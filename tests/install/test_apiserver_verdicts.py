"""The stand-in of the API server's rules, checked against the real server on one corpus of children.

One stand-in remains, judged differentially here (the others, tests/apiserver_rules.py and the local
cluster's in-memory API server, are gone: their tests ask the real server):

- the hooks' own template checks (hooks/shared/podtemplate.py and the kinds' spec checks): the
  hook refuses a template (a spec problem with its field path) where the server would refuse the
  pod it makes, so a user sees why instead of a job whose pods never appear. For each case of the
  corpus the verdict of each hook on a job with that template must equal the server's verdict on
  the template as a Pod; where a hook refuses on purpose what the server admits (Metacontroller's
  merge would break the child, see BY_DESIGN), the test asserts that difference.
"""
from __future__ import annotations

import copy

import pytest
from helpers import apiserver
from helpers.chainersim import chainerjob
from helpers.mcsim import mxjob

from hooks.chainerjob.spec import parse_chainerjob
from hooks.mxjob.spec import parse_mxjob
from hooks.shared.errors import SpecError


def main(**fields) -> dict:
    """A pod spec whose one container has these fields."""
    return {"containers": [{"name": "main", "image": "busybox", **fields}]}


def with_sidecar(**fields) -> dict:
    return {"containers": [{"name": "main", "image": "busybox"}, {"name": "side", "image": "busybox", **fields}]}


FIELD_REF = {"fieldRef": {"fieldPath": "metadata.name"}}
# Pod specs; the server's verdict on each as a Pod is part of the case: True when it refuses it.
PODS: dict[str, tuple[dict, bool]] = {
    "plain": (main(), False),
    "env-value": (main(env=[{"name": "A", "value": "1"}]), False),
    "env-value-from-a-field": (main(env=[{"name": "A", "valueFrom": FIELD_REF}]), False),
    "env-empty-value": (main(env=[{"name": "A", "value": ""}]), False),
    "env-name-with-a-dot-and-dash": (main(env=[{"name": "a.b-c", "value": "1"}]), False),
    "env-value-and-value-from": (main(env=[{"name": "A", "value": "1", "valueFrom": FIELD_REF}]), True),
    "env-value-from-without-source": (main(env=[{"name": "A", "valueFrom": {}}]), True),
    "env-value-from-with-two-sources": (main(env=[{"name": "A", "valueFrom": {
        **FIELD_REF, "configMapKeyRef": {"name": "c", "key": "k"}}}]), True),
    "env-name-with-equals": (main(env=[{"name": "A=B", "value": "1"}]), True),
    "env-name-with-a-space": (main(env=[{"name": "A B", "value": "1"}]), False),
    "env-name-empty": (main(env=[{"name": "", "value": "1"}]), True),
    "env-names-twice": (main(env=[{"name": "A", "value": "1"}, {"name": "A", "value": "2"}]), False),
    "env-value-a-number": (main(env=[{"name": "A", "value": 1}]), True),
    "ports-named": (main(ports=[{"name": "a", "containerPort": 1}, {"name": "b", "containerPort": 2}]), False),
    "port-names-twice": (main(ports=[{"name": "a", "containerPort": 1}, {"name": "a", "containerPort": 2}]), True),
    "port-number-twice": (main(ports=[{"containerPort": 1}, {"containerPort": 1}]), False),
    "port-number-on-tcp-and-udp": (main(ports=[{"containerPort": 53}, {"containerPort": 53, "protocol": "UDP"}]), False),
    "port-number-zero": (main(ports=[{"containerPort": 0}]), True),
    "port-number-too-big": (main(ports=[{"containerPort": 70000}]), True),
    "port-number-a-string": (main(ports=[{"containerPort": "80"}]), True),
    "host-port-too-big": (main(ports=[{"containerPort": 80, "hostPort": 70000}]), True),
    "port-name-too-long": (main(ports=[{"name": "a-very-long-port-name", "containerPort": 1}]), True),
    "port-name-upper-case": (main(ports=[{"name": "Http", "containerPort": 1}]), True),
    "port-name-digits-only": (main(ports=[{"name": "8080", "containerPort": 1}]), True),
    "port-name-double-dash": (main(ports=[{"name": "a--b", "containerPort": 1}]), True),
    "port-protocol-http": (main(ports=[{"containerPort": 1, "protocol": "HTTP"}]), True),
    "port-protocol-lower-case": (main(ports=[{"containerPort": 1, "protocol": "tcp"}]), True),
    "image-empty": (main(image=""), True),
    "image-blank": (main(image="  "), True),
    "image-with-a-leading-space": (main(image=" busybox"), True),
    "sidecar-name-upper-case": (with_sidecar(name="Side"), True),
    "sidecar-named-as-main": (with_sidecar(name="main"), True),
    "sidecar-name-too-long": (with_sidecar(name="s" * 64), True),
    "init-container-named-as-main": ({**main(), "initContainers": [{"name": "main", "image": "busybox"}]}, True),
    "init-container-without-image": ({**main(), "initContainers": [{"name": "init"}]}, True),
    "volumes-named-twice": ({**main(), "volumes": [{"name": "v", "emptyDir": {}}, {"name": "v", "emptyDir": {}}]}, True),
    "template-label-value-with-a-space": (main(), True),  # the label is put on the template below
}
TEMPLATE_LABELS = {"template-label-value-with-a-space": {"team": "vision and sound"}}

# Where a hook refuses what the server admits, on purpose: Metacontroller merges these lists by
# one key alone, so an InPlace child would collapse them (hooks/shared/merge.py).
BY_DESIGN = {
    ("MXJob", "port-number-twice"): "the pod's Service (InPlace) merges its ports by number",
    ("MXJob", "port-number-on-tcp-and-udp"): "the pod's Service (InPlace) merges its ports by number",
    ("ChainerJob", "port-number-twice"): "the worker StatefulSet (InPlace) merges its container ports by number",
    ("ChainerJob", "port-number-on-tcp-and-udp"): "the worker StatefulSet (InPlace) merges its container ports by number",
    ("ChainerJob", "env-names-twice"): "the worker StatefulSet (InPlace) merges env by name",
}


def as_pod(case: str) -> dict:
    pod_spec, _ = PODS[case]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "corpus", "labels": TEMPLATE_LABELS.get(case, {"app": "corpus"})},
            "spec": copy.deepcopy(pod_spec)}


def template(case: str, container: str) -> dict:
    """The case's pod spec as a job's template, its first container renamed to the kind's main one."""
    pod_spec = copy.deepcopy(PODS[case][0])
    pod_spec["containers"][0]["name"] = container
    for other in pod_spec["containers"][1:] + pod_spec.get("initContainers", []):
        if other["name"] == "main":
            other["name"] = container
    return {"metadata": {"labels": TEMPLATE_LABELS.get(case, {"app": "corpus"})}, "spec": pod_spec}


def hook_refuses(kind: str, case: str) -> bool:
    if kind == "MXJob":
        parent = mxjob(replicas={"Worker": {"replicas": 1, "template": template(case, "mxnet")}})
        parse = parse_mxjob
    else:
        parent = chainerjob(workers={"ws": {"replicas": 1, "template": template(case, "chainer")}})
        parse = parse_chainerjob
    try:
        parse(parent)
    except SpecError:
        return True
    return False


def test_every_case_names_its_server_verdict():
    assert all(isinstance(refused, bool) for _, refused in PODS.values())
    assert set(TEMPLATE_LABELS) <= set(PODS) and {case for _, case in BY_DESIGN} <= set(PODS)


@pytest.mark.apiserver
@pytest.mark.parametrize("case", sorted(PODS))
def test_the_server_verdict_on_each_pod_is_as_the_corpus_says(control_plane, namespace, case):
    verdict = apiserver.create(control_plane, as_pod(case), namespace, dry_run=True)
    assert verdict.accepted is not PODS[case][1], verdict.message


@pytest.mark.parametrize("kind", ["MXJob", "ChainerJob"])
@pytest.mark.parametrize("case", sorted(PODS))
def test_a_hook_refuses_a_template_exactly_when_the_server_refuses_its_pod(kind, case):
    refused_by_server = PODS[case][1]
    if (kind, case) in BY_DESIGN:
        assert hook_refuses(kind, case) and not refused_by_server, BY_DESIGN[(kind, case)]
    else:
        assert hook_refuses(kind, case) == refused_by_server
