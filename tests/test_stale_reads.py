"""The hooks under Metacontroller's stale reads (DESIGN 2.1): properties over random lifecycles, and the
three failures a stale parent caused before the memory moved into children, as regression tests.

Real Metacontroller reads the parent and the children from separate informer caches, writes the
children first (deletes, then creates) and the status after, over a fresh read. The next sync,
queued by those child events, often sees the status of one write earlier with the children of
now. `World` below is a small self-contained stand-in for just that, over the pure sync
functions: each sync sees, with some probability, the previous status instead of the latest.
(The project-wide emulation in localcluster/ gets its own stale-read mode; this one is kept
small so the properties run in milliseconds.)
"""
from __future__ import annotations

import copy
import itertools
import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hooks.chainerjob.sync import sync_chainerjob
from hooks.mxjob.sync import sync_mxjob
from hooks.shared.k8s import LAST_APPLIED

T0 = datetime(2026, 11, 21, 10, 0, 0, tzinfo=UTC)
TERMINAL = {"Succeeded", "Failed", "Complete"}


def rfc3339(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def terminal(status: dict | None) -> str | None:
    """The True terminal condition of a status, if any."""
    for cond in (status or {}).get("conditions") or []:
        if cond.get("type") in TERMINAL and cond.get("status") == "True":
            return cond["type"]
    return None


class World:
    """One parent and its children, synced with stale parent reads when asked."""

    def __init__(self, parent: dict, sync: Callable[..., dict], child_keys: dict[str, str]):
        self.parent = copy.deepcopy(parent)
        self.sync_fn = sync
        self.child_keys = child_keys  # kind -> request key ("Pod" -> "Pod.v1")
        self.children: dict[tuple[str, str], dict] = {}
        self.written: list[dict] = []  # every status written, in order
        self.now = T0
        self.created: list[tuple[str, str]] = []
        self.deleted: list[tuple[str, str]] = []
        self._uids = itertools.count(1)

    # --- Metacontroller --------------------------------------------------------------------

    def request(self, *, stale: bool) -> dict:
        parent = copy.deepcopy(self.parent)
        if stale and len(self.written) >= 2:
            parent["status"] = copy.deepcopy(self.written[-2])
        children: dict[str, dict] = {key: {} for key in self.child_keys.values()}
        for (kind, name), obj in self.children.items():
            children[self.child_keys[kind]][name] = copy.deepcopy(obj)
        return {"controller": {}, "parent": parent, "children": children, "related": {}, "finalizing": False}

    def sync(self, *, stale: bool = False) -> dict:
        """One sync: children written first (deletes, then creates; InPlace specs replaced), then status."""
        answer = self.sync_fn(self.request(stale=stale), now=self.now)
        desired = {(c["kind"], c["metadata"]["name"]): c for c in answer["children"]}
        for key in [k for k in self.children if k not in desired]:
            del self.children[key]
            self.deleted.append(key)
        for key, child in desired.items():
            if key in self.children:
                if key[0] in ("Service", "StatefulSet", "Role", "RoleBinding") and "spec" in child:
                    self.children[key]["spec"] = copy.deepcopy(child["spec"])
                continue
            obj = copy.deepcopy(child)
            obj["metadata"]["uid"] = f"u{next(self._uids)}"
            obj["metadata"].setdefault("annotations", {})[LAST_APPLIED] = json.dumps(child)
            if key[0] == "Pod":
                obj["status"] = {"phase": "Pending"}
            self.children[key] = obj
            self.created.append(key)
        self.parent["status"] = copy.deepcopy(answer["status"])
        self.written.append(copy.deepcopy(answer["status"]))
        return answer

    # --- kubelet ---------------------------------------------------------------------------

    def pods(self) -> dict[str, dict]:
        return {name: obj for (kind, name), obj in self.children.items() if kind == "Pod"}

    def set_pod(self, name: str, phase: str, code: int | None = None, restarts: int = 0) -> None:
        state: dict[str, Any] = {"running": {}} if phase == "Running" else {}
        if code is not None:
            state = {"terminated": {"exitCode": code, "finishedAt": rfc3339(self.now)}}
        self.children[("Pod", name)]["status"] = {
            "phase": phase, "containerStatuses": [{"name": "mxnet", "restartCount": restarts, "state": state}]}


MX_KEYS = {"Pod": "Pod.v1", "Service": "Service.v1", "ConfigMap": "ConfigMap.v1"}


def mxjob(replicas: dict, **run_policy: Any) -> dict:
    specs = {}
    for rtype, value in replicas.items():
        entry = value if isinstance(value, dict) else {"replicas": value}
        entry.setdefault("template", {"spec": {"containers": [
            {"name": "mxnet", "image": "mxjob/mxnet:1.9.1", "command": ["python", "train.py"]}]}})
        specs[rtype] = entry
    return {"apiVersion": "kubeflow.org/v1", "kind": "MXJob",
            "metadata": {"name": "mx", "namespace": "ns", "uid": "uid-mx", "generation": 1},
            "spec": {"runPolicy": run_policy, "mxReplicaSpecs": specs}}


def mx_world(parent: dict) -> World:
    return World(parent, sync_mxjob, MX_KEYS)


def pods_created_after(world: World, index: int) -> list[str]:
    return [name for kind, name in world.created[index:] if kind == "Pod"]


# --- the three failures, as regression tests ----------------------------------------------------


def test_a_job_declared_succeeded_is_not_run_again_when_the_next_sync_reads_the_old_status():
    """Before: with cleanPodPolicy All, the Succeeded answer deleted every pod; the next sync read
    the Running status with no pods, created them all again (training reran) and wrote Running
    over Succeeded."""
    world = mx_world(mxjob({"Worker": 2}, cleanPodPolicy="All"))
    world.sync()
    for name in world.pods():
        world.set_pod(name, "Running")
    world.sync()
    world.now += timedelta(seconds=60)
    for name in world.pods():
        world.set_pod(name, "Succeeded", 0)
    world.sync()
    assert terminal(world.written[-1]) == "Succeeded"
    mark = len(world.created)
    for _ in range(4):  # the syncs queued by the deletions, each reading the parent one write late
        world.sync(stale=True)
        assert terminal(world.written[-1]) == "Succeeded"
    assert world.pods() == {}  # cleanPodPolicy All, applied once the outcome is recorded
    assert pods_created_after(world, mark) == []


def test_a_stale_parent_does_not_forget_restarts_and_backoff_limit_still_fails_the_job():
    """Before: restartHistory lived only in status. The sync after the one that deleted the failed
    pod read the status of before it, created the pod again without counting, and its status was
    written over the one with the restart: with backoffLimit 1 a worker failing with 137 was
    recreated again and again. Now the job fails at the second failure, as with fresh reads."""
    world = mx_world(mxjob({"Worker": {"replicas": 1, "restartPolicy": "ExitCode"}}, backoffLimit=1))
    world.sync()
    for _ in range(6):
        if terminal(world.parent.get("status")):
            break
        world.set_pod("mx-worker-0", "Running")
        world.sync()
        world.set_pod("mx-worker-0", "Failed", 137)
        world.sync()
        world.sync(stale=True)  # queued by the deletion or the record's creation: reads one write late
        world.sync()
        world.sync()
    assert terminal(world.written[-1]) == "Failed"
    assert "backoff limit" in next(c for c in world.written[-1]["conditions"] if c["type"] == "Failed")["message"]
    assert pods_created_after(world, 0).count("mx-worker-0") == 2  # the first pod and one recreation
    assert world.written[-1]["restartCount"] == 2


def test_an_older_status_is_never_written_over_a_newer_one():
    """Before: the sync after a recreation read the status of before it and wrote a smaller
    restartCount over the larger one (a pod's container restarts went with the pod)."""
    world = mx_world(mxjob({"Worker": {"replicas": 1, "restartPolicy": "OnFailure"}}))
    world.sync()
    world.set_pod("mx-worker-0", "Running", restarts=2)
    world.sync()
    assert world.written[-1]["restartCount"] == 2
    world.set_pod("mx-worker-0", "Failed", restarts=2)  # evicted: recreated, not a job failure
    world.sync()
    assert world.written[-1]["restartCount"] == 3
    for _ in range(3):
        world.sync(stale=True)
        assert world.written[-1]["restartCount"] == 3
    assert ("Pod", "mx-worker-0") in world.children


def test_a_terminal_status_is_never_replaced_by_a_stale_read():
    world = mx_world(mxjob({"Worker": 1}, cleanPodPolicy="None"))
    world.sync()
    world.set_pod("mx-worker-0", "Running")
    world.sync()
    running_status = copy.deepcopy(world.written[-1])
    world.set_pod("mx-worker-0", "Succeeded", 0)
    world.sync()
    world.sync()  # the outcome record is seen
    del world.children[("Pod", "mx-worker-0")]  # garbage-collected
    world.parent["status"] = running_status  # a stale read of the status before the outcome
    answer = sync_mxjob(world.request(stale=False), now=world.now)
    assert terminal(answer["status"]) == "Succeeded"
    assert answer["status"] == world.written[-1]
    assert not [c for c in answer["children"] if c["kind"] == "Pod"]


# --- properties over random lifecycles --------------------------------------------------------------

CODES = [0, 1, 137, 143, 138]
actions = st.lists(st.tuples(st.sampled_from(["run", "end", "tick", "gc"]), st.integers(0, 5),
                             st.sampled_from(CODES), st.booleans()), min_size=5, max_size=30)
mx_jobs = st.builds(
    lambda w, pol, clean, limit, sched: mxjob(
        ({"Scheduler": 1, "Server": 1} if sched else {}) | {"Worker": {"replicas": w, "restartPolicy": pol}},
        cleanPodPolicy=clean, **({"backoffLimit": limit} if limit is not None else {})),
    st.integers(1, 3), st.sampled_from(["Never", "ExitCode", "OnFailure"]), st.sampled_from(["All", "Running", "None"]),
    st.one_of(st.none(), st.integers(0, 3)), st.booleans())


def drive(world: World, steps: list, stale_draws: list[bool]) -> list[dict]:
    """Apply kubelet actions, each followed by syncs (stale as drawn); return the answers."""
    answers = [world.sync()]
    draws = itertools.cycle(stale_draws or [False])
    for verb, n, code, flag in steps:
        pods = sorted(world.pods())
        if verb == "tick":
            world.now += timedelta(seconds=10 * (n + 1))
        elif pods:
            name = pods[n % len(pods)]
            if verb == "run":
                world.set_pod(name, "Running")
            elif verb == "end":
                world.set_pod(name, "Succeeded" if code == 0 else "Failed", code)
            elif verb == "gc" and flag and world.children[("Pod", name)]["status"]["phase"] == "Succeeded":
                del world.children[("Pod", name)]
        for _ in range(2):
            answers.append(world.sync(stale=next(draws)))
    for _ in range(3):
        world.now += timedelta(seconds=31)
        answers.append(world.sync(stale=next(draws)))
    return answers


def check_properties(world: World, answers: list[dict], *, pod_kind: str = "Pod") -> None:
    decided: str | None = None
    decided_at = None
    last_count = 0
    for i, status in enumerate(world.written):
        outcome = terminal(status)
        if decided is not None:
            # A terminal condition is never replaced.
            assert outcome == decided, f"sync {i}: {decided} became {outcome}"
        elif outcome is not None:
            decided, decided_at = outcome, i
        count = status.get("restartCount", 0)
        assert count >= last_count, f"sync {i}: restartCount went from {last_count} to {count}"
        last_count = count
    if decided_at is not None:
        # No pod is created for a job whose outcome was decided.
        creations = [k for k in world.created if k[0] == pod_kind]
        assert len(creations) == world.pods_at_decision, "a pod was created after the outcome"


class CountingWorld(World):
    """A World that remembers how many pods had been created when the outcome was first written."""

    pods_at_decision = -1

    def sync(self, *, stale: bool = False) -> dict:
        before = len([k for k in self.created if k[0] in ("Pod", "Job")])
        answer = super().sync(stale=stale)
        if self.pods_at_decision < 0 and terminal(answer["status"]) is not None:
            self.pods_at_decision = before
        return answer


@settings(max_examples=120, deadline=None, derandomize=True)
@given(mx_jobs, actions, st.lists(st.booleans(), min_size=1, max_size=8))
def test_mxjob_lifecycles_under_stale_parent_reads(parent, steps, stale_draws):
    world = CountingWorld(parent, sync_mxjob, MX_KEYS)
    answers = drive(world, steps, stale_draws)
    check_properties(world, answers)


@settings(max_examples=120, deadline=None, derandomize=True)
@given(mx_jobs, actions, st.lists(st.booleans(), min_size=1, max_size=8))
def test_backoff_limit_holds_alike_with_stale_and_fresh_reads(parent, steps, stale_draws):
    """Never more recreations than backoffLimit allows, and a count past it always fails the job.
    (The random kubelet steps make the two runs diverge, so the restart at which each fails is
    compared in test_a_stale_parent_does_not_forget_restarts_and_backoff_limit_still_fails_the_job.)"""
    fresh = CountingWorld(parent, sync_mxjob, MX_KEYS)
    drive(fresh, steps, [False])
    stale = CountingWorld(parent, sync_mxjob, MX_KEYS)
    drive(stale, steps, [*stale_draws, True])
    limit = parent["spec"]["runPolicy"].get("backoffLimit")
    for world in (fresh, stale):
        recreations = len([k for k in world.created if k[0] == "Pod"]) - len(
            {name for kind, name in world.created if kind == "Pod"})
        if limit is not None:
            assert recreations <= limit
        count = world.written[-1].get("restartCount", 0)
        failed = terminal(world.written[-1]) == "Failed"
        if limit is not None and count > limit:
            assert failed  # the limit is never passed without failing the job


@settings(max_examples=120, deadline=None, derandomize=True)
@given(mx_jobs, actions, st.lists(st.booleans(), min_size=1, max_size=8))
def test_no_running_pod_is_dropped_under_stale_reads(parent, steps, stale_draws):
    world = CountingWorld(parent, sync_mxjob, MX_KEYS)
    draws = itertools.cycle(stale_draws)
    world.sync()
    for verb, n, code, _ in steps:
        pods = sorted(world.pods())
        if pods and verb in ("run", "end"):
            name = pods[n % len(pods)]
            world.set_pod(name, "Running" if verb == "run" else ("Succeeded" if code == 0 else "Failed"),
                          None if verb == "run" else code)
        world.now += timedelta(seconds=5)
        running = {name for name, p in world.pods().items() if p["status"]["phase"] == "Running"}
        answer = world.sync(stale=next(draws))
        kept = {c["metadata"]["name"] for c in answer["children"] if c["kind"] == "Pod"}
        if terminal(answer["status"]) is None:
            assert running <= kept


@settings(max_examples=60, deadline=None, derandomize=True)
@given(mx_jobs, actions, st.lists(st.booleans(), min_size=1, max_size=8))
def test_every_answer_under_stale_reads_is_deterministic(parent, steps, stale_draws):
    world = CountingWorld(parent, sync_mxjob, MX_KEYS)
    drive(world, steps[:10], stale_draws)
    request = world.request(stale=True)
    assert json.dumps(sync_mxjob(request, now=world.now)) == json.dumps(sync_mxjob(copy.deepcopy(request), now=world.now))


# --- ChainerJob ----------------------------------------------------------------------------------

CHAINER_KEYS = {"ServiceAccount": "ServiceAccount.v1", "Role": "Role.rbac.authorization.k8s.io/v1",
                "RoleBinding": "RoleBinding.rbac.authorization.k8s.io/v1", "ConfigMap": "ConfigMap.v1",
                "Service": "Service.v1", "StatefulSet": "StatefulSet.apps/v1", "Job": "Job.batch/v1"}


def chainerjob(workers: int) -> dict:
    template = {"spec": {"containers": [{"name": "chainer", "image": "chainer:7", "command": ["python", "t.py"]}]}}
    spec: dict = {"master": {"template": copy.deepcopy(template)}}
    if workers:
        spec["backend"] = "mpi"
        spec["workerSets"] = {"ws": {"replicas": workers, "template": copy.deepcopy(template)}}
    return {"apiVersion": "kubeflow.org/v1alpha1", "kind": "ChainerJob",
            "metadata": {"name": "ch", "namespace": "ns", "uid": "uid-ch", "generation": 1}, "spec": spec}


def chainer_world(workers: int) -> CountingWorld:
    return CountingWorld(chainerjob(workers), sync_chainerjob, CHAINER_KEYS)


def workers_ready(world: World) -> None:
    for (kind, _), obj in world.children.items():
        if kind == "StatefulSet":
            obj["status"] = {"readyReplicas": obj["spec"]["replicas"]}


def master_ends(world: World, outcome: str) -> None:
    job = world.children[("Job", "ch-master")]
    cond = {"type": outcome, "status": "True", "lastProbeTime": rfc3339(world.now),
            "lastTransitionTime": rfc3339(world.now)}
    job["status"] = {"conditions": [cond], "startTime": rfc3339(T0), "completionTime": rfc3339(world.now),
                     **({"succeeded": 1} if outcome == "Complete" else {"failed": 1})}


def test_a_chainerjob_master_deleted_after_the_job_finished_is_not_created_again_on_a_stale_read():
    """Before: that the master Job had finished was remembered only in status, so a sync reading the
    status of before the end, after someone deleted the finished master Job, created it again."""
    world = chainer_world(2)
    world.sync()
    workers_ready(world)
    world.sync()
    assert ("Job", "ch-master") in world.children
    before_the_end = copy.deepcopy(world.written[-1])
    master_ends(world, "Complete")
    world.sync()
    world.sync()
    del world.children[("Job", "ch-master")]  # kubectl delete, or a TTL on the Job
    mark = len(world.created)
    world.parent["status"] = before_the_end  # a stale read
    for _ in range(3):
        world.sync()
        assert terminal(world.written[-1]) == "Complete"
    assert [k for k in world.created[mark:] if k[0] == "Job"] == []
    # The master Job's counts are kept, as the record has them, with the Job gone.
    assert (world.written[-1]["succeeded"], world.written[-1]["completionTime"]) == (1, rfc3339(world.now))
    sets = [obj for (kind, _), obj in world.children.items() if kind == "StatefulSet"]
    assert sets and all(s["spec"]["replicas"] == 0 for s in sets)


@settings(max_examples=80, deadline=None, derandomize=True)
@given(st.integers(0, 2), st.sampled_from(["Complete", "Failed"]), st.lists(st.booleans(), min_size=1, max_size=6),
       st.integers(0, 3), st.booleans())
def test_chainerjob_lifecycles_under_stale_parent_reads(workers, outcome, stale_draws, extra_syncs, delete_master):
    world = chainer_world(workers)
    draws = itertools.cycle(stale_draws)
    world.sync()
    workers_ready(world)
    world.sync(stale=next(draws))
    world.sync(stale=next(draws))
    if ("Job", "ch-master") not in world.children:
        return
    master_ends(world, outcome)
    for _ in range(1 + extra_syncs):
        world.sync(stale=next(draws))
    if delete_master:
        world.children.pop(("Job", "ch-master"), None)
    for _ in range(3):
        world.sync(stale=next(draws))
    check_properties(world, [], pod_kind="Job")
    assert terminal(world.written[-1]) == outcome
    assert all(obj["spec"]["replicas"] == 0 for (kind, _), obj in world.children.items() if kind == "StatefulSet")


@pytest.mark.parametrize("stale", [False, True])
def test_a_chainerjob_outcome_is_recorded_in_a_child(stale):
    world = chainer_world(1)
    world.sync()
    workers_ready(world)
    world.sync()
    master_ends(world, "Failed")
    world.sync(stale=stale)
    world.sync(stale=stale)
    assert ("ConfigMap", "ch-outcome") in world.children
