"""Contract tests: the tools that read MXJobs read what our hook writes as they read training-operator's.

Real clients where they exist as libraries: the Kubeflow training SDK (kubeflow-training 1.8.1 with
kubernetes 36.0.3, talking to a fake API client, no server) and gjson (Katib's expressions). The Go
tools' rules are ported to tests/helpers/ecosystem_oracles.py. Statuses come from the real hook, driven
through both lifecycles by the in-memory Metacontroller (mcsim). docs/ecosystem.md is checked here
too: each of its snippets is parsed and evaluated with the tool's rule.
"""
from __future__ import annotations

import ast
import copy
import inspect
import json
import re
import shlex
from pathlib import Path
from typing import Any

import gjson
import pytest
from helpers import yamlio
from helpers.crd import SCHEMA, broken_rules
from helpers.ecosystem_oracles import (
    argo_requirements,
    argo_resource_state,
    kfp_is_expected_conditions,
    kubectl_jsonpath_condition_status,
    kubectl_wait_condition,
    kueue_finished,
    kueue_is_active,
    kueue_pod_label_selector,
    kueue_pod_sets,
    kueue_pod_sets_info,
    kueue_pods_ready,
    kueue_restore_pod_sets_info,
    kueue_run_with_pod_sets_info,
    polyaxon_state,
    printer_state,
    selector_matches,
)
from helpers.mcsim import T0, Sim, mxjob
from kubeflow.training import TrainingClient
from kubeflow.training.constants import constants as sdk_constants
from kubernetes import client as k8s

from hooks.mxjob.sync import sync_mxjob

ROOT = Path(__file__).resolve().parents[2]
PAGE = (ROOT / "docs" / "ecosystem.md").read_text()
KATIB_SUCCESS = 'status.conditions.#(type=="Succeeded")#|#(status=="True")#'
KATIB_FAILURE = 'status.conditions.#(type=="Failed")#|#(status=="True")#'


# ---------------------------------------------------------------------------------------------
# The job along both lifecycles, as our hook writes it


API_VERSION_V1 = "kubeflow.org/v1"


def _synced(sim: Sim, times: int = 2) -> Sim:
    for _ in range(times):
        sim.sync()
    return sim


def lifecycle() -> list[tuple[str, dict]]:
    """(intended state, the stored MXJob) at every step of a job's success and failure paths."""
    steps: list[tuple[str, dict]] = []
    ok = Sim(mxjob())
    steps.append(("Created", copy.deepcopy(_synced(ok).parent)))
    ok.run()
    steps.append(("Running", copy.deepcopy(_synced(ok).parent)))
    for name in list(ok.pods):
        ok.set_phase(name, "Succeeded", exit_code=0)
    steps.append(("Succeeded", copy.deepcopy(_synced(ok).parent)))

    bad = Sim(mxjob(replicas={"Scheduler": 1, "Server": 1, "Worker": {"replicas": 2, "restartPolicy": "ExitCode"}}))
    _synced(bad)
    bad.run()
    _synced(bad)
    bad.set_phase("mx-worker-0", "Failed", exit_code=137)  # retryable: recreated
    steps.append(("Restarting", copy.deepcopy(_synced(bad, 1).parent)))
    _synced(bad)
    bad.run()
    _synced(bad)
    bad.set_phase("mx-worker-1", "Failed", exit_code=1)  # permanent
    steps.append(("Failed", copy.deepcopy(_synced(bad).parent)))

    held = Sim(mxjob())
    _synced(held)
    held.run()
    _synced(held)
    held.edit({"runPolicy": {"suspend": True}})
    steps.append(("Suspended", copy.deepcopy(_synced(held).parent)))
    return steps


LIFECYCLE = lifecycle()
IDS = [state for state, _ in LIFECYCLE]


def test_the_lifecycle_reaches_every_state():
    assert [printer_state(job) for _, job in LIFECYCLE] == IDS
    assert IDS == ["Created", "Running", "Succeeded", "Restarting", "Failed", "Suspended"]


# ---------------------------------------------------------------------------------------------
# Kubeflow training SDK 1.8.1 (the real library, a fake API client)


