"""tests/helpers/go_apply_merge.py (our port of Metacontroller's three-way merge) against the real thing.

Metacontroller's merge is its own (pkg/dynamic/apply): it guesses a list's merge key from the
items (the first of containerPort, port, mountPath, name, uid, ip, path that every item has) where
`kubectl apply` (client-side) runs Go's three-way strategic merge with the types' own patch
metadata. On the lists and maps of Pods and Services whose merge key the guess gets right, the two
are meant to agree: same fields removed (in the last-applied copy, gone from the desired one), the
desired values set, what another writer added kept. So for each case below, one object is created
with a last-applied copy, another writer changes it, and then:

- real: `kubectl apply --server-side=false --dry-run=server` of the desired object (kubectl is the
  only client that computes Go's three-way strategic patch: the dynamic client has no such thing);
- port: `go_apply_merge.Merge(observed, last applied, desired)`, sent as an update (dry run), so
  the server normalises both results the same way.

Where both are defined to agree, the stored results must be equal. Where Metacontroller differs by
design (it is not a strategic merge: list order, lists it keys that are atomic in the API, keys it
cannot guess, two items with one key), the case says why and the test asserts exactly how the
results differ (or that the server refuses what Metacontroller would PUT).
Pods are PodTemplates here: a Pod's spec is immutable after creation, a PodTemplate's is not, and
both carry the same PodSpec patch metadata.
"""
from __future__ import annotations

import copy
import json
from collections.abc import Callable
from dataclasses import dataclass

import pytest
from helpers import apiserver, go_apply_merge
from helpers.metacontroller_writes import differences

pytestmark = pytest.mark.apiserver

KUBECTL_LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
SERVER_FIELDS = ("resourceVersion", "managedFields", "generation", "creationTimestamp", "uid")


def pod_template(*containers: dict, labels: dict | None = None, **spec) -> dict:
    return {"apiVersion": "v1", "kind": "PodTemplate",
            "metadata": {"name": "merge", "labels": labels or {"app": "merge"}},
            "template": {"metadata": {"labels": {"app": "merge"}}, "spec": {"containers": list(containers), **spec}}}


def container(name: str = "main", **fields) -> dict:
    return {"name": name, "image": "busybox", **fields}


def service(*ports: dict, labels: dict | None = None, **spec) -> dict:
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "merge", "labels": labels or {"app": "merge"}},
            "spec": {"clusterIP": "None", "selector": {"app": "merge"}, "ports": list(ports), **spec}}


def env(*pairs: tuple[str, str]) -> list[dict]:
    return [{"name": n, "value": v} for n, v in pairs]


def containers_of(obj: dict) -> list[dict]:
    return obj["template"]["spec"]["containers"]


@dataclass
class Case:
    last: dict  # what was applied before (the last-applied copy)
    other: Callable[[dict], None]  # another writer's edit of the stored object
    desired: dict
    differs: str = ""  # "": both merges must give one object; else why Metacontroller's differs,
    expected: tuple[str, ...] = ()  # and how: `differences(kubectl's, ours)`, or the server's refusal of ours


def nothing(obj: dict) -> None:
    pass


def add_label(obj: dict) -> None:
    obj["metadata"]["labels"]["other"] = "writer"


def add_env(obj: dict) -> None:
    containers_of(obj)[0]["env"].append({"name": "OTHER", "value": "x"})


def add_sidecar(obj: dict) -> None:
    containers_of(obj).append(container("other"))


def add_toleration_spread(obj: dict) -> None:
    obj["template"]["spec"]["topologySpreadConstraints"].append(
        {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "ScheduleAnyway"})


def add_item(obj: dict) -> None:
    obj["template"]["spec"]["volumes"][0]["configMap"]["items"].append({"key": "other", "path": "other"})


def add_service_port(obj: dict) -> None:
    obj["spec"]["ports"].append({"name": "other", "port": 9999})


CONFIG_VOLUME = {"name": "cfg", "configMap": {"name": "c", "items": [{"key": "a", "path": "a"}]}}
SPREAD = {"maxSkew": 1, "topologyKey": "host", "whenUnsatisfiable": "DoNotSchedule"}

