"""A real Kueue on the local cluster (`LocalCluster(kueue=True)`, `localcluster up --kueue`): Kueue v0.17.0 as
`make kueue` builds it, installed from its own manifests with the adaptations docs/real-apiserver.md lists.

What is under test is Kueue's pod integration doing its work against the real API server and the process
kubelet: plain pods labelled for a LocalQueue are gated, and admitted only within their ClusterQueue's quota.
One cluster serves the module (Kueue's start, about 10 s, is paid once); each test queues in a namespace
and a ClusterQueue of its own.

Without the Kueue build the module is skipped and says how to get one; `make test` builds it first and
sets KUEUE=run, under which a missing build fails instead.
"""

from __future__ import annotations

import argparse
import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from helpers import yamlio
from helpers.kueue_queues import (
    KUEUE_API,
    QUEUE_LABEL,
    cond,
    gated,
    group_workload,
    kueue_or_skip,
    new_queue,
    phase,
    preempting_queue,
    queued_cluster,
    quota,
    released,
    workloads,
)

from localcluster.cli import commands as cli
from localcluster.cluster import LocalCluster, finished
from localcluster.types import KubeObject

pytestmark = [pytest.mark.e2e, pytest.mark.apiserver]

TIMEOUT = 60.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with queued_cluster(tmp_path_factory.mktemp("kueue") / "state") as c:
        yield c


@pytest.fixture
def queue(cluster: LocalCluster) -> str:
    """A namespace of its own with a LocalQueue `q` over a ClusterQueue of 1 CPU; the namespace's name."""
    return new_queue(cluster, "kq")


def pod(name: str, namespace: str, command: list[str], *, cpu: str = "600m", queue: str | None = "q") -> KubeObject:
    labels = {QUEUE_LABEL: queue} if queue else {}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace, "labels": labels},
            "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 1,
                     "containers": [{"name": "main", "image": "busybox:1.37", "command": command,
                                     "resources": {"requests": {"cpu": cpu}}}]}}


def workload_of(cluster: LocalCluster, pod_name: str, namespace: str) -> dict[str, Any] | None:
    """The Workload Kueue made for a plain pod (it owns it by an ownerReference)."""
    for workload in workloads(cluster, namespace):
        if any(ref.get("name") == pod_name for ref in workload["metadata"].get("ownerReferences") or []):
            return workload
    return None


def test_a_pod_without_the_queue_label_runs_untouched(cluster: LocalCluster, queue: str) -> None:
    cluster.store.create(pod("plain", queue, ["true"], queue=None))
    done = cluster.wait_for(lambda: phase(cluster.pod("plain", queue)) == "Succeeded" and cluster.pod("plain", queue),
                            TIMEOUT, what="the unqueued pod to succeed")
    assert "kueue.x-k8s.io/managed" not in (done["metadata"].get("labels") or {})
    assert workloads(cluster, queue) == []


def test_two_pods_that_do_not_fit_the_quota_together_run_one_after_the_other(cluster: LocalCluster, queue: str) -> None:
    # 600m each against 1 CPU: the second waits for the first's quota. The first runs until told to end, so
    # the wait is observed, not raced.
    release = Path(cluster.state_dir) / f"{queue}-release"
    cluster.store.create(pod("first", queue, ["sh", "-c", f"while [ ! -e {release} ]; do sleep 0.2; done"]))
    first = cluster.wait_for(lambda: phase(cluster.pod("first", queue)) == "Running" and cluster.pod("first", queue),
                             TIMEOUT, what="the first pod to be admitted and run")
    # What Kueue's webhook did to it, and what admission undid.
    assert first["metadata"]["labels"]["kueue.x-k8s.io/managed"] == "true"
    assert "kueue.x-k8s.io/managed" in first["metadata"].get("finalizers", [])
    assert not gated(first)
    assert cond(workload_of(cluster, "first", queue), "Admitted").get("status") == "True"

    cluster.store.create(pod("second", queue, ["true"]))
    waiting = cluster.wait_for(
        lambda: (w := workload_of(cluster, "second", queue)) and cond(w, "QuotaReserved").get("status") == "False" and w,
        TIMEOUT, what="the second pod's Workload to wait for quota")
    second = cluster.pod("second", queue)
    assert gated(second) and phase(second) == "Pending"
    assert cond(second, "PodScheduled").get("reason") == "SchedulingGated"
    assert "insufficient unused quota for cpu" in cond(waiting, "QuotaReserved")["message"]

    release.touch()
    cluster.wait_for(lambda: phase(cluster.pod("second", queue)) == "Succeeded", TIMEOUT,
                     what="the second pod to be admitted and succeed once the first has ended")
    assert phase(cluster.pod("first", queue)) == "Succeeded"

    def all_finished() -> bool:
        found = workloads(cluster, queue)
        return len(found) == 2 and all(cond(w, "Finished").get("status") == "True" for w in found)

    cluster.wait_for(all_finished, TIMEOUT, what="both Workloads to finish")

    cluster.wait_for(lambda: released(cluster, queue), TIMEOUT, what="the ClusterQueue to hold no quota")


