"""ChainerJobs through a real Kueue v0.17.0 on the local cluster (docs/ecosystem.md, "Kueue"): a queued ChainerJob's
master pod and worker pods form one Kueue plain-pod group, so Kueue admits the whole job or none of it (a
partially admitted MPI job would wait for its missing ranks for ever).

Kueue runs with only its `pod` integration, as `localcluster up --kueue` configures it: it manages a pod whose
owners (the master's batch/v1 Job, a worker's StatefulSet, then the ChainerJob) are not jobs of an enabled
integration. Without the Kueue build the module is skipped and says how to get one (KUEUE=run fails instead).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers.kueue_queues import (
    QUEUE_LABEL,
    cond,
    gated,
    group_workload,
    new_queue,
    phase,
    preempting_queue,
    queued_cluster,
    released,
    workloads,
)

from localcluster.cluster import LocalCluster, condition, finished
from localcluster.types import KubeObject

pytestmark = [pytest.mark.e2e, pytest.mark.apiserver]

TIMEOUT = 90.0
WORKER = ["sh", "-c", "trap exit TERM; while true; do sleep 1 & wait; done"]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with queued_cluster(tmp_path_factory.mktemp("kueue-chainer") / "state") as c:
        yield c


@pytest.fixture
def queue(cluster: LocalCluster) -> str:
    """A namespace of its own with a LocalQueue `q` over a ClusterQueue of 1 CPU; the namespace's name."""
    return new_queue(cluster, "kc")


def queued_chainerjob(name: str, namespace: str, master: list[str], *, workers: int = 2, cpu: str = "200m") -> KubeObject:
    """A ChainerJob labelled for LocalQueue `q`: a master and `workers` workers of `cpu` each."""
    def template(command: list[str]) -> dict[str, Any]:
        return {"spec": {"terminationGracePeriodSeconds": 1, "containers": [{
            "name": "chainer", "image": "busybox:1.37", "command": command, "resources": {"requests": {"cpu": cpu}}}]}}
    return {"apiVersion": "kubeflow.org/v1alpha1", "kind": "ChainerJob",
            "metadata": {"name": name, "namespace": namespace, "labels": {QUEUE_LABEL: "q"}},
            "spec": {"master": {"template": template(master)},
                     "workerSets": {"ws": {"replicas": workers, "template": template(WORKER)}}}}


def job_pods(cluster: LocalCluster, namespace: str, name: str) -> list[KubeObject]:
    """The job's pods by its operator label (the master's belong to its Job, the workers' to a StatefulSet)."""
    return sorted((p for p in cluster.store.list_shared("v1", "Pod", namespace)
                   if (p["metadata"].get("labels") or {}).get("chainerjob.kubeflow.org/name") == name),
                  key=lambda p: p["metadata"]["name"])


def state(cluster: LocalCluster, namespace: str, name: str) -> str | None:
    conditions = ((cluster.get_job(name, namespace) or {}).get("status") or {}).get("conditions") or []
    return conditions[-1]["type"] if conditions else None


