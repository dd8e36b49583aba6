"""Spec parsing: defaults, both run-policy layouts, and one clear message per bad input."""
from __future__ import annotations

import pytest
from helpers.mcsim import mxjob

from hooks.mxjob.spec import SpecError, parse_mxjob


def problems_of(parent: dict) -> list[str]:
    with pytest.raises(SpecError) as err:
        parse_mxjob(parent)
    return err.value.problems


def template(containers: list) -> dict:
    return {"spec": {"containers": containers}}


def test_defaults_are_applied_but_not_written_back():
    parent = mxjob(replicas={"Worker": {}})
    job = parse_mxjob(parent)
    worker = job.replicas["Worker"]
    assert (job.job_mode, worker.replicas, worker.restart_policy, worker.port) == \
        ("MXTrain", 1, "Never", 9091)
    assert job.run_policy.clean_pod_policy == "Running"
    assert "replicas" not in parent["spec"]["mxReplicaSpecs"]["Worker"]


def test_replica_keys_are_case_insensitive():
    job = parse_mxjob(mxjob(replicas={"scheduler": 1, "SERVER": 1, "worker": 2}))
    assert list(job.replicas) == ["Scheduler", "Server", "Worker"]


def test_custom_mxjob_port_is_used():
    parent = mxjob(replicas={"Worker": {"template": template([
        {"name": "mxnet", "image": "i", "ports": [{"name": "mxjob-port", "containerPort": 9000}]}])}})
    assert parse_mxjob(parent).replicas["Worker"].port == 9000


@pytest.mark.parametrize("spec,expected", [
    ({"runPolicy": {"cleanPodPolicy": "All"}}, "All"),
    ({"cleanPodPolicy": "None"}, "None"),
    ({"cleanPodPolicy": "None", "runPolicy": {"cleanPodPolicy": "All"}}, "All"),
], ids=["runPolicy-layout", "inline-mxnet-operator-layout", "runPolicy-wins"])
def test_both_run_policy_layouts(spec, expected):
    assert parse_mxjob(mxjob(**spec)).run_policy.clean_pod_policy == expected


def test_layouts_merge_per_field():
    job = parse_mxjob(mxjob(backoffLimit=3, runPolicy={"activeDeadlineSeconds": 60}))
    assert (job.run_policy.backoff_limit, job.run_policy.active_deadline_seconds) == (3, 60)


def test_tuner_server_key_from_annotation_or_legacy_label():
    replicas = {"TunerTracker": 1, "Tuner": 1, "TunerServer": {"replicas": 2, "label": "old"}}
    job = parse_mxjob(mxjob(jobMode="MXTune", replicas=replicas))
    assert job.replicas["TunerServer"].tuner_key == "old"
    replicas["TunerServer"] = {"replicas": 2, "label": "old", "template": {
        "metadata": {"annotations": {"tuner-server-key": "rtx"}},
        "spec": {"containers": [{"name": "mxnet", "image": "i"}]}}}
    job = parse_mxjob(mxjob(jobMode="MXTune", replicas=replicas))
    assert job.replicas["TunerServer"].tuner_key == "rtx"


LONG = "a" * 55


