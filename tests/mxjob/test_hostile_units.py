"""The hostile-input rules one at a time: spec checks with field paths, bounds, the Service's
ports, status read back defensively, and the shape check of a sync request."""
from __future__ import annotations

import copy
from datetime import UTC, datetime

import pytest
from helpers.mcsim import T0, Sim, mxjob
from helpers.requests import mxjob_sync_request

from hooks.mxjob.spec import SpecError, parse_mxjob
from hooks.mxjob.sync import sync_mxjob
from hooks.mxjob.vocabulary import STATE_ORDER
from hooks.shared.errors import InvalidRequest
from hooks.shared.merge import collapsed
from hooks.shared.status import OldStatus, plus_seconds

MAIN = "spec.mxReplicaSpecs.Worker.template.spec.containers[0]"
MXNET = "spec.mxReplicaSpecs.Worker.template.spec.containers[name=mxnet]"


def with_main(**fields) -> dict:
    """A Worker-only job whose mxnet container has these extra fields."""
    return mxjob(replicas={"Worker": {"template": {"spec": {"containers": [
        {"name": "mxnet", "image": "mxjob/mxnet:1.9.1", **fields}]}}}})


def problems_of(parent: dict) -> list[str]:
    with pytest.raises(SpecError) as err:
        parse_mxjob(parent)
    return err.value.problems


def with_pod(**fields) -> dict:
    """A Worker-only job whose pod spec has these extra fields."""
    return mxjob(replicas={"Worker": {"template": {"spec": {
        "containers": [{"name": "mxnet", "image": "mxjob/mxnet:1.9.1"}], **fields}}}})


POD = "spec.mxReplicaSpecs.Worker.template.spec"