def test_two_chainerjobs_that_do_not_fit_together_are_each_admitted_as_one_pod_group(cluster: LocalCluster, queue: str) -> None:
    # Three pods of 200m each: 600m a job, against 1 CPU. The first job's master runs until told to end.
    release = Path(cluster.state_dir) / f"{queue}-release"
    cluster.submit(queued_chainerjob("first", queue, ["sh", "-c", f"while [ ! -e {release} ]; do sleep 0.2; done"]))
    cluster.wait_for(lambda: len(pods := job_pods(cluster, queue, "first")) == 3 and all(phase(p) == "Running" for p in pods),
                     TIMEOUT, what="the first job's master and two workers admitted together and running")
    first = group_workload(cluster, queue, "first")
    assert first is not None and cond(first, "Admitted").get("status") == "True"
    # One Workload for the whole job: the master's pod set and the workers'.
    assert sorted(p["count"] for p in first["spec"]["podSets"]) == [1, 2], first["spec"]["podSets"]
    assert all(p["metadata"]["labels"]["kueue.x-k8s.io/managed"] == "true" for p in job_pods(cluster, queue, "first"))
    assert cluster.wait_for(lambda: state(cluster, queue, "first") == "Running", TIMEOUT, what="the first job Running")

    cluster.submit(queued_chainerjob("second", queue, ["true"]))
    waiting = cluster.wait_for(
        lambda: (w := group_workload(cluster, queue, "second")) and cond(w, "QuotaReserved").get("status") == "False" and w,
        TIMEOUT, what="the second job's group to wait for quota")
    said = cond(waiting, "QuotaReserved")
    assert "insufficient unused quota for cpu" in said["message"]
    # Every pod of the second job exists (Kueue admits a group only once all of it does), each behind the gate.
    pods = job_pods(cluster, queue, "second")
    assert len(pods) == 3 and all(gated(p) and phase(p) == "Pending" for p in pods), [p["metadata"]["name"] for p in pods]

    # What the user sees: Waiting, in Kueue's own words (its customize hook relates the group's Workload).
    names = ", ".join(p["metadata"]["name"] for p in sorted(pods, key=lambda p: "workerset" in p["metadata"]["name"]))
    why = (f"it waits for Kueue: pods {names} are not admitted: Workload {waiting['metadata']['name']} of LocalQueue q "
           f"is {said['reason']}: {said['message']}")
    job = cluster.wait_for(lambda: (j := cluster.get_job("second", queue)) and (condition(j, "Waiting") or {}).get(
        "message", "").endswith(f"{why}.") and j, TIMEOUT, what="the second job to say why Kueue holds it back")
    waiting_condition = condition(job, "Waiting")
    assert waiting_condition is not None and waiting_condition["reason"] == "WaitingForKueue"
    assert waiting_condition["message"] == (f"ChainerJob {queue}/second is waiting for Kueue to admit its pod group (the "
                                            f"master and every worker, admitted together); {why}.")
    assert cluster.control_plane is not None
    _, *rows = cluster.control_plane.kubectl("get", "chainerjob", "-n", queue).stdout.splitlines()
    assert [row.split()[:2] for row in rows] == [["first", "Running"], ["second", "Waiting"]], rows

    release.touch()
    for name in ("first", "second"):
        done = cluster.wait_finished(name, TIMEOUT, namespace=queue)
        assert finished(done) == "Succeeded" and state(cluster, queue, name) == "Complete", done.get("status")
        admitted = condition(done, "Waiting")
        # The first job's queue was empty: Kueue may admit its group before any sync sees it held, and
        # then it never waited (Waiting is only ever added True). The second one was seen waiting above.
        never_waited = name == "first" and admitted is None
        assert never_waited or (admitted and (admitted["status"], admitted["reason"]) == ("False", "KueueAdmitted")), admitted
    cluster.wait_for(lambda: all(cond(group_workload(cluster, queue, name), "Finished").get("status") == "True"
                                 for name in ("first", "second")), TIMEOUT, what="both groups' Workloads to finish")
    cluster.wait_for(lambda: released(cluster, queue), TIMEOUT, what="the ClusterQueue to hold no quota")