class _Thread:
    def __init__(self, value: Any):
        self.value = value

    def get(self, timeout: Any = None) -> Any:
        return self.value


class FakeCustomApi:
    """The custom-objects API the SDK's get_job calls, answering with one stored MXJob."""

    def __init__(self, job: dict):
        self.job = job

    def get_namespaced_custom_object(self, group, version, namespace, plural, name, async_req=False):
        assert (group, version, plural) == ("kubeflow.org", "v1", "mxjobs")
        return _Thread(copy.deepcopy(self.job))


class FakeCoreApi:
    """The core API the SDK lists pods and reads logs through, over a fixed list of pods."""

    def __init__(self, pods: list[dict]):
        self.pods = pods
        self.selectors: list[str] = []
        self.logs_read: list[tuple[str, str]] = []

    def list_namespaced_pod(self, namespace, label_selector="", async_req=False):
        self.selectors.append(label_selector)
        chosen = [p for p in self.pods if selector_matches(label_selector, p["metadata"].get("labels", {}))]
        api = k8s.ApiClient()
        items = [api.deserialize(_Response(p), "V1Pod") for p in chosen]
        return _Thread(k8s.V1PodList(items=items))

    def read_namespaced_pod_log(self, name, namespace, container):
        self.logs_read.append((name, container))
        return f"log of {name}/{container}"


class _Response:
    def __init__(self, obj: dict):
        self.data = json.dumps(obj)


def sdk_client(job: dict, pods: list[dict] | None = None) -> TrainingClient:
    client = TrainingClient(client_configuration=k8s.Configuration(), job_kind="MXJob")
    client.custom_api = FakeCustomApi(job)
    client.core_api = FakeCoreApi(pods or [])
    return client


def crd_defaults(obj: Any, schema: dict = SCHEMA) -> Any:
    """What the API server stores: the schema's defaults filled in (structural defaulting)."""
    if not isinstance(obj, dict) or schema.get("type") != "object":
        return obj
    out = dict(obj)
    for key, sub in (schema.get("properties") or {}).items():
        if key not in out and "default" in sub:
            out[key] = copy.deepcopy(sub["default"])
        if key in out:
            out[key] = crd_defaults(out[key], sub)
    return out


@pytest.mark.parametrize("state,job", LIFECYCLE, ids=IDS)
def test_sdk_reads_every_status_as_the_state_it_is(state, job):
    client = sdk_client(crd_defaults(job))
    assert client.get_job(name="mx", namespace="ns").metadata.name == "mx"
    assert client.is_job_created(name="mx", namespace="ns")
    assert client.is_job_running(name="mx", namespace="ns") == (state == "Running")
    assert client.is_job_restarting(name="mx", namespace="ns") == (state == "Restarting")
    assert client.is_job_succeeded(name="mx", namespace="ns") == (state == "Succeeded")
    assert client.is_job_failed(name="mx", namespace="ns") == (state == "Failed")


@pytest.mark.parametrize("state,job", LIFECYCLE, ids=IDS)
def test_sdk_waits_for_the_terminal_conditions(state, job):
    client = sdk_client(crd_defaults(job))

    def wait(expected: set[str]) -> Any:
        return client.wait_for_job_conditions(name="mx", namespace="ns", expected_conditions=expected,
                                              wait_timeout=1, polling_interval=1)
    if state == "Succeeded":
        assert wait({"Succeeded"}).metadata.name == "mx"
    elif state == "Failed":
        assert wait({"Failed"}).metadata.name == "mx"
        with pytest.raises(RuntimeError):
            wait({"Succeeded"})
    else:
        with pytest.raises(TimeoutError):
            wait({"Succeeded", "Failed"})


def test_sdk_cannot_wait_for_suspended_and_selects_no_mxtune_type_as_the_page_says():
    client = sdk_client(crd_defaults(dict(LIFECYCLE)["Suspended"]))
    with pytest.raises(ValueError):
        client.wait_for_job_conditions(name="mx", namespace="ns", expected_conditions={"Suspended"})
    with pytest.raises(ValueError):
        client.get_job_pod_names(name="mx", namespace="ns", replica_type="tuner")


