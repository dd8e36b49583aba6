"""A Failed ChainerJob says what its master pod showed (exit code, reason, message) and keeps it.

The master pods are the master Job's, not the ChainerJob's children: the customize hook relates
them (hooks.chainerjob.related), the emulation sends them in `related` as Metacontroller does, and
the outcome record keeps what the newest failed one showed after the pods are gone.
"""
from __future__ import annotations

import json
from dataclasses import replace

import pytest
from helpers import yamlio
from helpers.chainersim import JOB_KEY, ChainerSim, chainerjob

from hooks.chainerjob.related import (
    customize_chainerjob,
    failure_words,
    master_failure,
    read_related_pods,
    recorded_failure,
)
from hooks.chainerjob.status import master_record
from hooks.chainerjob.sync import CONFIG_MAP_KEY, sync_chainerjob
from hooks.kinds import CHAINERJOB, MXJOB
from hooks.server.app import create_app
from hooks.shared.errors import InvalidRequest
from hooks.shared.memory import read_record

MASTER_LABELS = {"chainerjob.kubeflow.org/name": "chj", "chainerjob.kubeflow.org/role": "master"}


def parent(name: str = "chj") -> dict:
    return {"apiVersion": "kubeflow.org/v1alpha1", "kind": "ChainerJob",
            "metadata": {"name": name, "namespace": "ns", "uid": "u", "generation": 3}, "spec": {}}


def pod(name: str, *, phase: str = "Failed", labels: dict | None = None, container: str = "chainer",
        terminated: dict | None = None, created: str = "2026-11-21T10:00:00Z", **status) -> dict:
    state = {"terminated": terminated} if terminated is not None else {"running": {}}
    return {"metadata": {"name": name, "labels": MASTER_LABELS if labels is None else labels,
                         "creationTimestamp": created},
            "spec": {"containers": [{"name": "sidecar"}, {"name": container}]},
            "status": {"phase": phase, "containerStatuses": [
                {"name": "sidecar", "state": {"terminated": {"exitCode": 9, "reason": "Sidecar"}}},
                {"name": container, "state": state}], **status}}


# --- the customize hook ---------------------------------------------------------------------------

def test_customize_relates_the_jobs_pods_by_its_operator_name_label_only():
    answer = customize_chainerjob({"controller": {}, "parent": parent()})
    assert answer == {"relatedResources": [{"apiVersion": "v1", "resource": "pods",
                                            "labelSelector": {"matchLabels": {"chainerjob.kubeflow.org/name": "chj"}}}]}


def test_customize_depends_on_the_name_alone_even_for_an_invalid_spec():
    broken = {**parent(), "spec": {"backend": 7, "workerSets": "no"}, "status": {"anything": 1}}
    assert customize_chainerjob({"parent": broken}) == customize_chainerjob({"parent": parent()})


@pytest.mark.parametrize("request_body", [{}, {"parent": {**parent(), "kind": "MXJob"}}, [], {"parent": {"kind": "x"}}])
def test_customize_refuses_a_request_without_a_chainerjob(request_body):
    with pytest.raises(InvalidRequest):
        customize_chainerjob(request_body)


# --- reading the related pods ---------------------------------------------------------------------

def test_related_pods_are_optional_but_must_be_maps():
    assert read_related_pods({}) == {} and read_related_pods({"related": {}}) == {}
    assert read_related_pods({"related": {"Pod.v1": {"p": {}}}}) == {"p": {}}
    for bad in ({"related": []}, {"related": {"Pod.v1": ["p"]}}):
        with pytest.raises(InvalidRequest):
            read_related_pods(bad)


def test_the_newest_failed_master_pod_is_the_one_said():
    pods = {
        "old": pod("old", terminated={"exitCode": 2, "reason": "Error", "message": "first try",
                                      "finishedAt": "2026-11-21T10:01:00Z"}),
        "new": pod("new", terminated={"exitCode": 1, "reason": "Error", "message": "Traceback\nValueError",
                                      "finishedAt": "2026-11-21T10:05:00Z"}),
        "running": pod("running", phase="Running"),
        "worker": pod("worker", labels={**MASTER_LABELS, "chainerjob.kubeflow.org/role": "workerset"},
                      terminated={"exitCode": 3, "finishedAt": "2026-11-21T11:00:00Z"}),
        "other-job": pod("other-job", labels={**MASTER_LABELS, "chainerjob.kubeflow.org/name": "other"},
                         terminated={"exitCode": 4, "finishedAt": "2026-11-21T11:00:00Z"}),
    }
    failure = master_failure(pods, "chj", "chainer")
    assert failure == {"pod": "new", "exitCode": 1, "reason": "Error", "message": "ValueError"}
    assert failure_words(failure) == "the master pod new ended with exit code 1, reason Error: 'ValueError'"
    # The same pods in another order give the same answer.
    assert master_failure(dict(reversed(list(pods.items()))), "chj", "chainer") == failure