CASES: dict[str, Case] = {
    # --- where both are defined to agree -------------------------------------------------------
    "labels-set-removed-and-another-writers-kept": Case(
        pod_template(container(), labels={"app": "merge", "old": "1"}), add_label,
        pod_template(container(), labels={"app": "merge", "new": "2"})),
    "env-by-name-changed-removed-and-another-writers-kept": Case(
        pod_template(container(env=env(("A", "1"), ("B", "2")))), add_env,
        pod_template(container(env=env(("A", "changed"))))),
    "env-entry-added-at-the-end": Case(
        pod_template(container(env=env(("A", "1")))), nothing,
        pod_template(container(env=env(("A", "1"), ("B", "2"))))),
    "containers-by-name-image-changed-and-another-writers-container-kept": Case(
        pod_template(container(), container("side")), add_sidecar,
        pod_template(container(image="busybox:1.36"), container("side"))),
    "container-ports-by-number-name-changed-and-one-removed": Case(
        pod_template(container(ports=[{"name": "a", "containerPort": 80}, {"name": "b", "containerPort": 81}])), nothing,
        pod_template(container(ports=[{"name": "web", "containerPort": 80}]))),
    "mounts-by-path-and-volumes-by-name": Case(
        pod_template(container(volumeMounts=[{"name": "d", "mountPath": "/d"}, {"name": "e", "mountPath": "/e"}]),
                     volumes=[{"name": "d", "emptyDir": {}}, {"name": "e", "emptyDir": {}}]), nothing,
        pod_template(container(volumeMounts=[{"name": "d", "mountPath": "/d", "readOnly": True}]),
                     volumes=[{"name": "d", "emptyDir": {}}])),
    "a-field-no-longer-desired-is-removed-and-server-defaults-kept": Case(
        pod_template(container(workingDir="/w"), activeDeadlineSeconds=60), nothing,
        pod_template(container())),
    "scalar-lists-replaced-whole": Case(
        pod_template(container(command=["a", "b"], args=["1"])), nothing,
        pod_template(container(command=["c"], args=["2", "3"]))),
    "service-ports-by-number-target-changed-defaults-kept": Case(
        service({"name": "a", "port": 1, "targetPort": 1}, {"name": "b", "port": 2}), nothing,
        service({"name": "a", "port": 1, "targetPort": 11}, {"name": "b", "port": 2})),
    "service-port-removed-and-another-writers-kept": Case(
        service({"name": "a", "port": 1}, {"name": "b", "port": 2}), add_service_port,
        service({"name": "a", "port": 1})),
    "service-selector-map-changed": Case(
        service({"name": "a", "port": 1}, selector={"app": "merge", "tier": "x"}), nothing,
        service({"name": "a", "port": 1}, selector={"app": "merge"})),
    # --- where Metacontroller's merge is not a strategic merge -----------------------------------
    "env-entry-added-in-the-middle": Case(
        pod_template(container(env=env(("A", "1"), ("C", "3")))), nothing,
        pod_template(container(env=env(("A", "1"), ("B", "2"), ("C", "3")))),
        differs="order: kubectl keeps the desired order; Metacontroller keeps the stored items first and "
                "appends new ones",
        expected=('.template.spec.containers[0].env[1].name: "B" -> "C"', '.template.spec.containers[0].env[1].value: "2" -> "3"',
                  '.template.spec.containers[0].env[2].name: "C" -> "B"', '.template.spec.containers[0].env[2].value: "3" -> "2"')),
    "config-map-items-keyed-by-path": Case(
        pod_template(container(), volumes=[CONFIG_VOLUME]), add_item,
        pod_template(container(), volumes=[CONFIG_VOLUME]),
        differs="a configMap's items are atomic in the API (kubectl replaces them, dropping the other writer's); "
                "Metacontroller merges them by path and keeps it",
        expected=('.template.spec.volumes[0].configMap.items: [{"key": "a", "path": "a"}] -> '
                  '[{"key": "a", "path": "a"}, {"key": "other", "path": "other"}]',)),
    "topology-spread-keyed-by-topology-key": Case(
        pod_template(container(), topologySpreadConstraints=[SPREAD]), add_toleration_spread,
        pod_template(container(), topologySpreadConstraints=[SPREAD]),
        differs="the API merges topologySpreadConstraints by topologyKey (kubectl keeps the other writer's); "
                "no item key is one Metacontroller knows, so it replaces the list",
        expected=('.template.spec.topologySpreadConstraints: [' + json.dumps(SPREAD) + ', ' + json.dumps(
            {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "ScheduleAnyway"}) + '] -> [' + json.dumps(SPREAD) + ']',)),
    "env-name-twice": Case(
        pod_template(container(env=env(("A", "1"), ("A", "2")))), nothing,
        pod_template(container(env=env(("A", "1"), ("A", "2")))),
        differs="two entries with one name: Metacontroller's list map keeps the last, written back for each "
                "(the hooks refuse such templates in InPlace children)",
        expected=('.template.spec.containers[0].env[0].value: "1" -> "2"',)),
    "service-port-number-on-tcp-and-udp": Case(
        service({"name": "dns-tcp", "port": 53}, {"name": "dns-udp", "port": 53, "protocol": "UDP"}), nothing,
        service({"name": "dns-tcp", "port": 53}, {"name": "dns-udp", "port": 53, "protocol": "UDP"}),
        differs="ports keyed by number alone: Metacontroller writes the UDP port twice and the server refuses "
                "that update, at every sync (the hooks refuse such templates)",
        expected=("refused", "spec.ports[1]: Duplicate value")),
}


