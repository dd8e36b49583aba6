"""Gang scheduling: the controller's PodGroup rule, schedulingPolicy, the PodGroup and the pod marks."""
from __future__ import annotations

import copy
from pathlib import Path

import pytest
from helpers import yamlio
from helpers.mcsim import T0, Sim, gang_controller, mxjob
from openapi_schema_validator import OAS30Validator, oas30_format_checker

from hooks.mxjob.sync import sync_mxjob
from hooks.shared.errors import InvalidRequest
from hooks.shared.gang import (
    COSCHEDULING_API,
    KUBERNETES_API,
    VOLCANO_API,
    Gang,
    min_resources,
    parse_scheduling_policy,
    read_gang,
)
from hooks.shared.quantity import parse_quantity

DATA = Path(__file__).resolve().parents[2] / "localcluster" / "thirdparty"
UPSTREAM_SPEC = {VOLCANO_API: "volcano-v1beta1.yaml", COSCHEDULING_API: "scheduler-plugins-v1alpha1.yaml"}


def first_sync(parent: dict, controller: dict) -> dict:
    return Sim(parent, controller=controller).sync()


def pods_sync(parent: dict, controller: dict) -> dict:
    """The answer once the PodGroup exists: the first one holds no pods (PodGroup first)."""
    sim = Sim(parent, controller=controller)
    sim.sync()
    return sim.sync()


def children(answer: dict, kind: str) -> list[dict]:
    return [c for c in answer["children"] if c["kind"] == kind]


# --- the CompositeController turns it on -----------------------------------------------------------


@pytest.mark.parametrize(("controller", "expected"), [
    pytest.param(None, None, id="no-controller"),
    pytest.param({}, None, id="empty-controller"),
    pytest.param({"spec": {"childResources": [{"apiVersion": "v1", "resource": "pods"}]}}, None,
                 id="no-podgroups-rule"),
    pytest.param(gang_controller(VOLCANO_API), Gang(VOLCANO_API, "volcano"), id="volcano-default"),
    pytest.param(gang_controller(COSCHEDULING_API),
                 Gang(COSCHEDULING_API, "scheduler-plugins-scheduler"), id="coscheduling-default"),
    pytest.param(gang_controller(KUBERNETES_API), Gang(KUBERNETES_API, "default-scheduler"),
                 id="kubernetes-default"),
    pytest.param(gang_controller(VOLCANO_API, "my-volcano"), Gang(VOLCANO_API, "my-volcano"),
                 id="annotation-names-scheduler"),
])
def test_read_gang(controller, expected):
    request = {} if controller is None else {"controller": controller}
    assert read_gang(request) == expected


def _rules(*apis: str) -> dict:
    return {"spec": {"childResources": [{"apiVersion": a, "resource": "podgroups"} for a in apis]}}


@pytest.mark.parametrize(("controller", "message"), [
    pytest.param(_rules("scheduling.incubator.k8s.io/v1alpha1"),
                 "controller.spec.childResources[0].apiVersion", id="unsupported-api"),
    pytest.param(_rules(VOLCANO_API, COSCHEDULING_API), "2 rules for podgroups", id="two-rules"),
    pytest.param(gang_controller(VOLCANO_API, ""), "scheduling.kubeflow.org/scheduler-name",
                 id="empty-scheduler-name"),
    pytest.param(["not", "an", "object"], "controller: must be", id="controller-not-object"),
    pytest.param({"spec": {"childResources": [{"resource": "podgroups", "apiVersion": ["x"]}]}},
                 "childResources[0].apiVersion", id="api-version-not-a-string"),
    pytest.param({"spec": {"childResources": "podgroups"}}, "must be a list", id="rules-not-a-list"),
])
def test_bad_gang_configuration_is_a_bad_request(controller, message):
    with pytest.raises(InvalidRequest, match=message.replace("[", r"\[").replace("]", r"\]")):
        read_gang({"controller": controller})


def test_gang_on_requires_the_podgroup_children_key():
    request = Sim(mxjob(), controller=gang_controller(VOLCANO_API)).request()
    del request["children"]["PodGroup.scheduling.volcano.sh/v1beta1"]
    with pytest.raises(InvalidRequest, match=r"children\[PodGroup.scheduling.volcano.sh/v1beta1\]"):
        sync_mxjob(request, now=Sim(mxjob()).now)