BAD_SPECS = {
    # The pod spec around the containers: name fields (two are read under gang scheduling), init
    # containers (their names share the pod's container namespace) and volumes.
    "scheduler-name-a-number": (with_pod(schedulerName=5), f"{POD}.schedulerName: must be a string (a name)"),
    "priority-class-a-map": (with_pod(priorityClassName={}), f"{POD}.priorityClassName: must be a string (a name)"),
    "hostname-a-number": (with_pod(hostname=5), f"{POD}.hostname: must be a string (a name)"),
    "node-name-a-number": (with_pod(nodeName=5), f"{POD}.nodeName: must be a string (a name)"),
    "init-containers-a-string": (with_pod(initContainers="x"), f"{POD}.initContainers: must be a list"),
    "init-container-named-mxnet": (with_pod(initContainers=[{"name": "mxnet", "image": "i"}]),
                                   f"{POD}.initContainers[0].name: 'mxnet' is used by another container"),
    "init-container-without-image": (with_pod(initContainers=[{"name": "setup"}]),
                                     f"{POD}.initContainers[0].image: must be a non-empty image"),
    "volumes-a-map": (with_pod(volumes={"data": {}}), f"{POD}.volumes: must be a list"),
    "two-volumes-one-name": (with_pod(volumes=[{"name": "d", "emptyDir": {}}, {"name": "d", "emptyDir": {}}]),
                             f"{POD}.volumes[1].name: 'd' names two volumes"),
    "image-with-a-trailing-space": (with_main(image="mxjob/mxnet:1.9.1 "),
                                    f"{MXNET}.image: must not begin or end with white space"),
    "env-a-map": (with_main(env={"A": "1"}), f"{MAIN}.env: must be a list"),
    "env-entry-a-string": (with_main(env=["A=1"]), f"{MAIN}.env[0]: must be an object"),
    "env-without-name": (with_main(env=[{"value": "1"}]), f"{MAIN}.env[0].name:"),
    "env-name-with-equals": (with_main(env=[{"name": "A=B", "value": "1"}]), f"{MAIN}.env[0].name:"),
    "env-value-a-number": (with_main(env=[{"name": "A", "value": 1}]), f"{MAIN}.env[0].value: must be a string"),
    "env-value-and-valueFrom": (with_main(env=[{"name": "A", "value": "1", "valueFrom": {}}]),
                                f"{MAIN}.env[0]: give value or valueFrom"),
    # The API server refuses a valueFrom without exactly one source (tests/install/test_apiserver_verdicts.py).
    "env-valueFrom-without-source": (with_main(env=[{"name": "A", "valueFrom": {}}]),
                                     f"{MAIN}.env[0].valueFrom: must give exactly one of configMapKeyRef, fieldRef"),
    "env-valueFrom-with-two-sources": (with_main(env=[{"name": "A", "valueFrom": {
        "fieldRef": {"fieldPath": "metadata.name"}, "configMapKeyRef": {"name": "c", "key": "k"}}}]),
        f"{MAIN}.env[0].valueFrom: must give exactly one of"),
    "ports-not-a-list": (with_main(ports=7), f"{MAIN}.ports: must be a list"),
    "port-a-string": (with_main(ports=["80"]), f"{MAIN}.ports[0]: must be an object"),
    "port-without-number": (with_main(ports=[{"name": "http"}]), f"{MAIN}.ports[0].containerPort:"),
    "port-number-a-string": (with_main(ports=[{"containerPort": "80"}]), f"{MAIN}.ports[0].containerPort:"),
    "port-number-zero": (with_main(ports=[{"containerPort": 0}]), f"{MAIN}.ports[0].containerPort:"),
    "port-name-too-long": (with_main(ports=[{"name": "a-very-long-port-name", "containerPort": 80}]),
                           f"{MAIN}.ports[0].name:"),
    "port-names-twice": (with_main(ports=[{"name": "a", "containerPort": 80},
                                          {"name": "a", "containerPort": 81}]), f"{MAIN}.ports[1].name:"),
    "port-protocol-http": (with_main(ports=[{"containerPort": 80, "protocol": "HTTP"}]),
                           f"{MAIN}.ports[0].protocol:"),
    "same-port-twice": (with_main(ports=[{"containerPort": 53, "protocol": "UDP"},
                                         {"name": "dns", "containerPort": 53, "protocol": "UDP"}]),
                        "spec.mxReplicaSpecs.Worker.template.spec.containers[name=mxnet].ports[1].containerPort: "
                        "port 53 is also ports[0]"),
    # Metacontroller merges a Service's ports by number alone: TCP and UDP on one number collapse.
    "one-number-on-two-protocols": (with_main(ports=[{"containerPort": 53, "protocol": "UDP"}, {"containerPort": 53}]),
                                    f"{MXNET}.ports[1].containerPort: port 53 is also ports[0]"),
    "udp-on-the-mxjob-port-number": (with_main(ports=[{"containerPort": 9091, "protocol": "UDP"}]),
                                     f"{MXNET}.ports[0].containerPort: 9091 is the number of the mxjob-port"),
    "port-protocol-a-list": (with_main(ports=[{"containerPort": 80, "protocol": ["TCP"]}]),
                             f"{MAIN}.ports[0].protocol: must be one of TCP, UDP, SCTP (a string), got a list"),
    "port-protocol-an-object": (with_main(ports=[{"containerPort": 80, "protocol": {"TCP": 1}}]),
                                f"{MAIN}.ports[0].protocol: must be one of TCP, UDP, SCTP (a string), got an object"),
    "container-name-a-number": (mxjob(replicas={"Worker": {"template": {"spec": {"containers": [
        {"name": "mxnet", "image": "i"}, {"name": 5}]}}}}),
        "spec.mxReplicaSpecs.Worker.template.spec.containers[1].name:"),
    "container-name-twice": (mxjob(replicas={"Worker": {"template": {"spec": {"containers": [
        {"name": "mxnet", "image": "i"}, {"name": "mxnet", "image": "j"}]}}}}),
        "spec.mxReplicaSpecs.Worker.template.spec.containers[1].name:"),
    "template-metadata-a-string": (mxjob(replicas={"Worker": {"template": {
        "metadata": "x", "spec": {"containers": [{"name": "mxnet", "image": "i"}]}}}}),
        "spec.mxReplicaSpecs.Worker.template.metadata: must be an object"),
    "label-value-a-number": (mxjob(replicas={"Worker": {"template": {
        "metadata": {"labels": {"team": 5}}, "spec": {"containers": [{"name": "mxnet", "image": "i"}]}}}}),
        "spec.mxReplicaSpecs.Worker.template.metadata.labels['team']: the value must be a string"),
    "label-key-invalid": (mxjob(replicas={"Worker": {"template": {
        "metadata": {"labels": {"a b": "c"}}, "spec": {"containers": [{"name": "mxnet", "image": "i"}]}}}}),
        "spec.mxReplicaSpecs.Worker.template.metadata.labels['a b']: not a valid label key"),
    "annotations-a-list": (mxjob(replicas={"Worker": {"template": {
        "metadata": {"annotations": ["a"]}, "spec": {"containers": [{"name": "mxnet", "image": "i"}]}}}}),
        "spec.mxReplicaSpecs.Worker.template.metadata.annotations: must be a map"),
    "restartPolicy-empty-object": (mxjob(replicas={"Worker": {"restartPolicy": {}}}),
                                   "spec.mxReplicaSpecs.Worker.restartPolicy: {} is not one of"),
    "label-a-number": (mxjob(replicas={"Worker": {"label": 5}}), "spec.mxReplicaSpecs.Worker.label:"),
    "runPolicy-a-list": (mxjob(replicas={"Worker": 1}, runPolicy=[]), "spec.runPolicy: must be an object"),
    "jobMode-empty": (mxjob(replicas={"Worker": 1}, jobMode=""), "spec.jobMode: '' is not one of"),
    "replicas-int32-max": (mxjob(replicas={"Worker": 2**31 - 1}), "spec.mxReplicaSpecs.Worker.replicas:"),
    "deadline-int64-max": (mxjob(replicas={"Worker": 1}, runPolicy={"activeDeadlineSeconds": 2**63 - 1}),
                           "spec.runPolicy.activeDeadlineSeconds: must be a non-negative integer of at most"),
    "ttl-over-int32": (mxjob(replicas={"Worker": 1}, ttlSecondsAfterFinished=2**31),
                       "spec.ttlSecondsAfterFinished:"),
}