def queued_mxjob(name: str, namespace: str, command: list[str], *, workers: int = 2, cpu: str = "300m") -> KubeObject:
    return {"apiVersion": "kubeflow.org/v1", "kind": "MXJob",
            "metadata": {"name": name, "namespace": namespace, "labels": {QUEUE_LABEL: "q"}},
            "spec": {"mxReplicaSpecs": {"Worker": {"replicas": workers, "restartPolicy": "Never", "template": {
                "spec": {"terminationGracePeriodSeconds": 1, "containers": [{
                    "name": "mxnet", "image": "busybox:1.37", "command": command,
                    "resources": {"requests": {"cpu": cpu}}}]}}}}}}


def test_two_mxjobs_that_do_not_fit_together_are_admitted_each_as_one_pod_group(cluster: LocalCluster, queue: str) -> None:
    # Two workers of 300m each: 600m a job, against 1 CPU. The first job's workers run until told to end.
    release = Path(cluster.state_dir) / f"{queue}-release"
    cluster.submit(queued_mxjob("first", queue, ["sh", "-c", f"while [ ! -e {release} ]; do sleep 0.2; done"]))
    cluster.wait_for(lambda: len(cluster.pods("first", queue)) == 2
                     and all(phase(p) == "Running" for p in cluster.pods("first", queue)), TIMEOUT,
                     what="the first job's two pods to be admitted together and run")
    first = group_workload(cluster, queue, "first")
    assert first is not None and cond(first, "Admitted").get("status") == "True"
    assert sum(p["count"] for p in first["spec"]["podSets"]) == 2  # one Workload for both pods

    cluster.submit(queued_mxjob("second", queue, ["true"]))
    waiting = cluster.wait_for(
        lambda: (w := group_workload(cluster, queue, "second")) and cond(w, "QuotaReserved").get("status") == "False" and w,
        TIMEOUT, what="the second job's group to wait for quota")
    assert "insufficient unused quota for cpu" in cond(waiting, "QuotaReserved")["message"]
    pods = cluster.pods("second", queue)
    assert len(pods) == 2 and all(gated(p) and phase(p) == "Pending" for p in pods)

    # What the user sees: the job says Kueue holds it back, in Kueue's own words (its customize hook
    # relates the group's Workload), and `kubectl get` shows who holds it and Kueue's reason.
    said = cond(waiting, "QuotaReserved")
    why = (f"it waits for Kueue: pods second-worker-0, second-worker-1 are not admitted: Workload "
           f"{waiting['metadata']['name']} of LocalQueue q is {said['reason']}: {said['message']}")
    created = cluster.wait_for(lambda: (c := cond(cluster.get_job("second", queue), "Created")).get("message", "").endswith(
        f"{why}.") and c, TIMEOUT, what="the second job to say why Kueue holds it back")
    assert created["message"] == f"MXJob {queue}/second is created; {why}."
    assert said["reason"] == "Pending"
    assert cluster.get_job("second", queue)["status"]["waiting"] == "Kueue: Pending"  # type: ignore[index]
    assert cluster.control_plane is not None
    table = cluster.control_plane.kubectl("get", "mxjob", "-n", queue, "-o",
                                          "custom-columns=NAME:.metadata.name,WAITING:.status.waiting").stdout
    assert [row.split(None, 1) for row in table.splitlines()[1:]] == [["first", "<none>"], ["second", "Kueue: Pending"]], table
    header, *rows = cluster.control_plane.kubectl("get", "mxjob", "second", "-n", queue).stdout.splitlines()
    assert header.split()[:3] == ["NAME", "STATE", "WAITING"] and rows[0].split()[:4] == ["second", "Created", "Kueue:", "Pending"]

    release.touch()
    for name in ("first", "second"):
        job = cluster.wait_finished(name, TIMEOUT, namespace=queue)
        assert finished(job) == "Succeeded", job.get("status")
        assert "waiting" not in job["status"]
    cluster.wait_for(lambda: all(cond(group_workload(cluster, queue, name), "Finished").get("status") == "True"
                                 for name in ("first", "second")), TIMEOUT, what="both groups' Workloads to finish")