def test_without_a_podgroup_rule_the_answer_is_the_same_as_with_an_empty_controller():
    plain = Sim(mxjob()).sync()
    other_rules = {"metadata": {"annotations": {"scheduling.kubeflow.org/scheduler-name": "x"}},
                   "spec": {"childResources": [{"apiVersion": "v1", "resource": "pods"},
                                               {"apiVersion": "v1", "resource": "services"}]}}
    request = {**Sim(mxjob()).request(), "controller": other_rules}
    assert sync_mxjob(request, now=T0) == plain


# --- the PodGroup --------------------------------------------------------------------------------


@pytest.mark.parametrize("layout", ["runPolicy", "inline"])
def test_both_spec_layouts_give_the_same_podgroup(layout):
    policy = {"minAvailable": 2, "queue": "q", "priorityClass": "high"}
    spec = {"runPolicy": {"schedulingPolicy": policy}} if layout == "runPolicy" else {"schedulingPolicy": policy}
    answer = first_sync(mxjob(**spec), gang_controller(VOLCANO_API))
    [group] = children(answer, "PodGroup")
    assert group["spec"] == {"minMember": 2, "queue": "q", "priorityClassName": "high"}


def test_run_policy_wins_over_the_inline_layout():
    parent = mxjob(runPolicy={"schedulingPolicy": {"minAvailable": 2}},
                   schedulingPolicy={"minAvailable": 3, "queue": "inline"})
    [group] = children(first_sync(parent, gang_controller(VOLCANO_API)), "PodGroup")
    assert group["spec"] == {"minMember": 2}


def test_scheduler_plugins_podgroup_has_only_its_fields():
    parent = mxjob(runPolicy={"schedulingPolicy": {"queue": "q", "priorityClass": "high",
                                                   "scheduleTimeoutSeconds": 0}})
    [group] = children(first_sync(parent, gang_controller(COSCHEDULING_API)), "PodGroup")
    assert group["apiVersion"] == COSCHEDULING_API
    assert group["spec"] == {"minMember": 4, "scheduleTimeoutSeconds": 0}


@pytest.mark.parametrize(("policy", "min_count"), [
    pytest.param({}, 4, id="every-pod"),
    pytest.param({"minAvailable": 2, "queue": "q", "priorityClass": "high", "scheduleTimeoutSeconds": 60,
                  "minResources": {"cpu": 8}}, 2, id="only-min-available-has-a-place"),
    # minCount must be positive and gang cannot become basic later: a gang of one waits for nothing.
    pytest.param({"minAvailable": 0}, 1, id="min-available-zero-is-a-gang-of-one"),
])
def test_kubernetes_podgroup_has_only_min_count(policy, min_count):
    parent = mxjob(runPolicy={"schedulingPolicy": policy})
    [group] = children(first_sync(parent, gang_controller(KUBERNETES_API)), "PodGroup")
    assert group["apiVersion"] == KUBERNETES_API
    assert group["spec"] == {"schedulingPolicy": {"gang": {"minCount": min_count}}}


def test_given_min_resources_are_written_canonically():
    parent = mxjob(runPolicy={"schedulingPolicy": {"minResources": {
        "memory": "1024Mi", "cpu": "1000m", "nvidia.com/gpu": 4}}})
    [group] = children(first_sync(parent, gang_controller(VOLCANO_API)), "PodGroup")
    assert group["spec"]["minResources"] == {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "4"}


def _pod_spec(requests: dict | None = None, limits: dict | None = None, init: list | None = None) -> dict:
    spec: dict = {"containers": [{"name": "mxnet", "resources": {"requests": requests or {},
                                                                 "limits": limits or {}}}]}
    if init:
        spec["initContainers"] = [{"name": f"init-{i}", "resources": {"requests": r}}
                                  for i, r in enumerate(init)]
    return spec


