"""Real scheduling on the local cluster: kube-scheduler places the pods on the process kubelet's Node.

On the real control plane, against a Node of 2 CPUs and 4 GiB (whatever this machine has): a pod
that does not fit stays Pending with the scheduler's own message, and the job says it waits and why
until activeDeadlineSeconds ends it, naming the pod; a scheduling gate holds a pod unbound until it
is removed; a high-priority MXJob preempts a running low-priority MXJob's pod (DisruptionTarget from
the scheduler), whose job restarts whole, naming the preemption, and succeeds once there is room again.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from localcluster.cluster import LocalCluster, condition, finished
from localcluster.controlplane.processes import ControlPlane
from localcluster.node.registration import NODE_NAME

pytestmark = [pytest.mark.e2e, pytest.mark.apiserver]

SLEEP = ["sh", "-c", "trap exit TERM; while true; do sleep 1 & wait; done"]


def mxjob(name: str, *, cpu: str, command: list[str] = SLEEP, priority_class: str | None = None,
          run_policy: dict[str, Any] | None = None) -> dict[str, Any]:
    """A worker-only MXJob of one worker asking for `cpu`."""
    pod_spec: dict[str, Any] = {"terminationGracePeriodSeconds": 1, "containers": [
        {"name": "mxnet", "image": "busybox:1.36", "command": command, "resources": {"requests": {"cpu": cpu}}}]}
    if priority_class:
        pod_spec["priorityClassName"] = priority_class
    return {"apiVersion": "kubeflow.org/v1", "kind": "MXJob", "metadata": {"name": name},
            "spec": {"jobMode": "MXTrain", "runPolicy": run_policy or {},
                     "mxReplicaSpecs": {"Worker": {"replicas": 1, "restartPolicy": "Never", "template": {"spec": pod_spec}}}}}


def pod_condition(pod: dict[str, Any] | None, kind: str) -> dict[str, Any]:
    return next((c for c in (pod or {}).get("status", {}).get("conditions", []) if c["type"] == kind), {})


@pytest.fixture
def cluster(tmp_path: Path, cluster_plane: ControlPlane) -> Iterator[LocalCluster]:
    with LocalCluster(tmp_path / "state", control_plane=cluster_plane, cpus="2", memory="4Gi") as c:
        yield c


def test_a_worker_asking_for_more_cpu_than_the_node_has_waits_with_the_schedulers_reason_until_the_deadline(
        cluster: LocalCluster):
    cluster.submit(mxjob("big", cpu="3", run_policy={"activeDeadlineSeconds": 15}))

    def held() -> dict[str, Any]:
        scheduled = pod_condition(cluster.pod("big-worker-0"), "PodScheduled")
        return scheduled if scheduled.get("status") == "False" else {}

    scheduled = cluster.wait_for(held, 30, what="the scheduler's verdict on big-worker-0")
    assert scheduled["reason"] == "Unschedulable"
    assert scheduled["message"].startswith("0/1 nodes are available: 1 Insufficient cpu.")
    assert not cluster.pod("big-worker-0")["spec"].get("nodeName")  # type: ignore[index]
    why = f"pod big-worker-0 is not scheduled: {scheduled['message'].rstrip('.')}"
    waiting = cluster.wait_for(lambda: (condition(cluster.get_job("big"), "Created") or {}).get("message", "").endswith(
        f"{why}."), 15, what="the job to say it waits")
    assert waiting
    assert condition(cluster.get_job("big"), "Created")["message"] == (  # type: ignore[index]
        f"MXJob default/big is created; it waits for the scheduler: {why}.")
    assert cluster.control_plane is not None
    described = cluster.control_plane.kubectl("describe", "mxjob", "big").stdout
    assert "it waits for the scheduler: pod big-worker-0 is not scheduled: 0/1 nodes are available: 1 Insufficient" in \
        " ".join(described.split())  # describe wraps long values

    ended = cluster.wait_finished("big", 40)
    assert finished(ended) == "Failed"
    assert condition(ended, "Failed")["message"] == (  # type: ignore[index]
        f"MXJob default/big was active longer than activeDeadlineSeconds (15 s) and is stopped; no pod was lost; {why}.")


def test_a_gated_pod_is_not_bound_until_its_last_gate_is_removed(cluster: LocalCluster):
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "gated", "namespace": "default"},
           "spec": {"schedulingGates": [{"name": "example.com/queue"}, {"name": "example.com/quota"}],
                    "terminationGracePeriodSeconds": 1,
                    "containers": [{"name": "c", "image": "busybox:1.36", "command": SLEEP}]}}
    cluster.store.create(pod)
    for gates in ([{"name": "example.com/quota"}], []):
        gated = cluster.wait_for(lambda: pod_condition(cluster.pod("gated"), "PodScheduled").get("reason") == "SchedulingGated",
                                 15, what="the scheduler to see the gate")
        assert gated
        time.sleep(2)  # the scheduler had every chance to bind it
        current = cluster.pod("gated")
        assert current is not None and not current["spec"].get("nodeName")
        assert current["status"]["phase"] == "Pending"
        current["spec"]["schedulingGates"] = gates
        cluster.store.update(current)
    running = cluster.wait_for(lambda: (cluster.pod("gated") or {}).get("status", {}).get("phase") == "Running", 30,
                               what="the pod Running once ungated")
    assert running and cluster.pod("gated")["spec"]["nodeName"] == NODE_NAME  # type: ignore[index]
    assert pod_condition(cluster.pod("gated"), "PodScheduled")["status"] == "True"
    cluster.store.delete("v1", "Pod", "default", "gated")


def priority_class(name: str, value: int) -> dict[str, Any]:
    return {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name}, "value": value,
            "description": "tests/localcluster/test_scheduling.py"}


LOOP_UNTIL_STOPPED = "trap 'exit 143' TERM; while true; do sleep 1 & wait; done"
# The victim takes 2 s to stop, as a process that saves a checkpoint on SIGTERM does: the hook must
# see it while it goes (one gone before any sync saw it is recreated as a pod deleted by someone
# else; docs/lifecycle.md, "Disruptions").
STOPS_IN_2_S = "trap 'sleep 2; exit 143' TERM; while true; do sleep 1 & wait; done"
PREEMPTED = "PreemptionByScheduler"
URGENT = "urgent"
PREEMPTED_SAYS = "default-scheduler: preempting to accommodate a higher priority pod"


def submit_urgent_job(cluster: LocalCluster, seconds: int) -> None:
    """A high-priority MXJob whose one worker asks for the 1.5 CPUs a running low-priority pod holds."""
    cluster.submit(mxjob(URGENT, cpu="1500m", priority_class="test-high", command=["sh", "-c", f"sleep {seconds}"]))


def distributed_low_priority_job(done: Path) -> dict[str, Any]:
    """A distributed MXJob (a Scheduler, a Server and a Worker of 1.5 CPUs, restartPolicy Never): its
    first attempt runs until stopped; in the next, the worker leaves `done` and the scheduler (which
    decides the job) and the server succeed once it is there."""
    job = mxjob("low", cpu="1500m", priority_class="test-low", command=[
        "sh", "-c", f'[ "$MXJOB_ATTEMPT" = 1 ] && touch {done} && exit 0; {STOPS_IN_2_S}'])
    job["spec"]["mxReplicaSpecs"]["Worker"]["template"]["spec"]["terminationGracePeriodSeconds"] = 10
    scheduler = json.loads(json.dumps(job["spec"]["mxReplicaSpecs"]["Worker"]))
    container = scheduler["template"]["spec"]["containers"][0]
    scheduler["template"]["spec"]["terminationGracePeriodSeconds"] = 1
    container["resources"]["requests"]["cpu"] = "100m"
    container["command"] = ["sh", "-c", f'if [ "$MXJOB_ATTEMPT" = 1 ]; then while [ ! -e {done} ]; do sleep 0.2; done; '
                                        f"exit 0; fi; {LOOP_UNTIL_STOPPED}"]
    job["spec"]["mxReplicaSpecs"] = {"Scheduler": scheduler, "Server": scheduler, **job["spec"]["mxReplicaSpecs"]}
    return job


def test_a_high_priority_job_preempts_a_low_priority_job_which_restarts_whole_and_succeeds(
        cluster: LocalCluster, tmp_path: Path):
    """kube-scheduler preempts the running worker (DisruptionTarget, then its deletion); the kubelet
    writes it Failed before it is gone; the job restarts as attempt 1 naming the victim and the
    preemption (a silently replaced worker would leave ps-lite hung), waits for room, and succeeds."""
    assert cluster.control_plane is not None
    cluster.control_plane.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": [
        priority_class("test-low", 100), priority_class("test-high", 1000)]}))
    seen: list[tuple[str, str, str, dict[str, Any], dict[str, Any]]] = []  # (event, pod, uid, DisruptionTarget, status)
    cluster.store.watch(lambda event, obj: seen.append((event, obj["metadata"]["name"], obj["metadata"]["uid"],
                                                        pod_condition(obj, "DisruptionTarget"), obj.get("status", {})))
                        if obj.get("kind") == "Pod" else None)
    cluster.submit(distributed_low_priority_job(tmp_path / "done"))
    first = cluster.wait_for(lambda: (p := cluster.pod("low-worker-0")) and p.get("status", {}).get("phase") == "Running" and p,
                             60, what="the low-priority worker running")
    submit_urgent_job(cluster, 6)

    messages: set[str] = set()

    def done() -> dict[str, Any] | None:
        job = cluster.get_job("low")
        messages.update(c.get("message", "") for c in (job or {}).get("status", {}).get("conditions", []))
        return job if finished(job) else None

    ended = cluster.wait_for(done, 90, what="the low-priority job to finish")
    assert finished(ended) == "Succeeded", ended["status"]
    victim = [(event, c, status) for event, name, uid, c, status in seen
              if name == "low-worker-0" and uid == first["metadata"]["uid"]]
    disrupted = [c for _, c, _ in victim if c]
    assert disrupted and disrupted[-1]["status"] == "True" and disrupted[-1]["reason"] == PREEMPTED
    assert disrupted[-1]["message"] == PREEMPTED_SAYS
    # The kubelet stopped it and wrote a terminal phase before it was gone, as a kubelet does.
    last_status = victim[-1][2]
    assert victim[-1][0] == "DELETED" and last_status["phase"] == "Failed", last_status
    assert last_status["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 143
    restarting = (f"MXJob default/low is restarting as attempt 1: pod low-worker-0 was lost (no exit code, reason "
                  f"{PREEMPTED}: '{PREEMPTED_SAYS}'); every pod that has not succeeded is deleted and created again "
                  "with MXJOB_ATTEMPT=1 (restarts so far: 1).")
    assert restarting in messages, messages
    # While the high-priority job held the CPU, the job said which pod waited and why.
    assert any("it waits for the scheduler: pod low-worker-0 is not scheduled: 0/1 nodes are available: 1 Insufficient cpu"
               in m for m in messages), messages
    assert ended["status"]["restartCount"] == 1 and ended["status"]["attempt"] == 1
    assert finished(cluster.wait_finished(URGENT, timeout=30)) == "Succeeded"


def test_the_kubelet_registers_its_node_with_the_size_asked_for_and_keeps_it_untainted(cluster: LocalCluster):
    assert cluster.control_plane is not None
    cp = cluster.control_plane

    def untainted() -> dict[str, Any] | None:
        node = cp.get(f"/api/v1/nodes/{NODE_NAME}")
        return node if not node["spec"].get("taints") else None

    node = cluster.wait_for(untainted, 20, what="the node lifecycle controller to take the not-ready taint off")
    assert {k: node["status"]["allocatable"][k] for k in ("cpu", "memory")} == {"cpu": "2", "memory": "4Gi"}
    assert next(c for c in node["status"]["conditions"] if c["type"] == "Ready")["status"] == "True"
    lease = f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{NODE_NAME}"
    renewed = cp.get(lease)["spec"]["renewTime"]
    cluster.wait_for(lambda: cp.get(lease)["spec"]["renewTime"] != renewed, 15, what="the Lease renewed")


def chainerjob(name: str, *, worker_cpu: str) -> dict[str, Any]:
    """A ChainerJob of one worker asking for `worker_cpu`; its master is never started while the worker is not ready."""
    def template(cpu: str | None) -> dict[str, Any]:
        container: dict[str, Any] = {"name": "chainer", "image": "busybox:1.36", "command": SLEEP}
        if cpu:
            container["resources"] = {"requests": {"cpu": cpu}}
        return {"spec": {"terminationGracePeriodSeconds": 1, "containers": [container]}}
    return {"apiVersion": "kubeflow.org/v1alpha1", "kind": "ChainerJob", "metadata": {"name": name},
            "spec": {"master": {"template": template(None)},
                     "workerSets": {"ws": {"replicas": 1, "template": template(worker_cpu)}}}}


def test_a_chainerjob_worker_asking_for_more_cpu_than_the_node_has_is_said_with_the_schedulers_reason(
        cluster: LocalCluster):
    cluster.submit(chainerjob("bigc", worker_cpu="3"))
    worker = "bigc-workerset-ws-0"

    def held() -> dict[str, Any]:
        scheduled = pod_condition(cluster.pod(worker), "PodScheduled")
        return scheduled if scheduled.get("status") == "False" else {}

    scheduled = cluster.wait_for(held, 30, what=f"the scheduler's verdict on {worker}")
    assert scheduled["reason"] == "Unschedulable"
    why = f"it waits for the scheduler: pod {worker} is not scheduled: {scheduled['message'].rstrip('.')}."
    assert scheduled["message"].startswith("0/1 nodes are available: 1 Insufficient cpu.")
    waiting = cluster.wait_for(lambda: (m := (condition(cluster.get_job("bigc"), "Waiting") or {}).get("message", ""))
                               .endswith(why) and m, 15, what="the ChainerJob to say it waits, and why")
    assert waiting == ("ChainerJob default/bigc is waiting for its workers: 0 of 1 ready (ws 0/1); the master starts "
                       f"when all are ready; {why}")
    assert cluster.control_plane is not None
    described = " ".join(cluster.control_plane.kubectl("describe", "chainerjob", "bigc").stdout.split())
    assert f"pod {worker} is not scheduled: 0/1 nodes are available: 1 Insufficient cpu" in described
    assert not [p for p in cluster.pods("bigc") if "master" in p["metadata"]["name"]]


def low_priority_chainerjob(done: Path, *, big: str) -> dict[str, Any]:
    """A ChainerJob of a master and one worker, both of PriorityClass test-low; the `big` one ("worker" or
    "master") asks for 1.5 CPUs, the other for 0.1. In its first attempt both run until stopped (taking
    2 s, STOPS_IN_2_S), as an mpiexec whose rank was silently replaced would hang; in the next, the worker
    leaves `done` and the master succeeds once it is there. So the job ends Complete only through a
    whole-job restart."""
    job = chainerjob("low", worker_cpu="1500m" if big == "worker" else "100m")
    worker = job["spec"]["workerSets"]["ws"]["template"]["spec"]
    worker.update(priorityClassName="test-low", terminationGracePeriodSeconds=10)
    worker["containers"][0]["command"] = [
        "sh", "-c", f'[ "$MXJOB_ATTEMPT" = 1 ] && touch {done}; {STOPS_IN_2_S}']
    master = job["spec"]["master"]["template"]["spec"]
    master.update(priorityClassName="test-low", terminationGracePeriodSeconds=10)
    master["containers"][0].update(resources={"requests": {"cpu": "1500m" if big == "master" else "100m"}}, command=[
        "sh", "-c", f'if [ "$MXJOB_ATTEMPT" = 1 ]; then while [ ! -e {done} ]; do sleep 0.2; done; exit 0; fi; '
                    f"{STOPS_IN_2_S}"])
    return job


@pytest.mark.parametrize("victim", ["worker", "master"])
def test_a_high_priority_job_preempts_a_chainerjob_pod_and_the_job_restarts_whole_and_completes(
        cluster: LocalCluster, tmp_path: Path, victim: str):
    """kube-scheduler preempts the running pod whose loss frees the room (the one of 1.5 CPUs). A worker
    would be recreated by its StatefulSet under the same name, which the master's mpiexec never admits; a
    master would be retried alone by its Job. Instead the job restarts as attempt 1 naming the victim and
    the preemption, waits for room, and completes (docs/chainerjob.md, "Disruptions")."""
    assert cluster.control_plane is not None
    cluster.control_plane.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": [
        priority_class("test-low", 100), priority_class("test-high", 1000)]}))
    seen: list[tuple[str, str, str, dict[str, Any]]] = []  # (event, pod, uid, DisruptionTarget)
    cluster.store.watch(lambda event, obj: seen.append((event, obj["metadata"]["name"], obj["metadata"]["uid"],
                                                        pod_condition(obj, "DisruptionTarget")))
                        if obj.get("kind") == "Pod" else None)
    cluster.submit(low_priority_chainerjob(tmp_path / "done", big=victim))

    def master_running() -> dict[str, Any] | None:
        return next((p for p in cluster.pods("low") if p["metadata"]["name"].startswith("low-master-")
                     and p.get("status", {}).get("phase") == "Running"), None)

    master = cluster.wait_for(master_running, 60, what="the low-priority master running")
    first = master if victim == "master" else cluster.pod("low-workerset-ws-0")
    assert first is not None and first["status"]["phase"] == "Running"
    name = first["metadata"]["name"]
    submit_urgent_job(cluster, 10)

    messages: set[str] = set()

    def done() -> dict[str, Any] | None:
        job = cluster.get_job("low")
        messages.update(c.get("message", "") for c in (job or {}).get("status", {}).get("conditions", []))
        return job if finished(job) else None

    ended = cluster.wait_for(done, 90, what="the low-priority ChainerJob to finish")
    assert finished(ended) == "Succeeded", ended["status"]
    disrupted = [c for _, pod, uid, c in seen if c and c["status"] == "True" and c["reason"] == PREEMPTED]
    assert {pod for _, pod, uid, c in seen if c} == {name}, "the scheduler preempted that one pod"
    assert disrupted and disrupted[-1]["message"] == PREEMPTED_SAYS
    lost = f"pod {name} was lost (no exit code, reason {PREEMPTED}: '{PREEMPTED_SAYS}')"
    restarting = (f"ChainerJob default/low is restarting as attempt 1: {lost}; its master Job and worker StatefulSets "
                  "are deleted and created again with MXJOB_ATTEMPT=1 (restarts so far: 1 of runPolicy.maxRestarts 3).")
    assert restarting in messages, messages
    # While the high-priority job held the CPU, the job said which pod waited and why: the worker (in
    # Waiting), or the new master (in Restarting, its workers ready).
    waiting = "low-workerset-ws-0" if victim == "worker" else "low-master-"
    assert any(f"it waits for the scheduler: pod {waiting}" in m and "is not scheduled: 0/1 nodes are available: "
               "1 Insufficient cpu" in m for m in messages), messages
    assert ended["status"]["attempt"] == 1
    restarted = condition(ended, "Restarting")
    assert restarted is not None and restarted["status"] == "False"
    assert restarted["message"] == f"ChainerJob default/low: attempt 1 runs (the job was restarted after {lost})."
    assert finished(cluster.wait_finished(URGENT, timeout=30)) == "Succeeded"