def test_run_kueue_applies_the_files_queues_before_the_job_and_kueue_manages_its_pods(tmp_path: Path) -> None:
    """`localcluster run --kueue FILE`: the file's quota first, then a queued MXJob, whose pods the hooks server
    puts in a Kueue pod group (run --kueue sets MXJOB_KUEUE_POD_GROUPS=true). The worker exits 0 only if Kueue
    manages its pod (its label, read through the downward API), and nothing is admitted without the LocalQueue:
    success says all of it happened."""
    kueue_or_skip()
    managed_env = {"name": "MANAGED", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['kueue.x-k8s.io/managed']"}}}
    group_env = {"name": "GROUP", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['kueue.x-k8s.io/pod-group-name']"}}}
    job = {"apiVersion": "kubeflow.org/v1", "kind": "MXJob",
           "metadata": {"name": "queued", "namespace": "kq-run", "labels": {QUEUE_LABEL: "q"}},
           "spec": {"mxReplicaSpecs": {"Worker": {"replicas": 1, "restartPolicy": "Never", "template": {
               "spec": {"terminationGracePeriodSeconds": 1, "containers": [{
                   "name": "mxnet", "image": "busybox:1.37", "command": ["sh", "-c", 'test "$MANAGED" = true && test -n "$GROUP"'],
                   "env": [managed_env, group_env], "resources": {"requests": {"cpu": "100m"}}}]}}}}}}
    path = tmp_path / "queued.yaml"
    path.write_text(yaml.safe_dump_all([*quota("kq-run", cpu="1"), job]))
    out, err = io.StringIO(), io.StringIO()
    args = argparse.Namespace(file=str(path), state_dir=str(tmp_path / "state"), timeout=120, kueue=True)
    assert cli.run(args, out=out, err=err) == cli.EXIT_SUCCEEDED, out.getvalue() + err.getvalue()


def test_a_pod_kueue_preempts_is_stopped_written_failed_and_released_by_kueue(cluster: LocalCluster) -> None:
    """Kueue preempts a running low-priority pod (TerminationTarget, then its deletion); the kubelet stops
    it and writes it Failed, as a kubelet does, so Kueue's finalizer lets it go and the high one runs.
    (Before, the kubelet never wrote a terminal phase and the evicted pod stayed Terminating for good.)"""
    namespace = preempting_queue(cluster)
    seen: list[tuple[str, KubeObject]] = []
    cluster.store.watch(lambda event, obj: seen.append((event, obj)) if obj.get("kind") == "Pod"
                        and obj["metadata"].get("namespace") == namespace else None)
    low = pod("low", namespace, ["sh", "-c", "trap 'exit 143' TERM; while true; do sleep 1 & wait; done"])
    low["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] = f"{namespace}-low"
    cluster.store.create(low)
    first = cluster.wait_for(lambda: phase(cluster.pod("low", namespace)) == "Running" and cluster.pod("low", namespace),
                             TIMEOUT, what="the low-priority pod to be admitted and run")
    high = pod("high", namespace, ["true"])
    high["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] = f"{namespace}-high"
    cluster.store.create(high)
    cluster.wait_for(lambda: phase(cluster.pod("high", namespace)) == "Succeeded", TIMEOUT,
                     what="the high-priority pod to preempt the low one, run and succeed")
    cluster.wait_for(lambda: cluster.pod("low", namespace) is None, TIMEOUT,
                     what="the preempted pod released by Kueue's finalizer and gone")
    victim = [obj for event, obj in seen if obj["metadata"]["name"] == "low" and obj["metadata"]["uid"] == first["metadata"]["uid"]]
    evicted = [cond(obj, "TerminationTarget") for obj in victim if cond(obj, "TerminationTarget")]
    # v0.17.0 says which eviction: WorkloadEvictedDueToPreempted here (a reading of its source had expected WorkloadEvicted).
    assert evicted and evicted[-1]["status"] == "True" and evicted[-1]["reason"] == "WorkloadEvictedDueToPreempted", evicted
    assert evicted[-1]["message"].startswith("Preempted to accommodate a workload")
    last = victim[-1]["status"]
    assert last["phase"] == "Failed" and last["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 143


def test_an_mxjob_kueue_preempts_restarts_whole_uncounted_and_succeeds_once_readmitted(cluster: LocalCluster) -> None:
    """A running low-priority MXJob (backoffLimit 0) preempted by a high-priority pod: Kueue stops its pod
    group (TerminationTarget, then deletion) and, the group marked unretriable, lets its pods go once they
    have stopped; the job restarts whole as attempt 1 in a new pod group, not counted, which Kueue admits
    again once the high pod is done; then it Succeeds and both groups' Workloads are finished."""
    namespace = preempting_queue(cluster)
    release = Path(cluster.state_dir) / f"{namespace}-release"
    low = queued_mxjob("low", namespace, ["sh", "-c", f"trap 'exit 143' TERM; while [ ! -e {release} ]; do sleep 0.2; done"])
    low["spec"]["runPolicy"] = {"backoffLimit": 0}
    low["spec"]["mxReplicaSpecs"]["Worker"]["template"]["metadata"] = {
        "labels": {"kueue.x-k8s.io/priority-class": f"{namespace}-low"}}
    cluster.submit(low)
    cluster.wait_for(lambda: len(cluster.pods("low", namespace)) == 2
                     and all(phase(p) == "Running" for p in cluster.pods("low", namespace)), TIMEOUT,
                     what="the low-priority job's two pods to be admitted and run")
    reasons: list[str] = []
    groups: set[str] = set()

    def seen(event: str, obj: KubeObject) -> None:
        if obj["metadata"].get("namespace") != namespace:
            return
        if obj.get("kind") == "MXJob":
            reasons.append(cond(obj, "Restarting").get("reason", ""))
        elif obj.get("kind") == "Pod" and obj["metadata"]["name"].startswith("low-"):
            groups.add(obj["metadata"]["labels"].get("kueue.x-k8s.io/pod-group-name", ""))

    cluster.store.watch(seen)
    high = pod("high", namespace, ["sleep", "2"])
    high["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] = f"{namespace}-high"
    cluster.store.create(high)
    cluster.wait_for(lambda: phase(cluster.pod("high", namespace)) == "Succeeded", TIMEOUT,
                     what="the high-priority pod to preempt the job, run and succeed")

    def attempt_one_runs() -> bool:
        pods = cluster.pods("low", namespace)
        return len(pods) == 2 and all(phase(p) == "Running" and p["metadata"]["labels"].get(
            "training.kubeflow.org/job-attempt") == "1" for p in pods)

    cluster.wait_for(attempt_one_runs, TIMEOUT, what="the job's attempt 1 to be admitted again and run")
    # Read before the job ends: its outcome clears a Restarting still True (the status one sync behind) in its own words.
    restarting = cluster.wait_for(lambda: (c := cond(cluster.get_job("low", namespace), "Restarting")).get("status") == "False"
                                  and c, TIMEOUT, what="the job to say its attempt 1 runs")
    assert "Kueue evicted it (WorkloadEvictedDueToPreempted" in restarting["message"], restarting
    release.touch()
    job = cluster.wait_finished("low", TIMEOUT, namespace=namespace)
    status = job["status"]
    assert finished(job) == "Succeeded", status
    assert status["attempt"] == 1 and status.get("restartCount", 0) == 0, status  # backoffLimit 0 was not spent
    assert "MXJobEvictedByQueue" in reasons, reasons
    assert len(groups) == 2 and "" not in groups, groups  # a pod group, so a Workload, per attempt
    # Kueue finishes each (the first once its stopped pods were all Failed; a finished group's Workload
    # goes with its pods), so the ClusterQueue holds nothing.
    cluster.wait_for(lambda: all(cond(w, "Finished").get("status") == "True" for w in workloads(cluster, namespace)),
                     TIMEOUT, what="the job's Workloads to finish")
    cluster.wait_for(lambda: released(cluster, namespace), TIMEOUT, what="the ClusterQueue to hold no quota")


def job_workloads(cluster: LocalCluster, namespace: str, job: str) -> list[dict[str, Any]]:
    """The Workloads of every pod group of a job (Kueue names each after its group, `<job>-<uid>-<attempt>`)."""
    return [w for w in workloads(cluster, namespace) if w["metadata"]["name"].startswith(f"{job}-")]


def test_an_mxjobs_priority_class_label_reaches_kueue_and_preempts_a_lower_mxjob(cluster: LocalCluster) -> None:
    """`kueue.x-k8s.io/priority-class` on the MXJob itself (not in its templates): the hook puts it on every pod
    of the group, so Kueue gives the group's Workload that WorkloadPriorityClass. A high-priority job that does
    not fit beside a running low one preempts it; the low one restarts whole, uncounted (backoffLimit 0), is
    admitted again once the high one has Succeeded, and Succeeds; every Workload finishes and the quota goes."""
    namespace = preempting_queue(cluster)
    release = Path(cluster.state_dir) / f"{namespace}-release"
    low = queued_mxjob("low", namespace, ["sh", "-c", f"trap 'exit 143' TERM; while [ ! -e {release} ]; do sleep 0.2; done"])
    low["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] = f"{namespace}-low"
    low["spec"]["runPolicy"] = {"backoffLimit": 0}
    cluster.submit(low)
    cluster.wait_for(lambda: len(cluster.pods("low", namespace)) == 2
                     and all(phase(p) == "Running" for p in cluster.pods("low", namespace)), TIMEOUT,
                     what="the low-priority job's two pods to be admitted and run")
    [first] = job_workloads(cluster, namespace, "low")
    assert first["spec"]["priorityClassRef"] == {"group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass",
                                                 "name": f"{namespace}-low"}
    assert first["spec"]["priority"] == 100
    reasons: list[str] = []
    cluster.store.watch(lambda event, obj: reasons.append(cond(obj, "Restarting").get("reason", ""))
                        if obj.get("kind") == "MXJob" and obj["metadata"].get("namespace") == namespace else None)

    high = queued_mxjob("high", namespace, ["sleep", "2"])
    high["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] = f"{namespace}-high"
    cluster.submit(high)
    done = cluster.wait_finished("high", TIMEOUT, namespace=namespace)
    assert finished(done) == "Succeeded", done.get("status")
    [high_workload] = job_workloads(cluster, namespace, "high")
    assert high_workload["spec"]["priorityClassRef"]["name"] == f"{namespace}-high"
    assert high_workload["spec"]["priority"] == 1000
    assert cond(high_workload, "Admitted").get("status") == "True"

    def attempt_one_runs() -> bool:
        pods = cluster.pods("low", namespace)
        return len(pods) == 2 and all(phase(p) == "Running" and p["metadata"]["labels"].get(
            "training.kubeflow.org/job-attempt") == "1" for p in pods)

    cluster.wait_for(attempt_one_runs, TIMEOUT, what="the low job's attempt 1 to be admitted again and run")
    assert all(p["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] == f"{namespace}-low"
               for p in cluster.pods("low", namespace))
    # What the user sees once it runs again (before it ends, which clears Restarting with the outcome).
    again = cluster.wait_for(lambda: (c := cond(cluster.get_job("low", namespace), "Restarting")).get("status") == "False"
                             and c, TIMEOUT, what="the low job to say its attempt 1 runs")
    assert "the job was restarted after Kueue evicted it (WorkloadEvictedDueToPreempted" in again["message"], again
    release.touch()
    job = cluster.wait_finished("low", TIMEOUT, namespace=namespace)
    status = job["status"]
    assert finished(job) == "Succeeded", status
    assert status["attempt"] == 1 and status.get("restartCount", 0) == 0, status  # backoffLimit 0 was not spent
    assert "MXJobEvictedByQueue" in reasons, reasons
    cluster.wait_for(lambda: all(cond(w, "Finished").get("status") == "True" for w in workloads(cluster, namespace)),
                     TIMEOUT, what="every Workload to finish")
    cluster.wait_for(lambda: released(cluster, namespace), TIMEOUT, what="the ClusterQueue to hold no quota")


def distributed_mxjob(name: str, namespace: str, *, server: list[str], others: list[str] | None = None,
                      cpu: str = "100m") -> KubeObject:
    """A queued MXJob of one Scheduler, one Server and one Worker: the Server runs `server`, the others `others`."""
    job = queued_mxjob(name, namespace, others or ["true"], workers=1, cpu=cpu)
    replicas = job["spec"]["mxReplicaSpecs"]
    for rtype in ("Scheduler", "Server"):
        replicas[rtype] = yamlio.load(yaml.safe_dump(replicas["Worker"]))
    replicas["Server"]["template"]["spec"]["containers"][0]["command"] = server
    return job


def kueue_held(cluster: LocalCluster, namespace: str) -> list[str]:
    """The pods of a namespace that Kueue's finalizer still holds."""
    assert cluster.control_plane is not None
    return [p["metadata"]["name"] for p in cluster.control_plane.get(f"/api/v1/namespaces/{namespace}/pods")["items"]
            if "kueue.x-k8s.io/managed" in (p["metadata"].get("finalizers") or [])]


@pytest.mark.parametrize(("policy", "left"), [("Running", ["clean-scheduler-0", "clean-worker-0"]), ("All", [])],
                         ids=["Running", "All"])
def test_pods_cleanpodpolicy_deletes_at_the_end_let_kueue_finish_the_group_and_release_its_quota(
        cluster: LocalCluster, queue: str, policy: str, left: list[str]) -> None:
    """A ps-lite job whose Server never exits: the Scheduler and Worker Succeed, the job Succeeds after the success
    grace, and cleanPodPolicy deletes the running Server (Running) or every pod (All). The kubelet writes the deleted
    Server Failed, so the group (not retriable in itself) has no active pod: Kueue finishes its Workload, lets every
    pod go (its finalizer) and the ClusterQueue holds nothing. (A group that never counted as finished would hold
    its quota for good.)"""
    job = distributed_mxjob("clean", queue, server=["sh", "-c", "trap 'exit 143' TERM; while true; do sleep 0.2; done"])
    job["spec"]["runPolicy"] = {"cleanPodPolicy": policy}
    cluster.submit(job)
    cluster.wait_for(lambda: (w := group_workload(cluster, queue, "clean")) and cond(w, "Admitted").get("status") == "True",
                     TIMEOUT, what="the job's group to be admitted")
    done = cluster.wait_finished("clean", TIMEOUT, namespace=queue)
    assert finished(done) == "Succeeded", done.get("status")
    # Finished, or already gone with the group's last pod (policy All).
    ended = cluster.wait_for(lambda: [w] if (w := group_workload(cluster, queue, "clean")) is None
                             or cond(w, "Finished").get("status") == "True" else None,
                             TIMEOUT, what="the job's Workload to finish")
    assert ended[0] is None or cond(ended[0], "Finished")["reason"] == "Succeeded", ended
    cluster.wait_for(lambda: released(cluster, queue), TIMEOUT, what="the ClusterQueue to hold no quota")
    cluster.wait_for(lambda: sorted(p["metadata"]["name"] for p in cluster.pods("clean", queue)) == left, TIMEOUT,
                     what=f"cleanPodPolicy {policy} to leave {left or 'no pod'}")
    assert kueue_held(cluster, queue) == []
    assert all(phase(p) == "Succeeded" for p in cluster.pods("clean", queue))


def test_an_mxjob_deleted_while_queued_leaves_no_pod_no_workload_and_no_quota_behind(cluster: LocalCluster, queue: str) -> None:
    """`kubectl delete mxjob` of a job whose pods wait behind Kueue's gate: its gated pods go (the garbage collector,
    then Kueue's finalizer lets them go: they never ran), its Workload goes with them, and the ClusterQueue counts
    only the job that runs; once that one Succeeds, nothing is left."""
    release = Path(cluster.state_dir) / f"{queue}-release"
    cluster.submit(queued_mxjob("first", queue, ["sh", "-c", f"while [ ! -e {release} ]; do sleep 0.2; done"]))
    cluster.wait_for(lambda: (w := group_workload(cluster, queue, "first")) and cond(w, "Admitted").get("status") == "True",
                     TIMEOUT, what="the first job's group to be admitted")
    cluster.submit(queued_mxjob("second", queue, ["true"]))
    cluster.wait_for(lambda: (w := group_workload(cluster, queue, "second")) and cond(w, "QuotaReserved").get("status") == "False",
                     TIMEOUT, what="the second job's group to wait for quota")
    pods = cluster.wait_for(lambda: len(p := cluster.pods("second", queue)) == 2 and all(gated(x) for x in p) and p,
                            TIMEOUT, what="the second job's two pods, gated")
    assert all(phase(p) == "Pending" for p in pods)
    assert cluster.control_plane is not None
    cluster.control_plane.kubectl("delete", "mxjob", "second", "-n", queue)

    gone = [p["metadata"]["name"] for p in pods]
    cluster.wait_for(lambda: all(cluster.pod(name, queue) is None for name in gone), TIMEOUT,
                     what="the deleted job's gated pods to go (Kueue's finalizer let go)")
    cluster.wait_for(lambda: group_workload(cluster, queue, "second") is None, TIMEOUT, what="its Workload to go")
    assert kueue_held(cluster, queue) == [p["metadata"]["name"] for p in cluster.pods("first", queue)]  # first's only
    status = cluster.wait_for(lambda: (s := cluster.control_plane.get(  # type: ignore[union-attr]
        f"{KUEUE_API}/clusterqueues/{queue}")["status"]).get("pendingWorkloads", 0) == 0 and s, TIMEOUT,
        what="the ClusterQueue to forget the deleted job")
    assert status["admittedWorkloads"] == 1, status
    assert cluster.control_plane.kubectl("get", "mxjobs", "-n", queue, "-o", "name").stdout.split() == ["mxjob.kubeflow.org/first"]

    release.touch()
    assert finished(cluster.wait_finished("first", TIMEOUT, namespace=queue)) == "Succeeded"
    cluster.wait_for(lambda: released(cluster, queue), TIMEOUT, what="the ClusterQueue to hold no quota")
    cluster.wait_for(lambda: kueue_held(cluster, queue) == [], TIMEOUT, what="Kueue to let every pod go")


def set_suspend(value: bool) -> Any:
    def mutate(job: KubeObject) -> None:
        job["spec"].setdefault("runPolicy", {})["suspend"] = value
    return mutate


@pytest.mark.parametrize("at_once", [False, True], ids=["resumed-once-released", "resumed-at-once"])
def test_a_suspended_mxjob_gives_its_quota_back_and_is_queued_again_when_resumed(
        cluster: LocalCluster, queue: str, at_once: bool) -> None:
    """`runPolicy.suspend: true` on an admitted, running job: its pods are deleted (the kubelet writes them Failed),
    so Kueue finishes the group's Workload and the ClusterQueue holds nothing while the job says Suspended.
    Resumed (once all that is done, or at once, while its pods may still be going), its new pods form the group of
    the same name again, for which Kueue makes a new Workload once the finished one has gone with the last old pod;
    Kueue admits it and the job Succeeds."""
    release = Path(cluster.state_dir) / f"{queue}-release"
    cluster.submit(queued_mxjob("sus", queue, ["sh", "-c", f"trap 'exit 143' TERM; while [ ! -e {release} ]; do sleep 0.2; done"]))
    first = cluster.wait_for(lambda: len(p := cluster.pods("sus", queue)) == 2 and all(phase(x) == "Running" for x in p) and p,
                             TIMEOUT, what="the job's pods to be admitted and run")
    [before] = job_workloads(cluster, queue, "sus")
    cluster.update_job("sus", set_suspend(True), namespace=queue)
    suspended = cluster.wait_for(lambda: cond(j := cluster.get_job("sus", queue), "Suspended").get("status") == "True" and j,
                                 TIMEOUT, what="the job to say Suspended")
    assert cond(suspended, "Suspended")["message"] == f"MXJob {queue}/sus is suspended."
    assert cond(suspended, "Running").get("status") != "True"
    if not at_once:
        old = [p["metadata"]["name"] for p in first]
        cluster.wait_for(lambda: all(cluster.pod(name, queue) is None for name in old), TIMEOUT,
                         what="the suspended job's pods to go (Kueue's finalizer let go)")
        cluster.wait_for(lambda: released(cluster, queue), TIMEOUT, what="the ClusterQueue to hold no quota")
        assert all(cond(w, "Finished").get("status") == "True" for w in job_workloads(cluster, queue, "sus"))
        assert kueue_held(cluster, queue) == []
        assert cluster.get_job("sus", queue)["status"]["replicaStatuses"]["Worker"].get("active", 0) == 0  # type: ignore[index]

    cluster.update_job("sus", set_suspend(False), namespace=queue)
    cluster.wait_for(lambda: len(p := cluster.pods("sus", queue)) == 2 and all(phase(x) == "Running" for x in p),
                     TIMEOUT, what="the resumed job's new pod group to be admitted and run")
    [after] = job_workloads(cluster, queue, "sus")
    assert after["metadata"]["name"] == before["metadata"]["name"] and after["metadata"]["uid"] != before["metadata"]["uid"]
    assert cond(after, "Admitted").get("status") == "True"
    release.touch()
    job = cluster.wait_finished("sus", TIMEOUT, namespace=queue)
    assert finished(job) == "Succeeded", job.get("status")
    assert cond(job, "Suspended")["status"] == "False"
    cluster.wait_for(lambda: released(cluster, queue), TIMEOUT, what="the ClusterQueue to hold no quota at the end")
    cluster.wait_for(lambda: kueue_held(cluster, queue) == [], TIMEOUT, what="Kueue to let every pod go")


def test_a_failed_worker_of_a_group_restarts_the_job_whole_in_a_group_of_the_pods_left(cluster: LocalCluster,
                                                                                      queue: str) -> None:
    """Worker-only, ExitCode: without Kueue a failed worker is created again alone. In a group Kueue keeps
    the failed pod until the group ends, so the job restarts whole (counted), and a new group of only the
    index that has not succeeded (Kueue admits a group once its pod-group-total-count pods exist)."""
    job = queued_mxjob("lone", queue, ["sh", "-c", 'if [ "$DMLC_WORKER_ID" = 0 ] || [ "$MXJOB_ATTEMPT" = 1 ]; '
                                                   'then sleep 1; exit 0; fi; sleep 3; exit 137'])
    worker = job["spec"]["mxReplicaSpecs"]["Worker"]
    worker["restartPolicy"] = "ExitCode"
    job["spec"]["runPolicy"] = {"backoffLimit": 2}
    cluster.submit(job)
    ended = cluster.wait_finished("lone", TIMEOUT * 2, namespace=queue)
    assert finished(ended) == "Succeeded", ended.get("status")
    assert ended["status"]["attempt"] == 1 and ended["status"]["restartCount"] == 1, ended["status"]
    groups = {w["metadata"]["name"].rsplit("-", 1)[-1]: w for w in job_workloads(cluster, queue, "lone")}
    assert {attempt: sum(p["count"] for p in w["spec"]["podSets"]) for attempt, w in groups.items()} == {"0": 2, "1": 1}
    cluster.wait_for(lambda: all(cond(w, "Finished").get("status") == "True"
                                 for w in job_workloads(cluster, queue, "lone")), TIMEOUT, what="both groups to finish")
    cluster.wait_for(lambda: released(cluster, queue), TIMEOUT, what="the ClusterQueue to hold nothing")


REPO = Path(__file__).resolve().parents[2]
DIGITS = REPO / "examples" / "local" / "dist-train-digits.yaml"


def queued_digits(name: str, namespace: str, *, cpu: str) -> KubeObject:
    """The real MXNet digits example (scheduler, server, two workers), each pod asking for `cpu`, labelled for
    LocalQueue `q`, trained for 3 epochs to keep the test short."""
    job = yamlio.load(DIGITS.read_text())
    job["metadata"] = {"name": name, "namespace": namespace, "labels": {QUEUE_LABEL: "q"}}
    job["spec"]["runPolicy"]["activeDeadlineSeconds"] = 600  # the second job's wait for quota counts too
    for spec in job["spec"]["mxReplicaSpecs"].values():
        container = spec["template"]["spec"]["containers"][0]
        container["resources"] = {"requests": {"cpu": cpu}}
        if "args" in container:
            container["args"] = ["--kv-store", "dist_sync", "--epochs", "3", "--min-accuracy", "0.85"]
    return job


@pytest.mark.mxnet
def test_two_real_mxnet_jobs_that_do_not_fit_together_train_one_after_the_other(cluster: LocalCluster, queue: str) -> None:
    """Real ps-lite training under the real Kueue: four pods of 200m make 800m a job against 1 CPU, so the
    second job is held whole behind its gates while the first trains, and its rendezvous happens only once
    Kueue admits it, after the first job's pods have all ended."""
    cluster.submit(queued_digits("digits-a", queue, cpu="200m"))
    cluster.wait_for(lambda: len(cluster.pods("digits-a", queue)) == 4
                     and all(phase(p) == "Running" for p in cluster.pods("digits-a", queue)), 120,
                     what="the first job's four pods to be admitted together and run")
    cluster.submit(queued_digits("digits-b", queue, cpu="200m"))
    cluster.wait_for(lambda: (w := group_workload(cluster, queue, "digits-b"))
                     and cond(w, "QuotaReserved").get("status") == "False", TIMEOUT,
                     what="the second job's group to wait for quota")
    held = cluster.pods("digits-b", queue)
    assert len(held) == 4 and all(gated(p) and phase(p) == "Pending" for p in held)

    first = cluster.wait_finished("digits-a", 300, namespace=queue)
    second = cluster.wait_finished("digits-b", 300, namespace=queue)
    assert finished(first) == "Succeeded", first.get("status")
    assert finished(second) == "Succeeded", second.get("status")
    a_pods, b_pods = cluster.pods("digits-a", queue), cluster.pods("digits-b", queue)
    first_ended = max(c["state"]["terminated"]["finishedAt"] for p in a_pods for c in p["status"]["containerStatuses"])
    assert all(p["status"]["startTime"] >= first_ended for p in b_pods), (first_ended, [p["status"] for p in b_pods])
    for pod in b_pods:
        if pod["metadata"]["name"].startswith("digits-b-worker-"):
            log = cluster.log_path(pod["metadata"]["name"], namespace=queue).read_text()
            assert "joined kvstore dist_sync with 2 worker(s)" in log and "final validation-accuracy=" in log, log[-2000:]
