"""Kueue v0.11 and later: a queued MXJob's pods form one plain-pod group per job attempt
(MXJOB_KUEUE_POD_GROUPS=true on the hooks server; docs/ecosystem.md, "Kueue"). Each pod states the LocalQueue, the
attempt's group name and the group's size, which is all Kueue's pod integration reads to make one
Workload of them. Without the setting (Kueue v0.5-v0.10, whose MXJob integration queues the job
itself) the hooks add nothing."""

from __future__ import annotations

import re

import pytest
from helpers.mcsim import Sim, mxjob

from hooks.mxjob.names import pod_group_name
from hooks.mxjob.sync import sync_mxjob

QUEUE = "kueue.x-k8s.io/queue-name"
GROUP = "kueue.x-k8s.io/pod-group-name"
TOTAL = "kueue.x-k8s.io/pod-group-total-count"
RETRIABLE = "kueue.x-k8s.io/retriable-in-group"
ON = {"kueue_pod_groups": "true"}
PODS = ["mx-scheduler-0", "mx-server-0", "mx-worker-0", "mx-worker-1"]


def queued(label: bool = True, **spec) -> dict:
    job = mxjob(**spec)
    job["metadata"]["uid"] = "0123456789abcdef"
    if label:
        job["metadata"]["labels"] = {QUEUE: "team-a"}
    return job


def kueue_marks(pod: dict) -> dict[str, str | None]:
    meta = pod["metadata"]
    annotations = meta.get("annotations") or {}
    return {"queue": meta["labels"].get(QUEUE), "group": meta["labels"].get(GROUP),
            "total": annotations.get(TOTAL), "retriable": annotations.get(RETRIABLE)}


def test_every_pod_of_a_queued_job_names_its_queue_its_attempts_group_and_the_groups_size():
    # Not retriable in its group: the hook, not Kueue, replaces the pods, in the next attempt's group
    # (without it Kueue keeps a stopped group's pods for replacements of the same names: never).
    sim = Sim(queued(), settings=ON)
    sim.sync()
    assert sorted(sim.pods) == PODS
    assert {name: kueue_marks(pod) for name, pod in sim.pods.items()} == {
        name: {"queue": "team-a", "group": "mx-01234567-0", "total": "4", "retriable": "false"} for name in PODS}


@pytest.mark.parametrize(("settings", "label"), [({}, True), ({"kueue_pod_groups": "false"}, True), (ON, False)],
                         ids=["default-setting", "setting-false", "job-not-queued"])
def test_no_kueue_marks_unless_the_setting_is_on_and_the_job_is_queued(settings, label):
    sim = Sim(queued(label), settings=settings)
    sim.sync()
    assert all(kueue_marks(pod) == {"queue": None, "group": None, "total": None, "retriable": None}
               for pod in sim.pods.values())


def test_the_queue_annotation_kueue_once_read_counts_as_the_label():
    job = queued(label=False)
    job["metadata"]["annotations"] = {QUEUE: "team-b"}
    sim = Sim(job, settings=ON)
    sim.sync()
    assert {kueue_marks(pod)["queue"] for pod in sim.pods.values()} == {"team-b"}


def test_a_restarted_job_forms_a_new_group_for_its_new_attempt():
    # Kueue finishes a group once: the pods of attempt 1 must not join attempt 0's.
    every = {"restartPolicy": "ExitCode"}
    sim = Sim(queued(replicas={"Scheduler": {"replicas": 1, **every}, "Server": {"replicas": 1, **every},
                               "Worker": {"replicas": 2, **every}}, runPolicy={"backoffLimit": 3}), settings=ON)
    sim.sync()
    sim.run()
    sim.sync()
    sim.set_phase("mx-worker-1", "Failed", exit_code=137, reason="Error")
    for _ in range(3):  # the attempt's record, the old pods deleted, the new ones created
        sim.sync()
    assert sim.status["attempt"] == 1
    assert {name: kueue_marks(pod)["group"] for name, pod in sim.pods.items()} == {name: "mx-01234567-1" for name in PODS}


@pytest.mark.parametrize("attempt", [0, 99999])
def test_a_group_name_is_a_label_value_whatever_the_job_name(attempt):
    name = pod_group_name("j" * 63, "0123456789abcdef", attempt)
    assert len(name) <= 63 and re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", name), name


def test_an_unknown_setting_is_an_installation_error_that_names_the_setting():
    with pytest.raises(ValueError, match="MXJOB_KUEUE_POD_GROUPS='yes': use true"):
        sync_mxjob({"parent": queued()}, now=None, kueue_pod_groups="yes")  # type: ignore[arg-type]


PRIORITY = "kueue.x-k8s.io/priority-class"


def with_priorities(job_class: str | None, **templates: str) -> dict:
    """A queued job with the job's priority-class label `job_class` and those of the replica templates named."""
    job = queued()
    if job_class is not None:
        job["metadata"]["labels"][PRIORITY] = job_class
    for rtype, value in templates.items():
        job["spec"]["mxReplicaSpecs"][rtype]["template"].setdefault("metadata", {})["labels"] = {PRIORITY: value}
    return job