@pytest.mark.parametrize("parent,field,words", [
    (mxjob(replicas={"Worker": {"template": template([{"name": "main", "image": "i"}])}}),
     "spec.mxReplicaSpecs.Worker.template.spec.containers", 'no container named "mxnet"'),
    (mxjob(replicas={"Worker": {"template": template([{"name": "mxnet", "image": ""}])}}),
     "spec.mxReplicaSpecs.Worker.template.spec.containers[name=mxnet].image", "non-empty"),
    (mxjob(replicas={"Worker": 1, "worker": 1}),
     "spec.mxReplicaSpecs.worker", "case-insensitive"),
    (mxjob(replicas={"Worker": 1, "Chief": 1}),
     "spec.mxReplicaSpecs.Chief", "unknown replica type"),
    (mxjob(replicas={"Scheduler": 2, "Server": 1, "Worker": 1}),
     "spec.mxReplicaSpecs.Scheduler.replicas", "exactly 1 Scheduler"),
    (mxjob(LONG, replicas={"Scheduler": 1, "Server": 1, "Worker": 1}),
     "metadata.name", "at most 51 characters"),
    (mxjob(replicas={"Worker": -1}),
     "spec.mxReplicaSpecs.Worker.replicas", "non-negative integer"),
    (mxjob(replicas={"Worker": {"replicas": 1, "restartPolicy": "Sometimes"}}),
     "spec.mxReplicaSpecs.Worker.restartPolicy", "not one of"),
    (mxjob(cleanPodPolicy="Some"), "spec.cleanPodPolicy", "not one of All, Running, None"),
    (mxjob(runPolicy={"backoffLimit": -2}), "spec.runPolicy.backoffLimit", "non-negative"),
    (mxjob(jobMode="MXTune"), "spec.mxReplicaSpecs.Scheduler", "not used by jobMode MXTune"),
    (mxjob(jobMode="MXTune", replicas={"TunerTracker": 1, "Tuner": 1}),
     "spec.mxReplicaSpecs.TunerServer.replicas", "at least 1 TunerServer"),
    (mxjob(replicas={"Scheduler": 1, "Worker": 1}),
     "spec.mxReplicaSpecs.Server.replicas", "at least 1 Server"),
    (mxjob(replicas={"Server": 1}), "spec.mxReplicaSpecs.Worker.replicas", "at least 1 Worker"),
    (mxjob("Bad.Name"), "metadata.name", "must start with a letter"),
    (mxjob(jobMode="MXRun"), "spec.jobMode", "not one of MXTrain, MXTune"),
], ids=["no-mxnet-container", "empty-image", "keys-differ-only-in-case", "unknown-replica-type",
        "two-schedulers", "name-too-long", "negative-replicas", "bad-restart-policy",
        "bad-clean-pod-policy", "negative-backoff-limit", "train-types-in-tune-job",
        "tune-without-tuner-server", "scheduler-without-server", "no-worker",
        "name-not-dns-1035", "unknown-job-mode"])
def test_bad_spec_is_reported_with_its_field_path(parent, field, words):
    problems = problems_of(parent)
    assert any(p.startswith(field + ":") and words in p for p in problems), problems


@pytest.mark.parametrize("replicas", [-1, "two", 1.5], ids=["negative", "string", "float"])
def test_an_invalid_count_is_reported_once_not_again_as_a_missing_worker(replicas):
    assert problems_of(mxjob(replicas={"Worker": replicas})) == [
        f"spec.mxReplicaSpecs.Worker.replicas: must be a non-negative integer of at most 5000, got {replicas!r}"]


def test_every_problem_is_reported_at_once():
    parent = mxjob(replicas={"Worker": -1, "Chief": 1}, cleanPodPolicy="Some")
    assert problems_of(parent) == [
        "spec.cleanPodPolicy: 'Some' is not one of All, Running, None",
        "spec.mxReplicaSpecs.Worker.replicas: must be a non-negative integer of at most 5000, got -1",
        "spec.mxReplicaSpecs.Chief: unknown replica type; use one of Scheduler, Server, Worker, TunerTracker, "
        "TunerServer, Tuner",
    ]


def test_a_name_of_exactly_the_limit_is_accepted():
    # "<name>-scheduler-0" is the longest child name here: 63 - len("-scheduler-0") = 51.
    parse_mxjob(mxjob("a" * 51, replicas={"Scheduler": 1, "Server": 1, "Worker": 1}))
    problems_of(mxjob("a" * 52, replicas={"Scheduler": 1, "Server": 1, "Worker": 1}))


def test_zero_deadline_is_rejected_like_the_crd_does():
    assert any(p.startswith("spec.runPolicy.activeDeadlineSeconds:") and "at least 1" in p
               for p in problems_of(mxjob(runPolicy={"activeDeadlineSeconds": 0})))


@pytest.mark.parametrize("workers,ok", [(2400, True), (2700, False)],
                         ids=["2400-workers-fit", "2700-workers-cannot-start"])