def clean(obj: dict) -> dict:
    obj = copy.deepcopy(obj)
    for name in SERVER_FIELDS:
        obj["metadata"].pop(name, None)
    annotations = obj["metadata"].get("annotations") or {}
    annotations.pop(KUBECTL_LAST_APPLIED, None)
    if not annotations:
        obj["metadata"].pop("annotations", None)
    obj.pop("status", None)
    return obj


def stored_after_other(cp, namespace: str, case: Case) -> dict:
    """The object as created from `last` (with kubectl's last-applied copy), then edited by another writer."""
    first = copy.deepcopy(case.last)
    first["metadata"]["annotations"] = {KUBECTL_LAST_APPLIED: json.dumps(case.last)}
    verdict = apiserver.create(cp, first, namespace)
    assert verdict.accepted, verdict.message
    live = apiserver.get(cp, first["apiVersion"], first["kind"], first["metadata"]["name"], namespace)
    assert live is not None
    case.other(live)
    verdict = apiserver.update(cp, live, namespace)
    assert verdict.accepted, verdict.message
    assert verdict.stored is not None
    return verdict.stored


def by_kubectl(cp, namespace: str, desired: dict) -> dict:
    out = cp.kubectl("apply", "--server-side=false", "--dry-run=server", "-o", "json", "-n", namespace, "-f", "-",
                     input=json.dumps(desired))
    return dict(json.loads(out.stdout))


def by_port(cp, namespace: str, observed: dict, last: dict, desired: dict) -> apiserver.Verdict:
    return apiserver.update(cp, go_apply_merge.Merge(observed, last, desired), namespace, dry_run=True)


@pytest.mark.parametrize("name", list(CASES))
def test_the_port_merges_as_kubectl_apply_where_both_are_meant_to(control_plane, namespace, name):
    case = CASES[name]
    observed = stored_after_other(control_plane, namespace, case)
    real = clean(by_kubectl(control_plane, namespace, case.desired))
    ours = by_port(control_plane, namespace, observed, case.last, case.desired)
    if case.expected[:1] == ("refused",):
        assert not ours.accepted and case.expected[1] in ours.message, case.differs
        return
    assert ours.accepted, ours.message
    assert ours.stored is not None
    assert differences(real, clean(ours.stored)) == list(case.expected), case.differs or "both merges must agree"