def test_sdk_reads_a_job_stored_without_run_policy_thanks_to_the_crd_default():
    job = copy.deepcopy(LIFECYCLE[1][1])
    job["spec"].pop("runPolicy", None)
    with pytest.raises(RuntimeError, match="Failed to get MXJob"):
        sdk_client(job).get_job(name="mx", namespace="ns")
    stored = crd_defaults(job)
    assert stored["spec"]["runPolicy"] == {} and stored["spec"]["jobMode"] == "MXTrain"
    assert sdk_client(stored).is_job_running(name="mx", namespace="ns")


def _pods_of(parent: dict) -> list[dict]:
    """The pods our hook creates for a job (the first sync of a new job), running."""
    request = {"parent": parent, "children": {"Pod.v1": {}, "Service.v1": {}, "ConfigMap.v1": {}}}
    pods = [c for c in sync_mxjob(request, now=T0)["children"] if c["kind"] == "Pod"]
    for pod in pods:
        pod["status"] = {"phase": "Running"}
    return pods


def test_sdk_pod_selectors_select_the_right_pods():
    pods = _pods_of(mxjob(replicas={"Scheduler": 1, "Server": 2, "Worker": 2}))
    client = sdk_client(LIFECYCLE[1][1], pods)

    def names(**kwargs: Any) -> list[str]:
        return sorted(client.get_job_pod_names(name="mx", namespace="ns", **kwargs))
    assert len(names(is_master=False)) == 5
    assert names(is_master=True) == ["mx-scheduler-0"]  # the master pod decides the job: the Scheduler
    assert names(is_master=False, replica_type="worker") == ["mx-worker-0", "mx-worker-1"]
    assert names(is_master=False, replica_type="server", replica_index=1) == ["mx-server-1"]


def test_sdk_reads_logs_from_the_mxnet_container():
    pods = _pods_of(mxjob(replicas={"Scheduler": 1, "Server": 1, "Worker": 2}))
    client = sdk_client(LIFECYCLE[1][1], pods)
    logs, _ = client.get_job_logs(name="mx", namespace="ns", is_master=False, replica_type="worker",
                                  replica_index=0)
    assert logs == {"mx-worker-0": "log of mx-worker-0/mxnet"}
    assert client.core_api.logs_read == [("mx-worker-0", "mxnet")]
    assert sdk_constants.JOB_PARAMETERS["MXJob"]["container"] == "mxnet"


def test_the_pages_sdk_snippet_calls_the_sdk_as_it_is():
    snippet = _blocks("python")[0]
    calls = [node for node in ast.walk(ast.parse(snippet)) if isinstance(node, ast.Call)
             and isinstance(node.func, ast.Attribute) and getattr(node.func.value, "id", "") == "client"]
    assert {c.func.attr for c in calls} == {"wait_for_job_conditions", "is_job_succeeded", "get_job_logs"}
    for call in calls:  # every keyword is a parameter of that method
        inspect.signature(getattr(TrainingClient, call.func.attr)).bind(
            None, **{k.arg: None for k in call.keywords})
    assert 'TrainingClient(job_kind="MXJob")' in snippet


# ---------------------------------------------------------------------------------------------
# Katib (gjson, the library Katib's expressions are written for)


def katib_outcome(job: dict) -> tuple[str, dict] | None:
    """pkg/controller.v1beta1/trial/util/job_util.go GetDeployedJobStatus (v0.17.0): failure
    first, then success; a match is a non-empty result; its first element's reason and message."""
    for outcome, expr in (("Failed", KATIB_FAILURE), ("Succeeded", KATIB_SUCCESS)):
        found = gjson.get(job, expr, quiet=True)
        if found:
            return outcome, found[0]
    return None


@pytest.mark.parametrize("state,job", LIFECYCLE, ids=IDS)
def test_katib_sees_the_outcome_with_a_reason_and_message(state, job):
    outcome = katib_outcome(json.loads(json.dumps(job)))
    if state in ("Succeeded", "Failed"):
        assert outcome is not None and outcome[0] == state
        assert outcome[1]["reason"] == f"MXJob{state}" and outcome[1]["message"]
    else:
        assert outcome is None