def test_jobs_whose_mx_config_cannot_be_exec_ed_are_refused(workers, ok):
    from helpers.mcsim import T0

    from hooks.mxjob.sync import sync_mxjob
    parent = mxjob("imagenet-resnet50", replicas={"Scheduler": 1, "Server": 10, "Worker": workers})
    answer = sync_mxjob({"parent": parent, "children": {"Pod.v1": {}, "Service.v1": {}, "ConfigMap.v1": {}}}, now=T0)
    failed = [c for c in answer["status"]["conditions"] if c["type"] == "Failed"]
    if ok:
        assert not failed and answer["children"]
    else:
        assert answer["children"] == []
        assert "spec.mxReplicaSpecs:" in failed[0]["message"]
        assert "131072 bytes for one environment variable" in failed[0]["message"]


def test_a_pod_spec_does_not_grow_with_the_job():
    """The cluster map lives in the ConfigMap, so the largest admissible job's pods stay small."""
    import json

    from helpers.mcsim import T0

    from hooks.mxjob.sync import sync_mxjob
    containers = [{"name": n, "image": "i"} for n in ("mxnet", "a", "b", "c")]

    def worker_0(workers: int) -> str:
        parent = mxjob("imagenet-resnet50", replicas={"Worker": {"replicas": workers, "template": {
            "spec": {"containers": containers}}}})
        answer = sync_mxjob({"parent": parent, "children": {"Pod.v1": {}, "Service.v1": {}, "ConfigMap.v1": {}}}, now=T0)
        assert len(answer["children"]) == 1 + 2 * workers
        pod = next(c for c in answer["children"] if c["metadata"]["name"] == "imagenet-resnet50-worker-0")
        return json.dumps(pod)

    small, large = worker_0(2), worker_0(2400)
    # Only the worker count differs ("2" against "2400"): in each container's DMLC_NUM_WORKER and
    # in the pod's replica-layout annotation.
    assert len(large) - len(small) == 3 * (4 + 1)



@pytest.mark.parametrize("policy,field,words", [
    ({"maxRestarts": -1}, "spec.runPolicy.failurePolicy.maxRestarts", "non-negative"),
    ({"rules": [{"action": "Retry"}]}, "spec.runPolicy.failurePolicy.rules[0].action", "not one of RestartJob"),
    ({"rules": [{"action": "FailJob", "onExitCodes": [256]}]},
     "spec.runPolicy.failurePolicy.rules[0].onExitCodes", "from 0 to 255"),
    ({"rules": [{"action": "FailJob", "onReplicaTypes": []}]},
     "spec.runPolicy.failurePolicy.rules[0].onReplicaTypes", "non-empty list"),
    ({"rules": [{"action": "FailJob"}] * 17}, "spec.runPolicy.failurePolicy.rules", "at most 16"),
    ("RestartJob", "spec.runPolicy.failurePolicy", "must be an object"),
], ids=["negative-max-restarts", "unknown-action", "exit-code-too-big", "no-replica-types", "too-many-rules",
        "not-an-object"])
def test_a_bad_failure_policy_is_reported_with_its_field_path(policy, field, words):
    problems = problems_of(mxjob(runPolicy={"failurePolicy": policy}))
    assert any(p.startswith(field + ":") and words in p for p in problems), problems


def test_a_failure_policy_is_parsed_in_order():
    job = parse_mxjob(mxjob(runPolicy={"failurePolicy": {"maxRestarts": 2, "rules": [
        {"action": "FailJob", "onReplicaTypes": ["Worker"], "onExitCodes": [138]}, {"action": "RestartJob"}]}}))
    policy = job.run_policy.failure
    assert policy.max_restarts == 2
    assert [(r.action, r.replica_types, r.exit_codes) for r in policy.rules] == [
        ("FailJob", frozenset({"Worker"}), frozenset({138})), ("RestartJob", None, None)]


def test_every_problem_of_a_failure_policy_rule_is_named_in_one_answer():
    job = mxjob()
    job["spec"]["runPolicy"] = {"failurePolicy": {"rules": [{"action": "Reboot", "onExitCodes": ["x"], "onReplicaTypes": ["Bogus"]}]}}
    with pytest.raises(SpecError) as err:
        parse_mxjob(job)
    at = "spec.runPolicy.failurePolicy.rules[0]"
    assert [p.split(":")[0] for p in err.value.problems] == [f"{at}.action", f"{at}.onReplicaTypes", f"{at}.onExitCodes"]