@pytest.mark.parametrize(("job_class", "templates", "expected"), [
    ("high", {}, "high"),
    ("high", {"Worker": "high"}, "high"),
    (None, {"Scheduler": "low", "Server": "low", "Worker": "low"}, "low"),
    (None, {"Worker": "low"}, "low"),
], ids=["job-label", "job-label-and-same-template", "every-template", "one-template"])
def test_every_pod_of_a_group_carries_the_one_priority_class_kueue_reads_off_any_of_them(job_class, templates, expected):
    # Kueue v0.17.0 takes a group's WorkloadPriorityClass from whichever pod it lists first: all must agree.
    sim = Sim(with_priorities(job_class, **templates), settings=ON)
    sim.sync()
    assert sorted(sim.pods) == PODS
    assert {name: pod["metadata"]["labels"].get(PRIORITY) for name, pod in sim.pods.items()} == dict.fromkeys(PODS, expected)


def test_no_priority_class_unless_the_job_or_a_template_names_one():
    sim = Sim(queued(), settings=ON)
    sim.sync()
    assert all(PRIORITY not in pod["metadata"]["labels"] for pod in sim.pods.values())


@pytest.mark.parametrize(("job_class", "templates", "field", "says"), [
    ("high", {"Worker": "low"}, "Worker", "'low' differs from the MXJob's label 'high'"),
    (None, {"Server": "low", "Worker": "high"}, "Worker", "'high' differs from another template's 'low'"),
], ids=["template-against-job", "templates-disagree"])
def test_priority_classes_that_disagree_are_refused_naming_the_field(job_class, templates, field, says):
    sim = Sim(with_priorities(job_class, **templates), settings=ON)
    sim.sync()
    assert sim.pods == {}
    message = next(c["message"] for c in sim.status["conditions"] if c["type"] == "Failed")
    assert f"spec.mxReplicaSpecs.{field}.template.metadata.labels[{PRIORITY}]: {says}" in message, message


@pytest.mark.parametrize("settings", [{}, {"kueue_pod_groups": "false"}], ids=["default-setting", "setting-false"])
def test_kueue_v0_10_reads_the_priority_off_the_job_so_the_pods_are_left_as_their_templates_say(settings):
    # There Kueue's MXJob integration queues the job itself: the pods are not Kueue's, nothing is checked.
    sim = Sim(with_priorities("high", Worker="low"), settings=settings)
    sim.sync()
    assert {name: pod["metadata"]["labels"].get(PRIORITY) for name, pod in sim.pods.items()} == {
        "mx-scheduler-0": None, "mx-server-0": None, "mx-worker-0": "low", "mx-worker-1": "low"}


# --- a lost pod in a Kueue group: the whole job, in a group of the pods the attempt creates ------------------------


def worker_only(restart_policy: str = "ExitCode") -> Sim:
    """A queued worker-only job of two workers (independent: a lost worker is recreated alone without Kueue)."""
    sim = Sim(queued(replicas={"Worker": {"replicas": 2, "restartPolicy": restart_policy}},
                     runPolicy={"backoffLimit": 3}), settings=ON)
    sim.sync()
    sim.run()
    sim.sync()
    return sim


def settle(sim: Sim, syncs: int = 4) -> None:
    """The attempt's record, the old pods deleted (and let go by Kueue once their group has ended), the new ones."""
    for _ in range(syncs):
        sim.sync()
        for name, pod in sim.pods.items():
            if pod["metadata"].get("deletionTimestamp"):
                sim.gc(name)


def test_a_failed_pod_of_a_group_restarts_the_job_whole_in_a_group_of_the_pods_it_creates():
    # Kueue keeps a failed pod of its group (its finalizer) until the group ends, so no pod of the same name can
    # replace it; and a succeeded index is not run again, so attempt 1's group is the one pod it creates.
    sim = worker_only()
    sim.set_phase("mx-worker-0", "Succeeded", exit_code=0)
    sim.sync()
    sim.set_phase("mx-worker-1", "Failed", exit_code=137, reason="Error")
    settle(sim)
    assert sim.status["attempt"] == 1 and sim.status["restartCount"] == 1
    assert {name: kueue_marks(pod) for name, pod in sim.pods.items()} == {
        "mx-worker-0": {"queue": "team-a", "group": "mx-01234567-0", "total": "2", "retriable": "false"},
        "mx-worker-1": {"queue": "team-a", "group": "mx-01234567-1", "total": "1", "retriable": "false"}}




def test_an_evicted_group_after_a_success_comes_back_as_a_group_of_the_rest():
    sim = worker_only()
    sim.set_phase("mx-worker-0", "Succeeded", exit_code=0)
    sim.sync()
    # Kueue stops the group: TerminationTarget on each pod it deletes (a succeeded one keeps its phase).
    sim.write_status("v1", "Pod", "mx-worker-1", {**sim.pods["mx-worker-1"]["status"], "conditions": [
        {"type": "TerminationTarget", "status": "True", "reason": "WorkloadEvictedDueToPreempted", "message": "m"}]})
    sim.terminating("mx-worker-1")
    settle(sim)
    assert sim.status["attempt"] == 1 and sim.status.get("restartCount", 0) == 0
    assert kueue_marks(sim.pods["mx-worker-1"])["total"] == "1"


@pytest.mark.parametrize("settings", [{}, ON], ids=["not-queued", "queued"])
def test_without_kueue_a_failed_independent_worker_is_recreated_alone(settings):
    sim = Sim(queued(label=settings == ON, replicas={"Worker": {"replicas": 2, "restartPolicy": "ExitCode"}},
                     runPolicy={"backoffLimit": 3}), settings={} if settings == ON else settings)
    sim.sync()
    sim.run()
    sim.sync()
    sim.set_phase("mx-worker-1", "Failed", exit_code=137, reason="Error")
    settle(sim)
    assert sim.status.get("attempt", 0) == 0 and sim.status["restartCount"] == 1