def test_a_queued_chainerjob_suspended_gives_its_quota_back_and_resumed_is_admitted_again(cluster: LocalCluster,
                                                                                          queue: str) -> None:
    """spec.runPolicy.suspend on a running queued job: its pods go, Kueue finishes their group and the quota
    is free; resumed, the job runs as attempt 1 in a new group that Kueue admits, and completes."""
    master = ["sh", "-c", 'if [ "$MXJOB_ATTEMPT" = 1 ]; then exit 0; fi; trap exit TERM; while true; do sleep 1 & wait; done']
    cluster.submit(queued_chainerjob("pausing", queue, master))
    cluster.wait_for(lambda: len(pods := job_pods(cluster, queue, "pausing")) == 3 and all(phase(p) == "Running" for p in pods),
                     TIMEOUT, what="the job's three pods admitted and running")
    attempt_0 = group_workload(cluster, queue, "pausing")
    assert attempt_0 is not None and attempt_0["metadata"]["name"].endswith("-0")
    cluster.update_job("pausing", lambda j: j["spec"].setdefault("runPolicy", {}).update(suspend=True), namespace=queue)
    cluster.wait_for(lambda: not job_pods(cluster, queue, "pausing"), TIMEOUT, what="every pod of the suspended job gone")
    assert cluster.wait_for(lambda: state(cluster, queue, "pausing") == "Suspended", TIMEOUT, what="Suspended")
    cluster.wait_for(lambda: cond(group_workload(cluster, queue, "pausing"), "Finished").get("status") == "True",
                     TIMEOUT, what="the suspended attempt's group to finish")
    cluster.wait_for(lambda: released(cluster, queue), TIMEOUT, what="the ClusterQueue to hold no quota")

    cluster.update_job("pausing", lambda j: j["spec"]["runPolicy"].update(suspend=False), namespace=queue)
    done = cluster.wait_finished("pausing", TIMEOUT, namespace=queue)
    assert finished(done) == "Succeeded" and done["status"]["attempt"] == 1, done["status"]
    # Attempt 1's group is a new Workload (attempt 0's goes with its pods, which own it).
    names = [w["metadata"]["name"] for w in workloads_of(cluster, queue, "pausing")]
    assert f"{attempt_0['metadata']['name'][:-2]}-1" in names, names
    cluster.wait_for(lambda: all(cond(w, "Finished").get("status") == "True" for w in workloads_of(cluster, queue, "pausing")),
                     TIMEOUT, what="the groups to finish")
    cluster.wait_for(lambda: released(cluster, queue), TIMEOUT, what="the ClusterQueue to hold no quota")


def workloads_of(cluster: LocalCluster, namespace: str, job: str) -> list[dict[str, Any]]:
    return [w for w in workloads(cluster, namespace) if w["metadata"]["name"].startswith(f"{job}-")]