def test_the_pages_katib_snippet_uses_katibs_expressions_and_selects_the_workers():
    config, rbac, template = yamlio.load_all(_blocks("yaml")[0])
    assert config["trialResources"] == ["MXJob.v1.kubeflow.org"]
    assert rbac["resources"] == ["mxjobs"] and {"get", "list", "watch", "create", "delete"} <= set(rbac["verbs"])
    assert (template["successCondition"], template["failureCondition"]) == (KATIB_SUCCESS, KATIB_FAILURE)
    pods = _pods_of(mxjob(replicas={"Scheduler": 1, "Server": 1, "Worker": 2}))
    primary = [p["metadata"]["name"] for p in pods if selector_matches(template["primaryPodLabels"], p["metadata"]["labels"])]
    assert primary == ["mx-worker-0", "mx-worker-1"]
    for pod in pods:
        if pod["metadata"]["name"] in primary:
            assert template["primaryContainerName"] in [c["name"] for c in pod["spec"]["containers"]]
    # Katib's default primaryPodLabels would pick the Scheduler, as the page says.
    master = [p["metadata"]["name"] for p in pods
              if selector_matches({"training.kubeflow.org/job-role": "master"}, p["metadata"]["labels"])]
    assert master == ["mx-scheduler-0"]


# ---------------------------------------------------------------------------------------------
# kubectl


@pytest.mark.parametrize("state,job", LIFECYCLE, ids=IDS)
def test_kubectl_wait_and_the_state_column(state, job):
    assert printer_state(job) == state
    types = [c["type"] for c in job["status"]["conditions"]]
    assert len(types) == len(set(types))  # so the jsonpath wait matches one value at most
    for ctype in types:
        kubectl_jsonpath_condition_status(job, ctype)
    assert job["status"]["observedGeneration"] == job["metadata"]["generation"]
    for terminal in ("Succeeded", "Failed"):
        assert kubectl_wait_condition(job, terminal) == (state == terminal)
    stale = copy.deepcopy(job)
    stale["metadata"]["generation"] += 1  # an edit not yet synced: not met until the next sync
    assert not kubectl_wait_condition(stale, state)


def test_the_pages_kubectl_lines_wait_for_what_they_say():
    lines = [shlex.split(line) for line in _blocks("sh")[0].splitlines() if line.strip()]
    succeeded = dict(LIFECYCLE)["Succeeded"]
    failed = dict(LIFECYCLE)["Failed"]
    chainer = yamlio.load((ROOT / "tests/golden/chainerjob-master-complete/response.yaml").read_text())
    for argv in lines:
        assert argv[:2] == ["kubectl", "wait"]
        target = next(a for a in argv[2:] if not a.startswith("--"))
        wait_for = next(a for a in argv if a.startswith("--for="))[len("--for="):]
        kind = target.split("/")[0]
        if wait_for.startswith("condition="):
            ctype = wait_for.split("=", 1)[1]
            if kind == "chainerjob":
                assert kubectl_wait_condition({"status": chainer["status"]}, ctype)
                continue
            assert kind == "mxjob"
            assert kubectl_wait_condition({"Succeeded": succeeded, "Failed": failed}[ctype], ctype)
            assert not kubectl_wait_condition(dict(LIFECYCLE)["Running"], ctype)
        else:
            match = re.fullmatch(r'jsonpath=\{\.status\.conditions\[\?\(@\.type=="(\w+)"\)\]\.status\}=(\w+)', wait_for)
            assert match is not None, wait_for
            assert kubectl_jsonpath_condition_status(succeeded, match.group(1)) == match.group(2)
    assert {line[2].split("/")[0] for line in lines if not line[2].startswith("--")} <= {"mxjob", "chainerjob"}


# ---------------------------------------------------------------------------------------------
# Kueue v0.5-v0.10 (its MXJob adapter, ported)

KUEUE_INFO = {
    "labels": {"kueue.x-k8s.io/tas": "true"},
    "annotations": {"kueue.x-k8s.io/workload": "mxjob-mx-abcde"},
    "nodeSelector": {"instance-type": "on-demand"},
    "tolerations": [{"key": "spot", "operator": "Exists", "effect": "NoSchedule"}],
    "schedulingGates": [{"name": "kueue.x-k8s.io/topology"}],
}
QUEUED = {"kueue.x-k8s.io/queue-name": "user-queue"}