def test_pods_that_finished_together_are_told_apart_by_creation_then_name():
    same = {"finishedAt": "2026-11-21T10:05:00Z", "exitCode": 1}
    pods = {"b": pod("b", terminated=same), "a": pod("a", terminated=same, created="2026-11-21T10:00:01Z")}
    assert master_failure(pods, "chj", "chainer")["pod"] == "a"  # type: ignore[index]
    pods["a"]["metadata"]["creationTimestamp"] = "2026-11-21T10:00:00Z"
    assert master_failure(pods, "chj", "chainer")["pod"] == "b"  # type: ignore[index]


def attempts_pods() -> dict:
    """A master pod of attempt 0 that finished, and one of the restart's attempt 1 that failed before
    its container finished (evicted while it started: no finishedAt)."""
    return {"chj-master-old": pod("chj-master-old", terminated={"exitCode": 2, "reason": "Error",
                                                                "finishedAt": "2026-11-21T10:01:00Z"}),
            "chj-master-new": pod("chj-master-new", labels={**MASTER_LABELS, "chainerjob.kubeflow.org/attempt": "1"},
                                  created="2026-11-21T10:10:00Z", reason="Evicted", message="The node was low on memory.")}


@pytest.mark.parametrize(("attempt", "expected"), [
    (0, {"pod": "chj-master-old", "exitCode": 2, "reason": "Error"}),
    (1, {"pod": "chj-master-new", "reason": "Evicted", "message": "The node was low on memory."}),
], ids=["attempt-0", "attempt-1"])
def test_only_the_master_pods_of_the_attempt_are_read(attempt, expected):
    assert master_failure(attempts_pods(), "chj", "chainer", attempt) == expected


def test_a_restarted_master_job_that_fails_names_its_own_pod_not_an_earlier_attempts():
    job = {"metadata": {"name": "chj-master", "labels": {"chainerjob.kubeflow.org/attempt": "1"}},
           "status": {"failed": 1, "conditions": [{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded",
                                                   "message": "Job has reached the specified backoff limit"}]}}
    record = master_record(job, {}, job_name="chj", master_pods=attempts_pods(), main_container="chainer")
    assert record["masterFailure"]["pod"] == "chj-master-new"
    assert record["conditions"][0]["message"] == (
        "Job has reached the specified backoff limit; the master pod chj-master-new ended with no exit code, "
        "reason Evicted: 'The node was low on memory.'")


def test_the_main_container_is_read_and_without_a_spec_chainer_then_the_first():
    pods = {"p": pod("p", container="trainer", terminated={"exitCode": 5, "reason": "OOMKilled"})}
    assert master_failure(pods, "chj", "trainer") == {"pod": "p", "exitCode": 5, "reason": "OOMKilled"}
    # An invalid spec: the pod's own containers decide (no `chainer` here, so the first: the sidecar).
    assert master_failure(pods, "chj", None) == {"pod": "p", "exitCode": 9, "reason": "Sidecar"}


@pytest.mark.parametrize(("status", "reason", "message"), [
    ({"reason": "Evicted", "message": "The node was low on resource: memory."}, "Evicted",
     "The node was low on resource: memory."),
    ({"reason": "DeadlineExceeded", "message": "Pod was active on the node longer than the specified deadline"},
     "DeadlineExceeded", "Pod was active on the node longer than the specified deadline"),
    ({"conditions": [{"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler",
                      "message": "Preempted to fit a higher-priority pod"}]},
     "PreemptionByScheduler", "Preempted to fit a higher-priority pod"),
], ids=["evicted", "deadline", "preempted"])
def test_a_master_pod_ended_by_the_node_or_the_scheduler_says_so(status, reason, message):
    pods = {"p": pod("p", terminated={"exitCode": 137, "reason": "Error"}, **status)}
    assert master_failure(pods, "chj", "chainer") == {"pod": "p", "exitCode": 137, "reason": reason, "message": message}


