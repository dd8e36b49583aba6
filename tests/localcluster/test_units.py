"""Unit tests of the local cluster's pure parts: DNS rewriting, $(VAR) expansion, merge, config; and of the tests' plain store."""

from __future__ import annotations

import json
import textwrap

import pytest
from helpers.cluster import find_composite_controller, load_controller_config
from helpers.objectstore import ObjectBag

from localcluster.config import (
    DEFAULT_COMPOSITE_CONTROLLER,
    parse_composite_controller,
)
from localcluster.metacontroller import three_way_merge
from localcluster.node.dns import ClusterDNS
from localcluster.node.podenv import EnvError, expand, resolve_env
from localcluster.node.podprocess import ContainerRun, backoff, exit_code, settle
from localcluster.node.podstatus import PodStatusReport, pod_phase
from localcluster.store import StoreError


def dns_with(*services: str) -> ClusterDNS:
    """The env-rewriting fallback (names to loopback), over a store holding these Services."""
    store = ObjectBag()
    for name in services:
        store.create({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name}, "spec": {"clusterIP": "None"}})
    return ClusterDNS(store, strict=False)


def test_service_names_in_env_resolve_to_loopback_with_one_port_per_service_port():
    dns = dns_with("job-scheduler-0", "job-worker-0")
    env = dns.rewrite_env("default", {
        "DMLC_PS_ROOT_URI": "job-scheduler-0",
        "DMLC_PS_ROOT_PORT": "9091",
        "PEER": "job-worker-0.default.svc.cluster.local:9091",
        "OTHER": "not-a-service",
    })
    scheduler_port = dns.local_port("default", "job-scheduler-0", 9091)
    assert env["DMLC_PS_ROOT_URI"] == "127.0.0.1"
    assert env["DMLC_PS_ROOT_PORT"] == str(scheduler_port)
    assert env["PEER"] == f"127.0.0.1:{dns.local_port('default', 'job-worker-0', 9091)}"
    assert env["OTHER"] == "not-a-service"
    assert scheduler_port != dns.local_port("default", "job-worker-0", 9091)


def test_mx_config_urls_and_ports_are_rewritten_and_stay_stable():
    dns = dns_with("a-scheduler-0", "a-worker-0", "a-worker-1")
    mx_config = json.dumps({"cluster": {"scheduler": [{"port": 9091, "url": "a-scheduler-0"}],
                                        "worker": [{"port": 9091, "url": "a-worker-0"}, {"port": 9091, "url": "a-worker-1"}]},
                            "labels": {"scheduler": ""}, "task": {"index": 0, "type": "worker"}}, sort_keys=True, separators=(",", ":"))
    first = json.loads(dns.rewrite_env("default", {"MX_CONFIG": mx_config})["MX_CONFIG"])
    again = json.loads(dns.rewrite_env("default", {"MX_CONFIG": mx_config})["MX_CONFIG"])
    assert first == again  # a restarted pod finds its peers on the same ports
    urls = [entry["url"] for entries in first["cluster"].values() for entry in entries]
    ports = [entry["port"] for entries in first["cluster"].values() for entry in entries]
    assert urls == ["127.0.0.1"] * 3
    assert len(set(ports)) == 3 and 9091 not in ports
    assert first["task"] == {"index": 0, "type": "worker"}


def test_two_jobs_never_share_a_port():
    dns = dns_with("a-scheduler-0", "b-scheduler-0")
    a = dns.rewrite_env("default", {"DMLC_PS_ROOT_URI": "a-scheduler-0", "DMLC_PS_ROOT_PORT": "9091"})
    b = dns.rewrite_env("default", {"DMLC_PS_ROOT_URI": "b-scheduler-0", "DMLC_PS_ROOT_PORT": "9091"})
    assert a["DMLC_PS_ROOT_PORT"] != b["DMLC_PS_ROOT_PORT"]