def _queued_job(**spec: Any) -> dict:
    job = mxjob(replicas={"Scheduler": None, "Server": 2, "Worker": 3}, **spec)
    job["spec"]["mxReplicaSpecs"]["Scheduler"].pop("replicas")
    job["metadata"]["labels"] = dict(QUEUED)
    return crd_defaults(job)


def test_kueue_reserves_exactly_the_pods_the_hook_creates():
    job = _queued_job()
    sets = kueue_pod_sets(job)
    assert sets == [("scheduler", 1), ("server", 2), ("worker", 3)]
    pods = _pods_of(job)
    counted = {name: sum(p["metadata"]["labels"]["training.kubeflow.org/replica-type"] == name for p in pods)
               for name, _ in sets}
    assert counted == dict(sets) and len(pods) == sum(n for _, n in sets)


def test_kueue_finds_pod_sets_in_a_job_written_without_job_mode():
    job = mxjob(replicas={"Worker": 2})
    assert kueue_pod_sets(job) == []  # as stored without the CRD default: never admitted
    assert kueue_pod_sets(crd_defaults(job)) == [("worker", 2)]


@pytest.mark.parametrize("key", ["worker", "WORKER"])
def test_a_queued_job_with_a_key_kueue_would_not_count_runs_no_pod(key):
    job = _queued_job()
    specs = job["spec"]["mxReplicaSpecs"]
    specs[key] = specs.pop("Worker")
    assert ("worker", 3) not in kueue_pod_sets(job)
    answer = Sim(job).sync()
    assert answer["children"] == []
    failed = answer["status"]["conditions"][-1]
    assert failed["reason"] == "MXJobFailedValidation"
    assert f"spec.mxReplicaSpecs.{key}: a job queued in Kueue" in failed["message"]
    # Without a queue the key is accepted as before (case-insensitive).
    del job["metadata"]["labels"]
    assert len([c for c in Sim(job).sync()["children"] if c["kind"] == "Pod"]) == 6


def test_the_deprecated_queue_annotation_queues_the_job_too():
    job = _queued_job()
    job["metadata"]["annotations"] = job["metadata"].pop("labels")
    job["spec"]["mxReplicaSpecs"]["server"] = job["spec"]["mxReplicaSpecs"].pop("Server")
    answer = Sim(job).sync()
    assert answer["children"] == []
    assert "spec.mxReplicaSpecs.server: a job queued in Kueue" in answer["status"]["conditions"][-1]["message"]


def test_kueue_admission_is_accepted_and_the_pods_carry_what_it_wrote():
    suspended = _queued_job(runPolicy={"suspend": True})
    sim = Sim(suspended)
    _synced(sim)
    assert sim.pods == {} and sim.state() == "Suspended"
    assert not kueue_is_active(sim.parent)
    saved = kueue_pod_sets_info(sim.parent)
    admitted = kueue_run_with_pod_sets_info(sim.parent, [KUEUE_INFO] * 3)
    assert broken_rules(admitted, old=sim.parent) == []  # the CRD accepts Kueue's one update
    sim.change(API_VERSION_V1, "MXJob", "mx", lambda job: job.update(spec=admitted["spec"]))
    _synced(sim)
    assert len(sim.pods) == 6
    for pod in sim.pods.values():
        assert pod["spec"]["nodeSelector"] == KUEUE_INFO["nodeSelector"]
        # Kueue's, plus the not-ready/unreachable ones the API server adds to every pod.
        assert [t for t in pod["spec"]["tolerations"] if t in KUEUE_INFO["tolerations"]] == KUEUE_INFO["tolerations"]
        assert pod["spec"]["schedulingGates"] == KUEUE_INFO["schedulingGates"]
        assert pod["metadata"]["annotations"]["kueue.x-k8s.io/workload"] == "mxjob-mx-abcde"
        labels = pod["metadata"]["labels"]
        assert labels["kueue.x-k8s.io/tas"] == "true"
        assert selector_matches(kueue_pod_label_selector(sim.parent), labels)

    # Gated pods stay Pending: not failed, not recreated, however long Kueue takes.
    uids = {n: p["metadata"]["uid"] for n, p in sim.pods.items()}
    for name in sim.pods:
        sim.write_status("v1", "Pod", name, {"phase": "Pending", "conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"}]})
    for _ in range(3):
        sim.tick(3600)
        _synced(sim)
    assert {n: p["metadata"]["uid"] for n, p in sim.pods.items()} == uids
    assert sim.state() == "Created" and not kueue_finished(sim.parent)[2]

    # Kueue ungates, the pods run: PodsReady and active.
    sim.run()
    _synced(sim)
    assert kueue_pods_ready(sim.parent) and kueue_is_active(sim.parent)

    # Eviction: suspended and the templates restored in one update, which the CRD accepts.
    evicted = kueue_restore_pod_sets_info(sim.parent, saved)
    assert broken_rules(evicted, old=sim.parent) == []
    assert evicted["spec"]["mxReplicaSpecs"] == suspended["spec"]["mxReplicaSpecs"]
    sim.change(API_VERSION_V1, "MXJob", "mx", lambda job: job.update(spec=evicted["spec"]))
    _synced(sim)
    assert sim.pods == {} and not kueue_is_active(sim.parent) and sim.state() == "Suspended"