def test_a_failed_pod_without_an_exit_code_is_still_said_and_texts_are_bounded():
    pods = {"p": pod("p", reason="Evicted", message="x" * 5000)}
    failure = master_failure(pods, "chj", "chainer")
    assert failure is not None and "exitCode" not in failure and len(failure["message"]) == 200
    assert failure_words(failure).startswith("the master pod p ended with no exit code, reason Evicted: 'xxx")


def test_malformed_pods_are_skipped():
    pods = {"a": None, "b": {"metadata": "x"}, "c": {"metadata": {"labels": MASTER_LABELS}, "status": "Failed"},
            "d": {"metadata": {"labels": MASTER_LABELS}, "status": {"phase": "Failed", "containerStatuses": [3]}}}
    assert master_failure(pods, "chj", "chainer") == {"pod": "d"}


def test_a_recorded_failure_reads_back_only_in_the_shape_written():
    written = {"pod": "p", "exitCode": 1, "reason": "Error", "message": "boom"}
    assert recorded_failure({"masterFailure": written}) == written
    assert recorded_failure({"masterFailure": {"pod": "p", "exitCode": True, "reason": 3, "message": "a\nb"}}) == \
        {"pod": "p", "message": "a"}
    assert recorded_failure({"masterFailure": {"exitCode": 1}}) is None and recorded_failure({}) is None


# --- a Failed job over the emulation ---------------------------------------------------------------

def failed_job(**spec) -> ChainerSim:
    sim = ChainerSim(chainerjob(workers={"ws": 2}, **spec))
    sim.sync()
    sim.all_ready()
    sim.sync()
    sim.master_pod("chj-master-aaaaa", phase="Running")
    sim.master("chj-master", active=1)
    sim.sync()
    sim.tick(30)
    sim.master_pod("chj-master-aaaaa", phase="Failed", exit_code=1, reason="Error",
                   message="ValueError: the learning rate must be positive\n  raised in train.py")
    sim.master("chj-master", failed=1, finished=("Failed", "BackoffLimitExceeded", "Job has reached the specified backoff limit"))
    return sim


EXPECTED = ("Job has reached the specified backoff limit; the master pod chj-master-aaaaa ended with exit code 1, "
            "reason Error: 'ValueError: the learning rate must be positive'")


def test_the_sync_request_carries_the_master_pods_in_related():
    sim = failed_job()
    request = sim.request()
    assert list(request["related"]) == ["Pod.v1"]
    assert list(request["related"]["Pod.v1"]) == ["chj-master-aaaaa"]
    assert "Pod.v1" not in request["children"]  # not a child: the Job owns it


def test_a_failed_master_pod_is_said_in_the_failed_condition_and_kept_in_the_outcome_record():
    sim = failed_job()
    answer = sim.sync()
    assert sim.state() == "Failed"
    failed = sim.condition("Failed")
    assert failed is not None and failed["message"] == EXPECTED and failed["reason"] == "BackoffLimitExceeded"
    running = sim.condition("Running")
    assert running is not None and EXPECTED in running["message"]
    assert "masterFailure" not in answer["status"]
    record = read_record(sim.children[CONFIG_MAP_KEY]["chj-outcome"])
    assert record is not None and record.data["masterFailure"] == {
        "pod": "chj-master-aaaaa", "exitCode": 1, "reason": "Error",
        "message": "ValueError: the learning rate must be positive"}
    # A fixed point: the sync that observes the record says the same, byte for byte.
    again = sim.sync()
    assert json.dumps(again["status"]) == json.dumps(answer["status"])


def test_the_message_survives_the_master_pods_and_job_being_deleted():
    sim = failed_job()
    answer = sim.sync()
    sim.sync()
    sim.remove("v1", "Pod", "chj-master-aaaaa")
    assert json.dumps(sim.sync()["status"]) == json.dumps(answer["status"])
    sim.delete(JOB_KEY, "chj-master")
    after = sim.sync()
    assert "chj-master" not in sim.children[JOB_KEY]
    assert sim.condition("Failed")["message"] == EXPECTED  # type: ignore[index]
    assert json.dumps(after["status"]) == json.dumps(answer["status"])


def test_once_recorded_a_later_pod_change_does_not_change_the_message():
    sim = failed_job()
    answer = sim.sync()
    sim.sync()
    sim.tick(10)
    sim.master_pod("chj-master-bbbbb", phase="Failed", exit_code=2, message="a later pod")
    assert json.dumps(sim.sync()["status"]) == json.dumps(answer["status"])


