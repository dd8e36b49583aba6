"""hooks/shared/canonical.py spells a pod template as the API server stores it; checked against the server.

Each case is a template spelt one way a user may write it; `pod_template_spec` must give the
expected spelling (without a server), and on the real server (as a StatefulSet's template, the
InPlace child that carries a user's template) the canonical spelling must be stored field for
field as written (the server only adds its defaults) and be stored exactly as the user's spelling
is: then Metacontroller's merge of the hook's answer over the stored object changes nothing.
"""
from __future__ import annotations

import copy

import pytest
from helpers import apiserver
from helpers.metacontroller_writes import differences

from hooks.shared.canonical import pod_template_spec


def spec(**container) -> dict:
    return {"containers": [{"name": "main", "image": "busybox", **container}]}


CASES = {
    "integer-gpu-count": (spec(resources={"limits": {"nvidia.com/gpu": 4}}),
                          spec(resources={"limits": {"nvidia.com/gpu": "4"}})),
    "millicores-and-mebibytes": (spec(resources={"limits": {"cpu": "1000m", "memory": "1024Mi"}}),
                                 spec(resources={"limits": {"cpu": "1", "memory": "1Gi"}})),
    "fractional-cpu-as-a-number": (spec(resources={"requests": {"cpu": 0.5, "memory": 268435456}}),
                                   spec(resources={"requests": {"cpu": "500m", "memory": "268435456"}})),
    "already-canonical-exponent": (spec(resources={"requests": {"memory": "1e9", "cpu": "2"}}),
                                   spec(resources={"requests": {"memory": "1e9", "cpu": "2"}})),
    "empty-env-value": (spec(env=[{"name": "A", "value": ""}, {"name": "B", "value": "1"}]),
                        spec(env=[{"name": "A"}, {"name": "B", "value": "1"}])),
    "empty-lists": ({**spec(args=[], command=[], ports=[], envFrom=[]), "initContainers": [], "tolerations": [],
                     "imagePullSecrets": []},
                    spec()),
    "empty-strings-and-nulls": ({**spec(workingDir="", imagePullPolicy=None), "serviceAccountName": "", "hostname": ""},
                                spec()),
    "empty-map-fields": ({**spec(resources={"limits": {}, "requests": {}}), "nodeSelector": {}},
                         spec(resources={})),
    "plain-false-booleans": ({**spec(stdin=False, stdinOnce=False, tty=False), "hostNetwork": False,
                              "hostPID": False, "hostIPC": False},
                             spec()),
    "read-only-false-mount-and-zero-host-port": (
        {**spec(volumeMounts=[{"name": "d", "mountPath": "/d", "readOnly": False}],
                ports=[{"containerPort": 80, "hostPort": 0}]), "volumes": [{"name": "d", "emptyDir": {}}]},
        {**spec(volumeMounts=[{"name": "d", "mountPath": "/d"}], ports=[{"containerPort": 80}]),
         "volumes": [{"name": "d", "emptyDir": {}}]}),
    "empty-dir-size-limit": ({**spec(), "volumes": [{"name": "d", "emptyDir": {"sizeLimit": "1024Mi"}}]},
                             {**spec(), "volumes": [{"name": "d", "emptyDir": {"sizeLimit": "1Gi"}}]}),
    "kept-as-written": (
        {**spec(securityContext={}, env=[{"name": "A", "valueFrom": {"configMapKeyRef": {"name": "c", "key": "k", "optional": False}}}],
                readinessProbe={"exec": {"command": ["true"]}, "periodSeconds": 10}),
         "nodeSelector": {"disk": ""}, "automountServiceAccountToken": False, "enableServiceLinks": False,
         "securityContext": {}, "volumes": [{"name": "d", "emptyDir": {}}]},
        None),  # None: the canonical spelling is the input
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_template_is_spelt_as_expected(case):
    raw, expected = CASES[case]
    before = copy.deepcopy(raw)
    canonical = pod_template_spec(raw)
    assert canonical == (raw if expected is None else expected)
    assert pod_template_spec(canonical) == canonical
    assert raw == before  # the input is left alone


def statefulset(pod_spec: dict) -> dict:
    labels = {"app": "canonical"}
    return {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "canonical"},
            "spec": {"replicas": 0, "serviceName": "canonical", "selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels}, "spec": pod_spec}}}


def stored_template(cp, namespace: str, pod_spec: dict) -> dict:
    verdict = apiserver.create(cp, statefulset(pod_spec), namespace, dry_run=True)
    assert verdict.accepted, verdict.message
    assert verdict.stored is not None
    return dict(verdict.stored["spec"]["template"]["spec"])


@pytest.mark.apiserver
@pytest.mark.parametrize("case", sorted(CASES))
def test_the_server_stores_the_canonical_spelling_as_written_and_as_the_users(control_plane, namespace, case):
    raw, _ = CASES[case]
    canonical = pod_template_spec(raw)
    stored = stored_template(control_plane, namespace, canonical)
    changed = [d for d in differences(canonical, stored) if not d.split(": ", 1)[1].startswith('"<absent>" ->')]
    assert changed == []  # every field as written; the server only added its defaults
    assert stored_template(control_plane, namespace, raw) == stored