@pytest.mark.parametrize(("members", "min_member", "expected"), [
    pytest.param([("a", _pod_spec({"cpu": "1"}), 3)], 2, {"cpu": "2"}, id="first-min-member-pods"),
    pytest.param([("a", _pod_spec({"cpu": "1"}), 1), ("b", _pod_spec({"cpu": "250m"}), 4)], 3,
                 {"cpu": "1500m"}, id="across-replica-types-in-order"),
    pytest.param([("a", _pod_spec({"memory": "1Gi"}, {"memory": "4Gi", "nvidia.com/gpu": 1}), 2)], 2,
                 {"memory": "2Gi", "nvidia.com/gpu": "2"}, id="limit-only-where-no-request"),
    pytest.param([("a", _pod_spec({"cpu": "1"}, init=[{"cpu": "3"}, {"cpu": "500m"}]), 1)], 1,
                 {"cpu": "3"}, id="largest-init-container-when-more"),
    pytest.param([("a", _pod_spec(), 2)], 2, {}, id="nothing-requested"),
    pytest.param([("a", _pod_spec({"cpu": "1"}), 2)], 0, {}, id="min-member-zero"),
])
def test_min_resources_sum(members, min_member, expected):
    problems: list[str] = []
    assert min_resources(members, min_member, problems) == expected
    assert problems == []


def test_unreadable_template_resources_fail_validation_with_the_path():
    worker = {"replicas": 1, "template": {"spec": {"containers": [
        {"name": "mxnet", "image": "i", "resources": {"requests": {"cpu": "two"}}}]}}}
    answer = first_sync(mxjob(replicas={"Worker": worker}), gang_controller(VOLCANO_API))
    message = answer["status"]["conditions"][-1]["message"]
    assert "spec.mxReplicaSpecs.Worker.template.spec.containers[0].resources.requests.cpu" in message
    assert answer["children"] == []


# --- pods ------------------------------------------------------------------------------------------


def test_template_scheduler_and_priority_class_are_kept():
    worker = {"replicas": 1, "template": {"metadata": {"annotations": {"a": "b"}}, "spec": {
        "schedulerName": "mine", "priorityClassName": "low",
        "containers": [{"name": "mxnet", "image": "i"}]}}}
    parent = mxjob(replicas={"Worker": worker}, runPolicy={"schedulingPolicy": {"priorityClass": "high"}})
    [pod] = children(pods_sync(parent, gang_controller(VOLCANO_API)), "Pod")
    assert pod["spec"]["schedulerName"] == "mine"
    assert pod["spec"]["priorityClassName"] == "low"
    assert pod["metadata"]["annotations"] == {
        "a": "b", "training.kubeflow.org/replica-layout": '{"worker":{"port":9091,"replicas":1}}',
        "scheduling.k8s.io/group-name": "mx", "volcano.sh/task-spec": "worker"}


def test_scheduler_plugins_pods_carry_the_group_label_and_no_volcano_annotations():
    answer = pods_sync(mxjob(), gang_controller(COSCHEDULING_API, "coscheduler"))
    assert len(children(answer, "Pod")) == 4
    for pod in children(answer, "Pod"):
        assert pod["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"] == "mx"
        assert not any("volcano" in key or key.startswith("scheduling.") for key in pod["metadata"]["annotations"])
        assert pod["spec"]["schedulerName"] == "coscheduler"


def test_kubernetes_gang_pods_name_their_group_in_the_spec_and_go_to_kube_scheduler():
    parent = mxjob(runPolicy={"schedulingPolicy": {"priorityClass": "high"}})
    answer = pods_sync(parent, gang_controller(KUBERNETES_API))
    assert len(children(answer, "Pod")) == 4
    for pod in children(answer, "Pod"):
        assert pod["spec"]["schedulingGroup"] == {"podGroupName": "mx"}
        assert pod["spec"]["schedulerName"] == "default-scheduler"
        assert pod["spec"]["priorityClassName"] == "high"
        assert not any(key.startswith("scheduling.") or "volcano" in key
                       for key in {**pod["metadata"]["labels"], **pod["metadata"]["annotations"]})


def test_the_input_template_is_not_changed():
    parent = mxjob(runPolicy={"schedulingPolicy": {"priorityClass": "high"}})
    request = Sim(parent, controller=gang_controller(VOLCANO_API)).request()
    before = copy.deepcopy(request["parent"])
    sync_mxjob(request, now=T0)
    assert request["parent"] == before


# --- lifecycle -------------------------------------------------------------------------------------


def test_podgroup_is_a_fixed_point_and_stays_while_running():
    sim = Sim(mxjob(), controller=gang_controller(VOLCANO_API))
    first = sim.sync()
    sim.sync()
    assert len(sim.pods) == 4
    sim.run()
    sim.sync()
    again = sim.sync()
    assert children(again, "PodGroup") == children(first, "PodGroup")
    assert sim.sync() == again