def test_a_running_chainerjob_kueue_preempts_is_requeued_uncounted_and_completes_after_the_preemptor(
        cluster: LocalCluster) -> None:
    """A running low-priority ChainerJob (a master and 2 workers of 200m, runPolicy.maxRestarts 0 and
    spec.master.backoffLimit 0) and a
    high-priority pod of 600m that does not fit beside it in 1 CPU: Kueue preempts the job's group (TerminationTarget
    on its pods, then their deletion). The job restarts whole as attempt 1 in a new pod group, uncounted; while the
    preemptor runs it says it was evicted and waits for Kueue; once the preemptor is done Kueue admits the new
    group and the job completes. Every Workload finishes and the ClusterQueue holds nothing."""
    namespace = preempting_queue(cluster, "kc")
    release, high_release = (Path(cluster.state_dir) / f"{namespace}-{what}" for what in ("release", "high-release"))
    low = queued_chainerjob("low", namespace, ["sh", "-c", f"trap 'exit 143' TERM; while [ ! -e {release} ]; do sleep 0.2; done"])
    low["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] = f"{namespace}-low"
    low["spec"]["runPolicy"] = {"maxRestarts": 0}
    # The master Job fails on the one pod Kueue stops, often before a sync sees the stop: still an eviction.
    low["spec"]["master"]["backoffLimit"] = 0
    cluster.submit(low)
    cluster.wait_for(lambda: len(pods := job_pods(cluster, namespace, "low")) == 3 and all(phase(p) == "Running" for p in pods),
                     TIMEOUT, what="the low-priority job's master and two workers admitted and running")
    assert cluster.wait_for(lambda: state(cluster, namespace, "low") == "Running", TIMEOUT, what="the low job Running")
    reasons: set[str] = set()
    groups: set[str] = set()

    def seen(event: str, obj: KubeObject) -> None:
        if obj["metadata"].get("namespace") != namespace:
            return
        if obj.get("kind") == "ChainerJob":
            reasons.add(cond(obj, "Restarting").get("reason", ""))
        elif obj.get("kind") == "Pod" and obj["metadata"]["name"].startswith("low-"):
            groups.add(obj["metadata"]["labels"].get("kueue.x-k8s.io/pod-group-name", ""))

    cluster.store.watch(seen)
    high: KubeObject = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "high", "namespace": namespace,
                     "labels": {QUEUE_LABEL: "q", "kueue.x-k8s.io/priority-class": f"{namespace}-high"}},
        "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 1, "containers": [{
            "name": "main", "image": "busybox:1.37", "resources": {"requests": {"cpu": "600m"}},
            "command": ["sh", "-c", f"while [ ! -e {high_release} ]; do sleep 0.2; done"]}]}}
    cluster.store.create(high)
    cluster.wait_for(lambda: phase(cluster.pod("high", namespace)) == "Running", TIMEOUT,
                     what="the high-priority pod to preempt the job and run")

    # What the user sees while the preemptor holds the quota: evicted, restarting, waiting for Kueue (once a
    # sync has seen every pod of attempt 1 behind Kueue's gate: each pod's change syncs the job again).
    def requeued() -> KubeObject | None:
        job = cluster.get_job("low", namespace)
        pods = job_pods(cluster, namespace, "low")
        said = (condition(job, "Waiting") or {}).get("message", "")
        return job if (len(pods) == 3 and all(gated(p) and p["metadata"]["labels"].get("chainerjob.kubeflow.org/attempt") == "1"
                                              for p in pods)
                       and "low-workerset-ws-0, low-workerset-ws-1 are not admitted: " in said) else None

    job = cluster.wait_for(requeued, TIMEOUT, what="attempt 1's pods gated by Kueue and the job waiting for it")
    restarting, waiting = condition(job, "Restarting"), condition(job, "Waiting")
    assert restarting is not None and (restarting["status"], restarting["reason"]) == ("True", "ChainerJobEvictedByQueue")
    assert restarting["message"].startswith(f"ChainerJob {namespace}/low is restarting as attempt 1: Kueue evicted it "
                                            "(WorkloadEvictedDueToPreempted: 'Preempted to accommodate a workload"), restarting
    assert "not counted against runPolicy.maxRestarts (restarts so far: 0 of runPolicy.maxRestarts 0)" in restarting["message"]
    assert waiting is not None and (waiting["status"], waiting["reason"]) == ("True", "WaitingForKueue"), waiting
    assert waiting["message"].startswith(f"ChainerJob {namespace}/low is waiting for Kueue to admit its pod group (the "
                                         "master and every worker, admitted together); it waits for Kueue: pods low-master-"), waiting
    assert state(cluster, namespace, "low") == "Restarting" and condition(job, "Failed") is None
    assert cluster.control_plane is not None
    _, *rows = cluster.control_plane.kubectl("get", "chainerjob", "-n", namespace).stdout.splitlines()
    assert [row.split()[:2] for row in rows] == [["low", "Restarting"]], rows

    high_release.touch()
    cluster.wait_for(lambda: len(pods := job_pods(cluster, namespace, "low")) == 3 and all(
        phase(p) == "Running" and p["metadata"]["labels"].get("chainerjob.kubeflow.org/attempt") == "1" for p in pods),
        TIMEOUT, what="the job's attempt 1 admitted again once the preemptor is done, and running")
    again = cluster.wait_for(lambda: (c := condition(cluster.get_job("low", namespace), "Restarting") or {}).get("status")
                             == "False" and c, TIMEOUT, what="the job to say its attempt 1 runs")
    assert again["reason"] == "ChainerJobRestarted" and "restarted after Kueue evicted it (WorkloadEvictedDueToPreempted" \
        in again["message"], again
    release.touch()
    done = cluster.wait_finished("low", TIMEOUT, namespace=namespace)
    assert finished(done) == "Succeeded" and state(cluster, namespace, "low") == "Complete", done.get("status")
    assert done["status"]["attempt"] == 1, done["status"]  # maxRestarts 0 was not spent
    assert "ChainerJobEvictedByQueue" in reasons, reasons
    assert len(groups) == 2 and "" not in groups, groups  # a pod group, so a Workload, per attempt
    cluster.wait_for(lambda: all(cond(w, "Finished").get("status") == "True" for w in workloads(cluster, namespace)),
                     TIMEOUT, what="every Workload to finish")
    cluster.wait_for(lambda: released(cluster, namespace), TIMEOUT, what="the ClusterQueue to hold no quota")