def test_a_complete_job_says_nothing_of_earlier_failed_master_pods():
    sim = ChainerSim(chainerjob())
    sim.sync()
    sim.master_pod("chj-master-aaaaa", phase="Failed", exit_code=1, message="first try")
    sim.master_pod("chj-master-bbbbb", phase="Succeeded", exit_code=0)
    sim.master("chj-master", succeeded=1, failed=1, finished=("Complete", "", ""))
    answer = sim.sync()
    assert sim.state() == "Complete" and "first try" not in json.dumps(answer["status"])
    record = read_record(sim.children[CONFIG_MAP_KEY]["chj-outcome"])
    assert record is not None and "masterFailure" not in record.data


def test_a_failed_job_without_observed_master_pods_says_the_job_alone():
    sim = ChainerSim(chainerjob())
    sim.sync()
    sim.master("chj-master", failed=1, finished=("Failed", "DeadlineExceeded", "Job was active longer than specified deadline"))
    sim.sync()
    assert sim.condition("Failed")["message"] == "Job was active longer than specified deadline"  # type: ignore[index]


def test_the_customize_hook_is_asked_once_per_generation():
    sim = failed_job()
    assert sim.customize_calls == 1
    sim.sync()
    sim.sync()
    assert sim.customize_calls == 1
    sim.edit({"backend": "mpi"})
    sim.sync()
    assert sim.customize_calls == 2


def test_without_a_customize_hook_the_request_has_no_related_pods_and_the_job_says_the_job_alone():
    from helpers.chainersim import CONTROLLER

    controller = yamlio.load(CONTROLLER.read_text())
    del controller["spec"]["hooks"]["customize"]
    sim = ChainerSim(chainerjob(), controller=controller)
    sim.sync()
    sim.master_pod("chj-master-aaaaa", phase="Failed", exit_code=1, message="boom")
    sim.master("chj-master", failed=1, finished=("Failed", "BackoffLimitExceeded", "Job has reached the specified backoff limit"))
    assert sim.request()["related"] == {}
    sim.sync()
    assert sim.condition("Failed")["message"] == "Job has reached the specified backoff limit"  # type: ignore[index]
    assert sim.customize_calls == 0


def test_an_invalid_edit_while_the_master_fails_still_says_the_master_pod():
    sim = failed_job()
    sim.edit({"backend": "nccl"})
    answer = sim.sync()
    assert "spec.backend" in answer["status"]["specError"]
    assert sim.condition("Failed")["message"] == EXPECTED  # type: ignore[index]


# --- the route ------------------------------------------------------------------------------------

def test_the_customize_route_answers_the_rules():
    client = create_app().test_client()
    reply = client.post("/chainerjob/customize", json={"controller": {}, "parent": parent()})
    assert reply.status_code == 200
    assert reply.get_json() == customize_chainerjob({"parent": parent()})


@pytest.mark.parametrize(("body", "content_type"), [(b'{"parent": {"kind": "MXJob"}}', "application/json"),
                                                   (b"not json", "application/json"),
                                                   (b"{}", "text/plain")])
def test_a_bad_customize_request_is_a_400(body, content_type):
    reply = create_app().test_client().post("/chainerjob/customize", data=body, content_type=content_type)
    assert reply.status_code == 400 and "error" in reply.get_json()


def boom(request):
    raise KeyError("a bug")


@pytest.mark.parametrize("customize", [boom, lambda request: {"relatedResources": "pods"}, lambda request: []],
                         ids=["raises", "rules-not-a-list", "not-an-object"])
def test_a_customize_bug_is_a_500_never_a_200(customize):
    app = create_app(kinds=[MXJOB, replace(CHAINERJOB, customize=customize)])
    reply = app.test_client().post("/chainerjob/customize", json={"parent": parent()})
    assert reply.status_code == 500 and reply.get_json()["error"] == "internal error"


def test_the_mxjob_customize_route_refuses_a_chainerjob():
    assert create_app().test_client().post("/mxjob/customize", json={"parent": parent()}).status_code == 400


def test_a_sync_through_the_server_reads_the_related_pods():
    sim = failed_job()
    request = sim.request()
    reply = create_app().test_client().post("/chainerjob/sync", json=request)
    assert reply.status_code == 200
    direct = sync_chainerjob(request, now=sim.now)
    failed = next(c for c in reply.get_json()["status"]["conditions"] if c["type"] == "Failed")
    assert failed["message"] == EXPECTED == next(c for c in direct["status"]["conditions"] if c["type"] == "Failed")["message"]


# --- which line is quoted (hooks.shared.termination.quoted_line), as MXJob quotes it ----------------

PROGRESS = "".join(f"iteration {n} main/loss {n / 100:.2f} elapsed {n * 3.5:.1f} s\n" for n in range(200))