def test_suspended_job_has_no_podgroup():
    sim = Sim(mxjob(), controller=gang_controller(VOLCANO_API))
    sim.sync()
    sim.edit({"runPolicy": {"suspend": True}})
    sim.sync()
    assert sim.podgroups == {} and sim.pods == {}


def test_an_invalid_edit_keeps_the_podgroup():
    sim = Sim(mxjob(), controller=gang_controller(VOLCANO_API))
    sim.sync()
    sim.sync()
    sim.run()
    sim.edit({"runPolicy": {"schedulingPolicy": {"minAvailable": 99}}})
    answer = sim.sync()
    assert "minAvailable: 99 is more than the job's 4 pods" in answer["status"]["specError"]
    assert [c["kind"] for c in answer["children"]].count("PodGroup") == 1
    assert set(sim.pods) == {"mx-scheduler-0", "mx-server-0", "mx-worker-0", "mx-worker-1"}


# --- validation ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("policy", "problem"), [
    pytest.param({"minAvailable": -1}, "p.minAvailable: must be a non-negative integer (pods), got -1",
                 id="negative-min-available"),
    pytest.param({"minAvailable": True}, "p.minAvailable: must be a non-negative integer", id="bool"),
    pytest.param({"scheduleTimeoutSeconds": -5},
                 "p.scheduleTimeoutSeconds: must be a non-negative integer (seconds), got -5",
                 id="negative-timeout"),
    pytest.param({"scheduleTimeoutSeconds": 2**31}, "p.scheduleTimeoutSeconds: must be at most",
                 id="timeout-over-int32"),
    pytest.param({"minResources": {"cpu": "lots"}}, "p.minResources.cpu: 'lots' is not a Kubernetes quantity",
                 id="non-quantity"),
    pytest.param({"minResources": {"memory": "-1Gi"}}, "p.minResources.memory: must not be negative",
                 id="negative-quantity"),
    pytest.param({"minResources": ["cpu"]}, "p.minResources: must be a map", id="resources-not-map"),
    pytest.param({"queue": 3}, "p.queue: must be a name", id="queue-not-string"),
    pytest.param("gang", "p: must be an object", id="policy-not-object"),
])
def test_policy_problems_name_the_field(policy, problem):
    problems: list[str] = []
    parse_scheduling_policy(policy, "p", problems)
    assert len(problems) == 1 and problems[0].startswith(problem), problems


def test_min_available_over_replicas_is_refused_with_the_path_of_the_layout_used():
    answer = first_sync(mxjob(schedulingPolicy={"minAvailable": 5}), gang_controller(VOLCANO_API))
    message = answer["status"]["conditions"][-1]["message"]
    assert ("spec.schedulingPolicy.minAvailable: 5 is more than the job's 4 pods, so the gang "
            "could never start; use at most 4") in message


@pytest.mark.parametrize("policy", [
    pytest.param({"minAvailable": 99}, id="min-available-over-replicas"),
    pytest.param({"minResources": {"cpu": "lots"}}, id="min-resources-not-a-quantity"),
    pytest.param({"priorityClass": "high", "queue": "q"}, id="priority-and-queue"),
])
@pytest.mark.parametrize("layout", ["runPolicy", "inline"])
def test_without_gang_scheduling_a_scheduling_policy_changes_nothing(policy, layout):
    fields = {"runPolicy": {"schedulingPolicy": policy}} if layout == "runPolicy" else {"schedulingPolicy": policy}
    assert Sim(mxjob(**fields)).sync() == Sim(mxjob()).sync()


# --- quantities ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("raw", "canonical"), [
    ("1000m", "1"), ("1500m", "1500m"), ("1.5", "1500m"), ("1000", "1k"), ("4096", "4096"),
    ("0.5Gi", "512Mi"), ("1536Mi", "1536Mi"), ("1024Ki", "1Mi"), ("512", "512"), ("1e3", "1e3"),
    ("100e-2", "1"), ("0.0000000001", "1n"), (2, "2"), (0.25, "250m"), ("0", "0"), ("+5", "5"),
    (".5", "500m"),
])
def test_quantity_canonical_form(raw, canonical):
    assert parse_quantity(raw).canonical() == canonical


@pytest.mark.parametrize("raw", ["", "lots", "1.2.3", "5 Gi", "1gi", "1e", "Gi", True, None, [1]])
def test_not_a_quantity(raw):
    with pytest.raises(ValueError, match="is not a Kubernetes quantity"):
        parse_quantity(raw)