@pytest.mark.parametrize(
    "value, expected",
    [
        ("$(A)-x", "1-x"),
        ("$$(A)", "$(A)"),
        ("$(MISSING)", "$(MISSING)"),
        ("no refs", "no refs"),
        ("$(A)$(B)", "12"),
        ("$$", "$"),
        ("$$$$", "$$"),
        ("$$$(A)", "$1"),
        ("$x$", "$x$"),
        ("a$", "a$"),
        ("$(A", "$(A"),
        ("$(", "$("),
        ("$()", "$()"),
        ("$(A B)", "3"),
        ("$($(A))", "$($(A))"),
        ("$(A)$$(B)", "1$(B)"),
    ],
    ids=lambda v: repr(v),
)
def test_var_expansion_follows_kubernetes(value, expected):
    assert expand(value, {"A": "1", "B": "2", "A B": "3"}) == expected


POD = {"metadata": {"name": "p", "namespace": "ns", "uid": "u1", "labels": {"app": "x"}},
       "spec": {"containers": []}}
CLUSTER = {"metadata": {"name": "j-cluster"}, "data": {"cluster": '{"w":[1]}', "dollar": "$(A)"}}


def resolve(env: list[dict]) -> dict[str, str]:
    return resolve_env({"name": "c", "env": env}, POD,
                       config_map={"j-cluster": CLUSTER}.get, runtime={"status.podIP": "10.0.0.7"})


def test_env_is_resolved_in_order_with_config_maps_and_pod_fields():
    env = resolve([
        {"name": "EARLY", "value": "$(LATE)"},
        {"name": "C", "valueFrom": {"configMapKeyRef": {"name": "j-cluster", "key": "cluster"}}},
        {"name": "RAW", "valueFrom": {"configMapKeyRef": {"name": "j-cluster", "key": "dollar"}}},
        {"name": "A", "value": "a"},
        {"name": "LATE", "value": "late"},
        {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        {"name": "APP", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}},
        {"name": "ALL", "value": '{"c":$(C),"ns":"$(HOME)","pod":"$(POD)@$(IP)","raw":"$(RAW)","cost":"$$5"}'},
        {"name": "EMPTY"},
    ])
    assert env == {
        "EARLY": "$(LATE)",  # only entries defined before are expanded
        "C": '{"w":[1]}',
        "RAW": "$(A)",  # a value from a ConfigMap is never expanded itself
        "A": "a", "LATE": "late", "POD": "p", "IP": "10.0.0.7", "APP": "x",
        "ALL": '{"c":{"w":[1]},"ns":"$(HOME)","pod":"p@10.0.0.7","raw":"$(A)","cost":"$5"}',  # no host env
        "EMPTY": "",
    }


@pytest.mark.parametrize("ref, error", [
    ({"name": "nope", "key": "cluster"}, 'configmap "nope" not found'),
    ({"name": "j-cluster", "key": "nope"}, "couldn't find key nope in ConfigMap ns/j-cluster"),
], ids=["missing-config-map", "missing-key"])
def test_a_missing_config_map_value_stops_the_container_unless_optional(ref, error):
    with pytest.raises(EnvError, match=error):
        resolve([{"name": "X", "valueFrom": {"configMapKeyRef": ref}}])
    assert resolve([{"name": "X", "valueFrom": {"configMapKeyRef": {**ref, "optional": True}}}]) == {}


def test_signals_are_reported_as_128_plus_the_signal():
    assert exit_code(-9) == 137 and exit_code(-15) == 143 and exit_code(3) == 3


def _ended(code: int | None, *, name: str = "c") -> ContainerRun:
    """A container whose process ended with `code` (None: it never ran to an exit)."""
    run = ContainerRun({"name": name, "image": "img"})
    run.exit_code = code
    run.state = {"terminated": {"exitCode": code, "reason": "Completed" if code == 0 else "Error"}}
    return run


@pytest.mark.parametrize(("policy", "codes", "phase"), [
    ("Never", [0, 0], "Succeeded"),
    ("Never", [0, 1], "Failed"),
    ("OnFailure", [0, 0], "Succeeded"),
    ("OnFailure", [0, 1], "Running"),  # the failed one will be restarted
    ("Always", [0, 0], "Running"),
])
def test_the_phase_of_ended_containers_follows_the_restart_policy(policy, codes, phase):
    runs = [_ended(code, name=f"c{i}") for i, code in enumerate(codes)]
    assert pod_phase(runs, policy=policy, containers_started=True, failed=False) == phase


