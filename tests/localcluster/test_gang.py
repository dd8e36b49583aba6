"""End to end on the local cluster: a gang is held back until its pods exist, then starts together.

The controller is the one the kustomization in docs/gang-scheduling.md with a gang component renders, so the local
Metacontroller, the real hooks server and the kubelet's gang gate run exactly what a user installs.
A pod that cannot be created yet (here: refused by the API server itself, by an admission policy standing
in for a quota) is what leaves a gang incomplete.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from helpers.localcluster_gang import PodRefusal, gang_controller, scheduled

from localcluster.cluster import LocalCluster, condition, finished
from localcluster.controlplane.processes import ControlPlane

pytestmark = [pytest.mark.e2e, pytest.mark.apiserver]

REPLICAS = 3
# Each worker prints when its process started, then works for a moment.
WORKER = ("import json,os,time; print('STARTED', json.dumps(time.time()), flush=True); "
          "time.sleep(1.5)")


def gang_job(name: str, policy: dict, replicas: int = REPLICAS, cpu: str | None = None) -> dict:
    container = {"name": "mxnet", "image": "busybox:1.36", "command": ["python", "-c", WORKER]}
    if cpu:
        container["resources"] = {"requests": {"cpu": cpu}}
    return {
        "apiVersion": "kubeflow.org/v1", "kind": "MXJob", "metadata": {"name": name},
        "spec": {"runPolicy": {"schedulingPolicy": policy}, "mxReplicaSpecs": {"Worker": {
            "replicas": replicas, "restartPolicy": "Never",
            "template": {"spec": {"terminationGracePeriodSeconds": 1, "containers": [container]}}}}},
    }


@contextmanager
def gang_cluster(tmp_path: Path, component: str, cluster_plane: ControlPlane, **size: str) -> Iterator[LocalCluster]:
    config = gang_controller(tmp_path, component)
    with LocalCluster(tmp_path / "state", control_plane=cluster_plane, configs=[config], **size) as cluster:
        yield cluster


def start_times(cluster: LocalCluster, job: str) -> dict[str, float]:
    times = {}
    for pod in cluster.pods(job):
        log = cluster.log_path(pod["metadata"]["name"])
        found = re.search(r"^STARTED (\S+)$", log.read_text(), re.M) if log.exists() else None
        if found:
            times[pod["metadata"]["name"]] = json.loads(found.group(1))
    return times


def test_gang_is_held_back_until_every_pod_exists_then_starts_together(tmp_path, cluster_plane):
    with gang_cluster(tmp_path, "volcano", cluster_plane) as cluster, PodRefusal(cluster, "gang-worker-2") as refusal:
        cluster.submit(gang_job("gang", {}))

        def held() -> list[dict] | None:
            # Metacontroller creates the PodGroup after the pods: they first wait for it, then for the gang.
            # Each pod's gate is polled on its own, so the first pod may still report the count it saw
            # before the second existed: wait until both report the two.
            pods = cluster.pods("gang")
            ok = len(pods) == 2 and all(scheduled(p).get("reason") == "Unschedulable"
                                        and "2 of its minMember" in scheduled(p).get("message", "") for p in pods)
            return pods if ok else None

        pods = cluster.wait_for(held, 30, what="two pods held back by the gang")
        assert cluster.store.get("scheduling.volcano.sh/v1beta1", "PodGroup", "default", "gang")
        for pod in pods:
            assert pod["status"]["phase"] == "Pending" and not pod["spec"].get("nodeName")
            assert scheduled(pod)["message"] == ("pod group gang: 2 of its minMember 3 pods exist; "
                                                 "the gang starts when 3 do")
            assert pod["spec"]["schedulerName"] == "volcano"
        # Held, not just slow: a while later still nothing has started.
        time.sleep(1.0)
        assert all(p["status"]["phase"] == "Pending" for p in cluster.pods("gang"))
        assert start_times(cluster, "gang") == {}

        refusal.lift()
        job = cluster.wait_finished("gang", 60)
        times = start_times(cluster, "gang")

    assert finished(job) == "Succeeded"
    assert sorted(times) == [f"gang-worker-{i}" for i in range(REPLICAS)]
    assert max(times.values()) - min(times.values()) < 1.0, times


def test_min_available_below_the_replica_count_starts_when_that_many_exist(tmp_path, cluster_plane):
    with gang_cluster(tmp_path, "scheduler-plugins", cluster_plane) as cluster, PodRefusal(cluster, "part-worker-2") as refusal:
        cluster.submit(gang_job("part", {"minAvailable": 2}))

        def two_running() -> bool:
            pods = cluster.pods("part")
            return len(pods) == 2 and all(p["status"].get("phase") in ("Running", "Succeeded") for p in pods)

        cluster.wait_for(two_running, 30, what="two of three workers running")
        group = cluster.store.get("scheduling.x-k8s.io/v1alpha1", "PodGroup", "default", "part")
        assert group is not None and group["spec"]["minMember"] == 2
        assert cluster.pod("part-worker-2") is None
        assert all(p["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"] == "part"
                   and p["spec"]["schedulerName"] == "scheduler-plugins-scheduler"
                   for p in cluster.pods("part"))

        refusal.lift()
        job = cluster.wait_finished("part", 60)
        remaining = cluster.store.get("scheduling.x-k8s.io/v1alpha1", "PodGroup", "default", "part")

    assert finished(job) == "Succeeded"
    assert remaining is None  # the finished job's PodGroup is gone


WHY = ("pod group big: the gang does not fit: 0/1 nodes are unavailable: 1 Insufficient cpu. Its 2 unbound pods "
       "ask for cpu 3 together, node localcluster has cpu 2 free; none is bound until 2 of them fit")
QUOTED = ("MXJob default/big is created; it waits for the scheduler: pods big-worker-0, big-worker-1 are not "
          "scheduled: pod group big: the gang does not fit: 0/1 nodes are unavailable: 1 Insufficient cpu.")


def test_a_gang_that_does_not_fit_gets_none_of_its_pods_bound_and_the_job_says_why(tmp_path, cluster_plane):
    with gang_cluster(tmp_path, "volcano", cluster_plane, cpus="2", memory="4Gi") as cluster:
        # Two workers of 1.5 CPUs on a 2-CPU Node: either fits alone, both never do.
        cluster.submit(gang_job("big", {}, replicas=2, cpu="1500m"))

        def held() -> list[dict] | None:
            pods = cluster.pods("big")
            ok = len(pods) == 2 and all("the gang does not fit" in scheduled(p).get("message", "") for p in pods)
            return pods if ok else None

        cluster.wait_for(held, 60, what="both workers held back by the gang stand-in as not fitting")
        # A gang that fits beside it runs (the held one takes no room), and is done.
        cluster.submit(gang_job("small", {}, replicas=2, cpu="400m"))
        small = cluster.wait_finished("small", 90)

        def says_it_waits() -> str | None:
            message = (condition(cluster.get_job("big"), "Created") or {}).get("message", "")
            return message if message.startswith(QUOTED) else None

        # While the small job ran the message counted what it held, so the words settle once it is done.
        def settled() -> list[dict] | None:
            pods = cluster.pods("big")
            return pods if [scheduled(p).get("message") for p in pods] == [WHY] * 2 else None

        cluster.wait_for(settled, 30, what="both workers to say the gang does not fit the free Node")
        cluster.wait_for(says_it_waits, 30, what="the job's Created condition to quote the scheduler")
        # Held, not slow: long after, and with the whole Node free again, neither is bound.
        pods = cluster.pods("big")
        job = cluster.get_job("big")

    assert finished(small) == "Succeeded", small["status"]
    assert [(p["spec"].get("nodeName"), p["status"]["phase"]) for p in pods] == [(None, "Pending")] * 2
    assert [(scheduled(p)["reason"], scheduled(p)["message"]) for p in pods] == [("Unschedulable", WHY)] * 2
    assert job is not None and job["status"]["waiting"] == "Scheduler: Unschedulable"