@pytest.mark.parametrize("state,job", LIFECYCLE, ids=IDS)
def test_kueue_reads_finished_pods_ready_and_active(state, job):
    message, success, finished = kueue_finished(job)
    assert finished == (state in ("Succeeded", "Failed"))
    if finished:
        assert success == (state == "Succeeded") and message
    assert kueue_pods_ready(job) == (state == "Running")
    if state == "Suspended":
        assert not kueue_is_active(job)


# ---------------------------------------------------------------------------------------------
# Argo, KFP, Polyaxon


def test_the_pages_argo_conditions_match_only_the_outcome_they_name():
    conditions = yamlio.load(_blocks("yaml")[1])
    success, failure = conditions["successCondition"], conditions["failureCondition"]
    assert argo_requirements(success) and argo_requirements(failure)  # parsable as label selectors
    expected = {"Succeeded": "succeeded", "Failed": "failed"}
    for state, job in LIFECYCLE:
        assert argo_resource_state(job, success=success, failure=failure) == expected.get(state, "waiting"), state
    worker_only = re.search(r"`successCondition: ([^`]+)`", PAGE)
    assert worker_only is not None
    sim = Sim(mxjob(replicas={"Worker": 2}))
    _synced(sim)
    sim.run()
    _synced(sim)
    assert argo_resource_state(sim.parent, success=worker_only.group(1), failure=failure) == "waiting"
    for name in list(sim.pods):
        sim.set_phase(name, "Succeeded", exit_code=0)
    _synced(sim)
    assert sim.state() == "Succeeded"
    assert argo_resource_state(sim.parent, success=worker_only.group(1), failure=failure) == "succeeded"


def test_argo_cannot_hold_a_gjson_query_in_a_selector_key():
    with pytest.raises(ValueError):
        argo_requirements('status.conditions.#(type=="Failed").status = True')


@pytest.mark.parametrize("state,job", LIFECYCLE, ids=IDS)
def test_kfp_and_polyaxon_read_the_last_condition(state, job):
    done, last = kfp_is_expected_conditions(job)
    assert done == (state in ("Succeeded", "Failed")) and last == state
    expected = {"Created": "running", "Running": "running", "Succeeded": "succeeded", "Failed": "failed",
                "Restarting": "warning", "Suspended": None}
    assert polyaxon_state(job) == expected[state]


# ---------------------------------------------------------------------------------------------
# The page


def _blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", PAGE, flags=re.S)


def test_every_snippet_on_the_page_is_exercised():
    # python: the SDK snippet; yaml: Katib, Argo; sh: kubectl. A new one needs a test above.
    counts = {lang: len(_blocks(lang)) for lang in re.findall(r"```(\w+)\n", PAGE)}
    assert counts == {"python": 1, "yaml": 2, "sh": 1}


def test_the_readme_links_the_page():
    assert "(docs/ecosystem.md)" in (ROOT / "README.md").read_text()