def test_the_phase_is_pending_before_the_containers_start_and_failed_when_the_pod_failed():
    waiting = ContainerRun({"name": "c"})
    assert pod_phase([waiting], policy="Never", containers_started=False, failed=False) == "Pending"
    waiting.config_retry_at = 1.0  # CreateContainerConfigError: waits for its ConfigMap
    assert pod_phase([waiting], policy="Never", containers_started=True, failed=False) == "Pending"
    assert pod_phase([_ended(0)], policy="Always", containers_started=True, failed=True) == "Failed"


@pytest.mark.parametrize(("policy", "code", "restarts"), [
    ("Never", 1, False), ("OnFailure", 0, False), ("OnFailure", 1, True), ("Always", 0, True),
])
def test_settling_an_exit_restarts_it_after_the_backoff_only_when_the_policy_says_so(policy, code, restarts):
    run = _ended(code)
    run.restart_count = 2
    settle(run, policy=policy, now=100.0, restart_backoff=(0.5, 8.0))
    assert run.settled
    if restarts:
        assert run.restart_at == 102.0  # 0.5 doubled twice
        assert run.state["waiting"]["reason"] == "CrashLoopBackOff"
        assert run.last_state == {"terminated": {"exitCode": code, "reason": "Completed" if code == 0 else "Error"}}
    else:
        assert run.restart_at is None and "terminated" in run.state


def test_the_restart_backoff_doubles_up_to_its_cap():
    run = ContainerRun({"name": "c"})
    delays = []
    for count in range(7):
        run.restart_count = count
        delays.append(backoff(run, (0.5, 8.0)))
    assert delays == [0.5, 1.0, 2.0, 4.0, 8.0, 8.0, 8.0]


def test_the_status_reports_readiness_and_an_eviction():
    store = ObjectBag()
    report = PodStatusReport(store, "default", "p")
    running = ContainerRun({"name": "c", "image": "img"}, state={"running": {"startedAt": "t"}})
    status = report.compose("Running", [running], [])
    conditions = {c["type"]: c for c in status["conditions"]}
    assert conditions["Ready"]["status"] == conditions["ContainersReady"]["status"] == "True"
    assert "PodScheduled" not in conditions  # the scheduler's
    assert status["containerStatuses"][0]["ready"] is True and "initContainerStatuses" not in status
    report.evict("The node was low on resource.")
    status = report.compose("Failed", [_ended(137)], [ContainerRun({"name": "i"}, init=True)])
    conditions = {c["type"]: c for c in status["conditions"]}
    assert conditions["Ready"]["status"] == "False" and report.evicted
    assert (status["reason"], status["message"]) == ("Evicted", "The node was low on resource.")
    assert status["initContainerStatuses"][0]["ready"] is False
    report.conditions["Ready"] = ("False", "2000-01-01T00:00:00Z")
    again = {c["type"]: c for c in report.compose("Failed", [_ended(137)], [])["conditions"]}
    assert again["Ready"]["lastTransitionTime"] == "2000-01-01T00:00:00Z"  # no transition: the time stays


def test_three_way_merge_removes_what_was_applied_before_and_keeps_server_fields():
    observed = {"spec": {"ports": [{"name": "p", "port": 1, "protocol": "TCP"}], "clusterIP": "None", "old": 1, "type": "ClusterIP"}}
    last = {"spec": {"ports": [{"name": "p", "port": 1}], "clusterIP": "None", "old": 1}}
    desired = {"spec": {"ports": [{"name": "p", "port": 1}], "clusterIP": "None"}}
    merged = three_way_merge(observed, last, desired)
    assert merged == {"spec": {"ports": [{"name": "p", "port": 1, "protocol": "TCP"}], "clusterIP": "None", "type": "ClusterIP"}}


def test_three_way_merge_replaces_scalar_lists_atomically():
    assert three_way_merge({"a": [1, 2, 3]}, {"a": [1, 2]}, {"a": [4]}) == {"a": [4]}