def kubelet_tail(log: str) -> str:
    """As the kubelet's FallbackToLogsOnError message: the last 80 lines, then the last 2,048 bytes."""
    return "\n".join(log.splitlines()[-80:]).encode()[-2048:].decode(errors="ignore")


@pytest.mark.parametrize(("log", "policy", "words"), [
    (PROGRESS + "ERROR: checkpoint /data/ckpt is not writable\n", None,
     "exit code 1, reason Error: 'ERROR: checkpoint /data/ckpt is not writable'"),
    (PROGRESS + 'Traceback (most recent call last):\n  File "train_mnist.py", line 80, in <module>\n    main()\n'
     "chainer.backends.cuda.CUDARuntimeError: no CUDA-capable device is detected\n", None,
     "exit code 1, reason Error: 'chainer.backends.cuda.CUDARuntimeError: no CUDA-capable device is detected'"),
    (PROGRESS, None, "exit code 1, reason Error, last log line: 'iteration 199 main/loss 1.99 elapsed 696.5 s'"),
    ("rank 3 gave up\n", "File", "exit code 1, reason Error: 'rank 3 gave up'"),
], ids=["error-line-after-200-lines", "traceback", "log-only", "file-policy"])
def test_the_master_pod_is_quoted_by_the_line_that_says_what_went_wrong(log, policy, words):
    failed = pod("m", terminated={"exitCode": 1, "reason": "Error", "message": kubelet_tail(log)})
    if policy is not None:
        failed["spec"]["containers"][1]["terminationMessagePolicy"] = policy
    failure = master_failure({"m": failed}, "chj", "chainer")
    assert failure is not None and failure_words(failure) == f"the master pod m ended with {words}"
    # What the outcome record keeps reads back the same, whether the line is only a log line or not.
    assert recorded_failure({"masterFailure": failure}) == failure


def test_a_log_line_survives_the_pods_and_the_job_being_deleted():
    sim = ChainerSim(chainerjob(workers={"ws": 1}))
    sim.sync()
    sim.all_ready()
    sim.sync()
    sim.master_pod("chj-master-aaaaa", phase="Failed", exit_code=137, reason="Error", message=kubelet_tail(PROGRESS))
    sim.master("chj-master", failed=1, finished=("Failed", "BackoffLimitExceeded", "Job has reached the specified backoff limit"))
    sim.sync()
    said = ("Job has reached the specified backoff limit; the master pod chj-master-aaaaa ended with exit code 137, "
            "killed by SIGKILL, reason Error, last log line: 'iteration 199 main/loss 1.99 elapsed 696.5 s'")
    assert sim.condition("Failed")["message"] == said  # type: ignore[index]
    sim.sync()
    sim.remove("v1", "Pod", "chj-master-aaaaa")
    sim.delete(JOB_KEY, "chj-master")
    sim.sync()
    assert "chj-master" not in sim.children[JOB_KEY]
    assert sim.condition("Failed")["message"] == said  # type: ignore[index]


# --- a master pod deleted while it ran ----------------------------------------------------------------

def test_a_master_pod_deleted_on_the_jobs_deadline_says_it_was_killed_by_sigterm():
    # The Job controller deletes the running pod; the kubelet stops it with SIGTERM and writes it
    # Failed with every container terminated (Kubernetes >= 1.27, and the local cluster) before it
    # goes, so the deleted pod is the newest failed one, ended by the signal.
    sim = ChainerSim(chainerjob())
    sim.sync()
    sim.master_pod("chj-master-aaaaa", phase="Running")
    sim.master("chj-master", active=1)
    sim.sync()
    sim.tick(300)
    sim.master_pod("chj-master-aaaaa", phase="Failed", exit_code=143, reason="Error",
                   message="rank 0/3 on host chj-master\nepoch  3  test accuracy 0.9133\n")
    sim.master("chj-master", failed=1, finished=("Failed", "DeadlineExceeded", "Job was active longer than specified deadline"))
    answer = sim.sync()
    assert sim.condition("Failed")["message"] == (  # type: ignore[index]
        "Job was active longer than specified deadline; the master pod chj-master-aaaaa ended with exit code 143, "
        "killed by SIGTERM, reason Error, last log line: 'epoch  3  test accuracy 0.9133'")
    sim.remove("v1", "Pod", "chj-master-aaaaa")  # then it goes: the outcome record keeps what it said
    assert json.dumps(sim.sync()["status"]) == json.dumps(answer["status"])