@pytest.mark.parametrize("parent,start", BAD_SPECS.values(), ids=BAD_SPECS.keys())
def test_bad_template_or_bound_is_reported_with_its_field_path(parent, start):
    problems = problems_of(parent)
    assert any(p.startswith(start) for p in problems), problems


def test_a_hostile_value_is_cut_short_in_the_message_and_problems_are_capped():
    parent = mxjob(replicas={"Worker": 1}, jobMode="x" * 100_000)
    parent["spec"]["mxReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["env"] = \
        [{"name": ""}] * 100
    problems = problems_of(parent)
    assert len(problems) == 21 and problems[-1] == "and 81 more problems"
    assert max(len(p) for p in problems) < 200


def first_sync(parent: dict) -> dict:
    return sync_mxjob(mxjob_sync_request(parent), now=T0)


SERVICE_PORTS = {
    "user-port-on-the-default-number": ([{"name": "ps", "containerPort": 9091}],
                                        [("ps", 9091, "TCP")]),
    "unnamed-udp-port": ([{"containerPort": 53, "protocol": "UDP"}], [("port-53", 53, "UDP"), ("mxjob-port", 9091, "TCP")]),
    "udp-named-mxjob-port": ([{"name": "mxjob-port", "containerPort": 9091, "protocol": "UDP"}],
                             [("mxjob-port", 9091, "UDP")]),
}


@pytest.mark.parametrize("ports,expected", SERVICE_PORTS.values(), ids=SERVICE_PORTS.keys())
def test_service_ports_are_unique_by_number_and_name(admission, ports, expected):
    answer = first_sync(with_main(ports=ports))
    service = next(c for c in answer["children"] if c["kind"] == "Service")
    assert [(p["name"], p["port"], p["protocol"]) for p in service["spec"]["ports"]] == expected
    if admission is not None:
        assert admission.refusals(answer["children"]) == []  # the real API server's verdict
    assert collapsed(service["spec"]["ports"]) == []  # Metacontroller's merge keeps every port


STATUS_IGNORED = {
    "status-a-number": (5, "status "),
    "conditions-an-object": ({"conditions": {}}, "status.conditions "),
    "condition-without-type": ({"conditions": [{"status": "True"}]}, "status.conditions[0] "),
    "condition-type-repeated": ({"conditions": [{"type": "Created", "status": "True"}] * 2},
                                "status.conditions[1] "),
    "condition-time-without-zone": ({"conditions": [{"type": "Created", "status": "True",
                                                     "lastUpdateTime": "2026-01-01T00:00:00"}]},
                                    "status.conditions[0] "),
    "startTime-without-zone": ({"startTime": "2026-01-01T00:00:00"}, "status.startTime "),
    "startTime-empty": ({"startTime": ""}, "status.startTime "),
    "restartCount-a-float": ({"restartCount": 1.5}, "status.restartCount "),
    "restartCount-over-int32": ({"restartCount": 2**40}, "status.restartCount "),
    "restartHistory-a-list": ({"restartHistory": []}, "status.restartHistory "),
    "restart-record-with-a-list": ({"restartHistory": {"p": {"recreations": [1]}}},
                                   "status.restartHistory[p] "),
}


@pytest.mark.parametrize("raw,prefix", STATUS_IGNORED.values(), ids=STATUS_IGNORED.keys())
def test_a_status_field_of_another_shape_is_ignored_with_a_warning(raw, prefix):
    parent = mxjob(replicas={"Worker": 1})
    parent["status"] = raw
    status = first_sync(parent)["status"]
    assert any(w.startswith(prefix) for w in status["statusWarnings"]), status
    # Rewritten in the hook's own shape: read back, it warns of nothing new.
    parent["status"] = status
    assert first_sync(parent)["status"] == status


@pytest.mark.parametrize("text,completed", [
    pytest.param("0-1", "0-1", id="written-form"),
    pytest.param("0-2147483647", None, id="beyond-the-replicas"),
    pytest.param("1,0", None, id="descending"),
    pytest.param("0-1,1", None, id="overlapping"),
    pytest.param("0,1", None, id="adjacent-not-merged"),
    pytest.param("0-1," * 1000, None, id="repeated-ranges"),
    pytest.param("x", None, id="not-a-number"),
])
def test_completed_indexes_are_read_only_in_the_written_form(text, completed):
    parent = mxjob(replicas={"Worker": 2}, runPolicy={"cleanPodPolicy": "None"})
    parent["status"] = {"replicaStatuses": {"Worker": {"completedIndexes": text}}}
    status = first_sync(parent)["status"]
    assert status["replicaStatuses"]["Worker"].get("completedIndexes") == completed
    assert ("statusWarnings" in status) is (completed is None)


def test_warnings_are_kept_as_a_record_and_capped():
    old = OldStatus({"statusWarnings": [f"w{i}" for i in range(10)], "startTime": "never"}, condition_types=STATE_ORDER)
    assert old.time("startTime") is None
    warnings = old.warnings()
    assert len(warnings) == 10 and warnings[0] == "w1" and warnings[-1].startswith("status.startTime")


def test_a_deadline_past_year_9999_never_fires():
    assert plus_seconds(datetime(9999, 12, 31, tzinfo=UTC), 2**31 - 1) is None
    sim = Sim(mxjob(replicas={"Worker": 1}, runPolicy={"activeDeadlineSeconds": 2**31 - 1}))
    sim.set_parent_status({"startTime": "9999-12-31T23:59:59Z"})
    answer = sim.sync()
    assert "resyncAfterSeconds" not in answer
    assert answer["status"]["startTime"] == "9999-12-31T23:59:59Z"


def test_a_lost_completion_time_is_set_so_the_ttl_still_fires():
    sim = Sim(mxjob(replicas={"Worker": 1}, runPolicy={"ttlSecondsAfterFinished": 60}))
    sim.sync()
    sim.set_phase("mx-worker-0", "Succeeded", exit_code=0)
    sim.sync()
    sim.set_parent_status({k: v for k, v in sim.status.items() if k != "completionTime"})
    sim.tick(10)
    # The outcome record remembers it...
    answer = sync_mxjob(sim.request(), now=sim.now)
    assert answer["status"]["completionTime"] == "2026-11-21T10:00:00Z"
    assert answer["resyncAfterSeconds"] == 50
    # ...and without one (a job finished before records existed) the TTL counts from now.
    sim.remove("v1", "ConfigMap", "mx-outcome")
    answer = sim.sync()
    assert answer["status"]["completionTime"] == "2026-11-21T10:00:10Z"
    sim.sync()
    assert sim.last["resyncAfterSeconds"] == 60


MALFORMED = {
    "name-a-number": (("parent", "metadata", "name"), 5, "parent.metadata.name"),
    "namespace-a-list": (("parent", "metadata", "namespace"), [], "parent.metadata.namespace"),
    "pod-a-number": (("children", "Pod.v1", "mx-worker-0"), 5, "children[Pod.v1][mx-worker-0]: must be an object"),
    "pod-status-a-string": (("children", "Pod.v1", "mx-worker-0", "status"), "x",
                            "children[Pod.v1][mx-worker-0].status: must be an object"),
    "config-map-data-not-strings": (("children", "ConfigMap.v1"),
                                    {"mx-cluster": {"metadata": {"name": "mx-cluster"}, "data": {"cluster": 5}}},
                                    "children[ConfigMap.v1][mx-cluster].data: must be a string map"),
    "pod-annotations-a-string": (("children", "Pod.v1", "mx-worker-0", "metadata", "annotations"), "x",
                                 "children[Pod.v1][mx-worker-0].metadata.annotations: must be a string map"),
    "pod-named-like-another": (("children", "Pod.v1", "mx-worker-0", "metadata", "name"), "other",
                               "children[Pod.v1][mx-worker-0].metadata.name: must equal the key"),
    "exit-code-a-string": (("children", "Pod.v1", "mx-worker-0", "status", "containerStatuses"),
                           [{"name": "mxnet", "state": {"terminated": {"exitCode": "1"}}}],
                           "children[Pod.v1][mx-worker-0].status.containerStatuses[0].state.terminated.exitCode"),
}


@pytest.mark.parametrize("path,value,message", MALFORMED.values(), ids=MALFORMED.keys())
def test_a_malformed_request_is_invalid_and_names_the_field(path, value, message):
    sim = Sim(mxjob(replicas={"Worker": 1}))
    sim.sync()
    request = copy.deepcopy(sim.request())
    node = request
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = value
    with pytest.raises(InvalidRequest) as err:
        sync_mxjob(request, now=sim.now)
    assert str(err.value).startswith(message), str(err.value)


@pytest.mark.parametrize("kind,name", [("Pod.v1", "mx-worker-0"), ("Service.v1", "mx-worker-0")])
def test_a_child_with_null_metadata_is_read_as_one_without(kind, name):
    sim = Sim(mxjob(replicas={"Worker": 1}))
    sim.sync()
    request = sim.request()
    request["children"][kind][name]["metadata"] = None
    answer = sync_mxjob(request, now=sim.now)
    assert {(c["kind"], c["metadata"]["name"]) for c in answer["children"]} == \
        {("Pod", "mx-worker-0"), ("Service", "mx-worker-0"), ("ConfigMap", "mx-cluster")}


def test_empty_pod_name_fields_read_as_unset_as_on_the_api_server():
    # Helm charts often write `priorityClassName: ""`; the API server accepts it.
    parse_mxjob(with_pod(schedulerName="", priorityClassName="", serviceAccountName="", hostname=""))