def test_the_plain_store_assigns_identity_and_bumps_generation_only_on_spec_change():
    """The bookkeeping the scenario harness relies on (helpers/objectstore.py)."""
    store = ObjectBag()
    created = store.create({"apiVersion": "kubeflow.org/v1", "kind": "MXJob", "metadata": {"name": "j"}, "spec": {"x": 1}})
    assert created["metadata"]["uid"] and created["metadata"]["generation"] == 1 and created["metadata"]["creationTimestamp"]
    assert store.update_status("kubeflow.org/v1", "MXJob", "default", "j", {"a": 1})
    assert not store.update_status("kubeflow.org/v1", "MXJob", "default", "j", {"a": 1})  # unchanged: no write
    current = store.get("kubeflow.org/v1", "MXJob", "default", "j")
    assert current["metadata"]["generation"] == 1
    current["spec"]["x"] = 2
    assert store.update(current)["metadata"]["generation"] == 2
    with pytest.raises(StoreError):
        store.create({"apiVersion": "kubeflow.org/v1", "kind": "MXJob", "metadata": {"name": "j"}})


def test_in_the_plain_store_bound_pods_terminate_gracefully_unbound_ones_go_at_once():
    store = ObjectBag()
    for name, node in (("bound", "localcluster"), ("unbound", None)):
        spec = {"containers": [{"name": "c"}], **({"nodeName": node} if node else {})}
        store.create({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec})
        store.delete("v1", "Pod", "default", name)
    bound = store.get("v1", "Pod", "default", "bound")
    assert bound["metadata"]["deletionTimestamp"] and bound["metadata"]["deletionGracePeriodSeconds"] == 30
    assert store.get("v1", "Pod", "default", "unbound") is None


def test_the_shipped_composite_controller_is_what_the_stand_in_follows():
    config = load_controller_config()
    assert config.parent_kind == "MXJob" and config.generate_selector
    assert [(r["kind"], r["updateStrategy"]) for r in config.children] == [
        ("Pod", "OnDelete"), ("Service", "InPlace"), ("ConfigMap", "OnDelete"),
        # Progress reporting's children (runPolicy.progress): the job's own account and its right to report.
        ("ServiceAccount", "OnDelete"), ("Role", "OnDelete"), ("RoleBinding", "OnDelete")]
    assert config.hook_path == "/sync"
    assert [config.child_key(r) for r in config.children] == [
        "Pod.v1", "Service.v1", "ConfigMap.v1", "ServiceAccount.v1", "Role.rbac.authorization.k8s.io/v1",
        "RoleBinding.rbac.authorization.k8s.io/v1"]


def test_the_composite_controller_is_found_by_kind_in_any_file(tmp_path):
    (tmp_path / "a.yaml").write_text("kind: Service\napiVersion: v1\nmetadata: {name: x}\n")
    (tmp_path / "z.yaml").write_text(textwrap.dedent("""\
        apiVersion: v1
        kind: Namespace
        metadata: {name: n}
        ---
        apiVersion: metacontroller.k8s.io/v1alpha1
        kind: CompositeController
        metadata: {name: other}
        spec:
          generateSelector: true
          parentResource: {apiVersion: kubeflow.org/v1, resource: mxjobs}
          childResources: [{apiVersion: v1, resource: pods, updateStrategy: {method: Recreate}}]
          hooks: {sync: {webhook: {url: "http://h.ns:8080/hooks/sync", timeout: 500ms}}}
        """))
    found = find_composite_controller(tmp_path)
    assert found is not None
    config = parse_composite_controller(*found)
    assert config.name == "other" and config.hook_path == "/hooks/sync" and config.hook_timeout_seconds == 0.5
    assert config.children[0]["updateStrategy"] == "Recreate"
    assert parse_composite_controller(DEFAULT_COMPOSITE_CONTROLLER, "default").children[1]["kind"] == "Service"


def test_the_kubelets_status_write_keeps_the_conditions_others_own():
    """The scheduler's PodScheduled and DisruptionTarget stay as the pod has them; the kubelet's own are replaced."""
    store = ObjectBag()
    store.create({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"nodeName": "localcluster"}})
    theirs = [{"type": "PodScheduled", "status": "True"},
              {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler", "message": "m"}]
    store.update_status("v1", "Pod", "default", "p", {"phase": "Running", "conditions": [*theirs, {"type": "Ready", "status": "True"}]})
    report = PodStatusReport(store, "default", "p")
    report.write(report.compose("Failed", [_ended(137)], []))
    written = store.get("v1", "Pod", "default", "p")["status"]
    conditions = {c["type"]: c for c in written["conditions"]}
    assert [conditions["PodScheduled"], conditions["DisruptionTarget"]] == theirs
    assert conditions["Ready"]["status"] == "False" and written["phase"] == "Failed"