def test_a_sum_keeps_the_left_format():
    assert (parse_quantity("512Mi") + parse_quantity("1Gi")).canonical() == "1536Mi"
    assert (parse_quantity("1") + parse_quantity("1Ki")).canonical() == "1025"


# --- the upstream PodGroup API types ---------------------------------------------------------------


def _check_known_fields(value, schema, path):
    """Structural schemas prune unknown fields silently: refuse any field the upstream type lacks."""
    if isinstance(value, dict) and "properties" in schema:
        for key, item in value.items():
            assert key in schema["properties"], f"{path}.{key} is not a field of the upstream type"
            _check_known_fields(item, schema["properties"][key], f"{path}.{key}")


@pytest.mark.parametrize("api_version", [VOLCANO_API, COSCHEDULING_API])
@pytest.mark.parametrize("policy", [
    pytest.param({}, id="defaults"),
    pytest.param({"minAvailable": 3, "queue": "q", "priorityClass": "high", "scheduleTimeoutSeconds": 60,
                  "minResources": {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": 4}}, id="every-field"),
])
def test_podgroup_matches_the_upstream_api(api_version, policy):
    schema = yamlio.load((DATA / UPSTREAM_SPEC[api_version]).read_text())
    worker = {"replicas": 2, "template": {"spec": {"containers": [
        {"name": "mxnet", "image": "i", "resources": {"limits": {"cpu": "2", "nvidia.com/gpu": 1}}}]}}}
    parent = mxjob(replicas={"Scheduler": 1, "Server": 1, "Worker": worker},
                   runPolicy={"schedulingPolicy": policy})
    [group] = children(first_sync(parent, gang_controller(api_version)), "PodGroup")
    assert group["apiVersion"] == api_version and group["kind"] == "PodGroup"
    assert set(group) == {"apiVersion", "kind", "metadata", "spec"}
    assert group["metadata"]["name"] == "mx" and group["metadata"]["namespace"] == "ns"
    OAS30Validator(schema, format_checker=oas30_format_checker).validate(group["spec"])
    _check_known_fields(group["spec"], schema, "spec")
    # minResources values must be strings the API server's quantity pattern accepts
    for value in group["spec"].get("minResources", {}).values():
        assert isinstance(value, str)


def test_upstream_schemas_reject_what_they_should():
    """The copied schemas are live: a wrong type or a non-quantity fails validation."""
    for name in UPSTREAM_SPEC.values():
        schema = yamlio.load((DATA / name).read_text())
        validator = OAS30Validator(schema, format_checker=oas30_format_checker)
        assert not validator.is_valid({"minMember": "4"})
        assert not validator.is_valid({"minMember": 2**31})
        assert not validator.is_valid({"minResources": {"cpu": "lots"}})


# --- the CRD refuses what it can before the hook sees it -------------------------------------------


@pytest.mark.parametrize(("dotted", "value", "valid"), [
    pytest.param("minResources", {"cpu": "-1"}, False, id="negative-quantity-string"),
    pytest.param("minResources", {"cpu": -1}, False, id="negative-quantity-number"),
    pytest.param("minResources", {"cpu": "lots"}, False, id="non-quantity"),
    pytest.param("minResources", {"cpu": "+500m", "memory": "4Gi", "nvidia.com/gpu": 2}, True,
                 id="quantities"),
    pytest.param("scheduleTimeoutSeconds", -5, False, id="negative-timeout"),
    pytest.param("minAvailable", -1, False, id="negative-min-available"),
    pytest.param("minAvailable", 0, True, id="min-available-zero"),
])
@pytest.mark.parametrize("layout", ["spec.runPolicy.schedulingPolicy", "spec.schedulingPolicy"])
def test_crd_schema_of_scheduling_policy(layout, dotted, value, valid):
    from helpers.crd import VALID, schema_errors, with_field

    assert (schema_errors(with_field(VALID, f"{layout}.{dotted}", value)) == []) is valid


# --- ChainerJob under a gang -----------------------------------------------------------------------


def _chainer_sim(api_version: str | None):
    from helpers.chainersim import ChainerSim, example
    from helpers.chainersim import gang_controller as chainer_controller

    controller = chainer_controller(api_version) if api_version else None
    return ChainerSim(example("chainerjob-mn.yaml"), controller=controller)


def _by_kind(answer: dict, kind: str) -> list[dict]:
    return [c for c in answer["children"] if c["kind"] == kind]


@pytest.mark.parametrize("api_version", [VOLCANO_API, COSCHEDULING_API, KUBERNETES_API])
def test_chainerjob_gang_creates_the_master_at_once_with_every_pod_in_the_group(api_version):
    sim = _chainer_sim(api_version)
    sim.sync()
    answer = sim.sync()  # the PodGroup exists now
    [group] = _by_kind(answer, "PodGroup")
    [master] = _by_kind(answer, "Job")  # no worker is ready yet: without a gang it would wait
    workers = _by_kind(answer, "StatefulSet")
    assert group["apiVersion"] == api_version
    size = group["spec"]["schedulingPolicy"]["gang"]["minCount"] if api_version == KUBERNETES_API \
        else group["spec"]["minMember"]
    assert size == 1 + sum(s["spec"]["replicas"] for s in workers)
    for template in [master["spec"]["template"]] + [s["spec"]["template"] for s in workers]:
        assert template["spec"]["schedulerName"] == read_gang(
            {"controller": _chainer_sim(api_version).controller}).scheduler_name
        if api_version == VOLCANO_API:
            assert template["metadata"]["annotations"]["scheduling.k8s.io/group-name"] == group["metadata"]["name"]
        elif api_version == KUBERNETES_API:
            assert template["spec"]["schedulingGroup"] == {"podGroupName": group["metadata"]["name"]}
        else:
            assert template["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"] == group["metadata"]["name"]


def test_chainerjob_without_a_gang_is_unchanged_and_waits_for_workers():
    answer = _chainer_sim(None).sync()
    assert _by_kind(answer, "PodGroup") == [] and _by_kind(answer, "Job") == []
    [assets] = _by_kind(answer, "ConfigMap")
    assert "waited=0" not in assets["data"]["kubexeb.sh"]


def test_chainerjob_agent_waits_for_its_target_under_a_gang(tmp_path):
    import os
    import subprocess

    [assets] = _by_kind(_chainer_sim(VOLCANO_API).sync(), "ConfigMap")
    agent = tmp_path / "kubexeb.sh"
    agent.write_text(assets["data"]["kubexeb.sh"])
    agent.chmod(0o755)
    # A stand-in kubectl: the target's container is not running on the first look, then it is.
    kubectl = tmp_path / "kubectl"
    kubectl.write_text('#!/bin/sh\n'
                       'if [ "$1" = get ]; then\n'
                       f'  n=$(cat {tmp_path}/looks 2>/dev/null || echo 0); echo $((n + 1)) > {tmp_path}/looks\n'
                       '  [ "$n" -ge 1 ] && printf "2026-11-21T10:00:00Z"\n'
                       '  exit 0\n'
                       'fi\n'
                       'echo "exec $*"\n')
    kubectl.chmod(0o755)
    result = subprocess.run([str(agent), "example-job-mn-workerset-ws0-0", "echo", "hi"], capture_output=True,
                            text=True, timeout=30, env={**os.environ, "KUBECTL_DIR": str(tmp_path)})
    assert result.returncode == 0, result.stderr
    assert result.stdout == "exec exec -i example-job-mn-workerset-ws0-0 -c chainer -- /bin/sh -c echo hi\n"
    assert (tmp_path / "looks").read_text().strip() == "2"  # it looked twice: waited once


def test_chainerjob_gang_answer_is_a_fixed_point():
    sim = _chainer_sim(VOLCANO_API)
    sim.sync()
    sim.all_ready()
    again = sim.sync()
    assert sim.sync() == again
    assert len(_by_kind(again, "PodGroup")) == 1 and len(_by_kind(again, "Job")) == 1


def test_a_template_resource_that_is_not_a_quantity_is_named_by_the_key_as_written():
    parent = mxjob(replicas={"worker": {"replicas": 2, "template": {"spec": {"containers": [
        {"name": "mxnet", "image": "i", "resources": {"limits": {"cpu": "lots"}}}]}}}})
    message = first_sync(parent, gang_controller(VOLCANO_API))["status"]["conditions"][-1]["message"]
    assert "spec.mxReplicaSpecs.worker.template.spec.containers[0].resources.limits" in message, message
