"""Golden tests: a readable sync request in, the exact expected answer out, one folder per case.

Every job kind shares the mechanism: the request's parent kind picks the sync function from
hooks.kinds. Each folder's request.yaml is an input, committed and never rewritten: a change of the
code cannot quietly change what it is tested against. `UPDATE_GOLDEN=1 make test` rewrites only the
expected answers (response.yaml) from the current code; read every diff it makes before committing
it. The scenarios below are how each request was made: for a new case (a folder without
request.yaml) the same flag writes its request once; to remake an existing request on purpose,
delete its request.yaml first.
"""
from __future__ import annotations

import json
import os
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Protocol

import pytest
import yaml
from helpers import yamlio
from helpers.chainersim import JOB_KEY, ChainerSim, chainerjob, example
from helpers.chainersim import gang_controller as chainer_gang_controller
from helpers.mcsim import Sim, gang_controller, mxjob

from hooks.kinds import SYNC
from localcluster.node.podenv import resolve_env


class Scenario(Protocol):
    now: datetime

    def request(self) -> dict: ...


GOLDEN = Path(__file__).resolve().parents[1] / "golden"
UPDATE = os.environ.get("UPDATE_GOLDEN") == "1"
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
# MX_CONFIG of every golden pod's containers as it was when the whole cluster map was written
# inline into each pod, before it moved to the `<job>-cluster` ConfigMap.
INLINE_MX_CONFIG = Path(__file__).resolve().parent / "data" / "golden_mx_config.json"


def _example(name: str) -> Sim:
    parent = yamlio.load((EXAMPLES / name).read_text())
    parent["metadata"].update(namespace="default", uid="uid-example", generation=1)
    return Sim(parent)


def first_sync_dist_cpu() -> Sim:
    return _example("dist-cpu-train.yaml")


def first_sync_tune() -> Sim:
    return _example("tune.yaml")


def running_all_pods_observed() -> Sim:
    sim = Sim(mxjob(replicas={"Scheduler": 1, "Server": 1, "Worker": 1}))
    sim.sync()
    sim.tick(5)
    sim.run()
    return sim


def waiting_for_the_scheduler() -> Sim:
    """A worker the scheduler cannot place: the job says which and why, and status.waiting says who."""
    sim = Sim(mxjob(replicas={"Scheduler": 1, "Server": 1, "Worker": 1}))
    sim.sync()
    sim.tick(5)
    sim.run("mx-scheduler-0", "mx-server-0")
    sim.write_status("v1", "Pod", "mx-worker-0", {"phase": "Pending", "conditions": [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
         "message": "0/1 nodes are available: 1 Insufficient cpu."}]})
    return sim


def terminal_succeeded() -> Sim:
    sim = running_all_pods_observed()
    sim.sync()
    sim.tick(60)
    sim.set_phase("mx-worker-0", "Succeeded", exit_code=0)
    sim.set_phase("mx-scheduler-0", "Succeeded", exit_code=0)
    return sim


def terminal_failed_never() -> Sim:
    sim = running_all_pods_observed()
    sim.sync()
    sim.tick(30)
    sim.set_phase("mx-worker-0", "Failed", exit_code=1)
    return sim


def terminal_failed_exitcode_permanent() -> Sim:
    sim = Sim(mxjob(replicas={"Worker": {"replicas": 1, "restartPolicy": "ExitCode"}}))
    sim.sync()
    sim.run()
    sim.sync()
    sim.tick(30)
    sim.set_phase("mx-worker-0", "Failed", exit_code=139)
    return sim


def restarting_exitcode_retryable() -> Sim:
    sim = Sim(mxjob(replicas={"Worker": {"replicas": 1, "restartPolicy": "ExitCode"}},
                    runPolicy={"backoffLimit": 2}))
    sim.sync()
    sim.run()
    sim.sync()
    sim.tick(30)
    sim.set_phase("mx-worker-0", "Failed", exit_code=137)
    return sim


def terminal_failed_backoff_limit() -> Sim:
    sim = Sim(mxjob(replicas={"Worker": {"replicas": 1, "restartPolicy": "OnFailure"}},
                    runPolicy={"backoffLimit": 1}))
    sim.sync()
    sim.tick(30)
    sim.set_phase("mx-worker-0", "Running", restarts=2)
    return sim


def _dist_exitcode() -> Sim:
    every = {"restartPolicy": "ExitCode"}
    sim = Sim(mxjob(replicas={"Scheduler": {"replicas": 1, **every}, "Server": {"replicas": 1, **every},
                              "Worker": {"replicas": 2, **every}}, runPolicy={"backoffLimit": 3}))
    sim.sync()
    sim.tick(5)
    sim.run()
    sim.sync()
    return sim


def restarting_whole_job_worker_lost() -> Sim:
    # A distributed job loses a worker to SIGKILL: attempt 1 is recorded, every pod stays for now.
    sim = _dist_exitcode()
    sim.tick(30)
    sim.set_phase("mx-worker-1", "Failed", exit_code=137, reason="Error")
    return sim


def restarting_whole_job_evicted_by_queue() -> Sim:
    # Kueue preempts the job's pod group: TerminationTarget on each pod, then its deletion. Attempt 1
    # is recorded as a queue eviction (not counted against backoffLimit 0), every pod stays for now.
    sim = _dist_exitcode()
    sim.edit({"runPolicy": {"backoffLimit": 0}})
    sim.sync()
    sim.tick(30)
    for name in list(sim.pods):
        status = {**sim.pods[name]["status"], "conditions": [
            {"type": "TerminationTarget", "status": "True", "reason": "WorkloadEvictedDueToPreempted",
             "message": "Preempted to accommodate a workload (UID: 7f3c) due to prioritization in the ClusterQueue"}]}
        sim.write_status("v1", "Pod", name, status)
        sim.terminating(name)
    return sim


def restarting_whole_job_old_attempt_deleted() -> Sim:
    # The attempt's record is observed: every pod of attempt 0 is left out (deleted), none created.
    sim = restarting_whole_job_worker_lost()
    sim.sync()
    return sim


def restarting_whole_job_new_attempt_created() -> Sim:
    # The old pods are gone: attempt 1's pods, with MXJOB_ATTEMPT=1 and the job-attempt label.
    sim = restarting_whole_job_old_attempt_deleted()
    sim.sync()
    sim.tick(3)
    return sim


def terminal_failed_oomkilled() -> Sim:
    # The reason and the first line of the termination message are kept in the Failed condition.
    sim = running_all_pods_observed()
    sim.sync()
    sim.tick(30)
    sim.set_phase("mx-worker-0", "Failed", exit_code=137, reason="OOMKilled",
                  message="Killed while allocating 2 GiB\nsecond line")
    return sim


def terminal_failed_deadline() -> Sim:
    sim = Sim(mxjob(replicas={"Worker": 1}, runPolicy={"activeDeadlineSeconds": 60}))
    sim.sync()
    sim.run()
    sim.sync()
    sim.tick(60)
    return sim


def terminal_ttl_cleanup() -> Sim:
    sim = terminal_succeeded()
    sim.edit({"runPolicy": {"ttlSecondsAfterFinished": 600}})
    sim.sync()
    sim.tick(600)
    return sim


def terminal_failed_validation() -> Sim:
    return Sim(mxjob(replicas={"Scheduler": 2, "Worker": {"replicas": 1, "template": {
        "spec": {"containers": [{"name": "main", "image": ""}]}}}}))


def suspended_running_job() -> Sim:
    sim = running_all_pods_observed()
    sim.sync()
    sim.edit({"runPolicy": {"suspend": True}})
    return sim


def progress_running_one_reporter_silent() -> Sim:
    # runPolicy.progress and stallPolicy (docs/progress.md): two workers report; worker-1 falls
    # silent past the timeout, so Running says the job may have stalled (action Report).
    sim = Sim(mxjob(replicas={"Scheduler": 1, "Server": 1, "Worker": 2},
                    runPolicy={"progress": {"reporters": "AllReplicas"},
                               "stallPolicy": {"timeoutSeconds": 120, "action": "Report"}}))
    for _ in range(3):
        sim.sync()
    sim.run()
    sim.sync()
    sim.sync()

    def report(name: str, step: int, **metrics: float) -> None:
        entry = json.dumps({"attempt": 0, "step": step, "total": 500, "metrics": metrics,
                            "time": sim.now.strftime("%Y-%m-%dT%H:%M:%SZ")})
        sim.change("v1", "ConfigMap", "mx-progress", lambda cm: cm.setdefault("data", {}).update({name: entry}))

    report("worker-1", 40, loss=1.25)
    sim.tick(100)
    report("worker-0", 120, loss=0.75, accuracy=0.875)
    sim.sync()
    sim.tick(30)
    return sim


PER_JOB = {"training.kubeflow.org/headless-service": "per-job"}


def _per_job(**replicas: int) -> Sim:
    parent = mxjob(replicas=replicas or {"Scheduler": 1, "Server": 1, "Worker": 2})
    parent["metadata"]["annotations"] = dict(PER_JOB)
    return Sim(parent)


def per_job_service_first_sync() -> Sim:
    return _per_job()


def per_job_service_running() -> Sim:
    sim = _per_job()
    sim.sync()
    sim.tick(5)
    sim.run()
    return sim


def per_job_service_terminal_succeeded() -> Sim:
    sim = per_job_service_running()
    sim.sync()
    sim.tick(60)
    for pod in ("mx-worker-0", "mx-worker-1", "mx-scheduler-0"):
        sim.set_phase(pod, "Succeeded", exit_code=0)
    return sim


def per_job_service_invalid_value() -> Sim:
    parent = mxjob(replicas={"Worker": 1})
    parent["metadata"]["annotations"] = {"training.kubeflow.org/headless-service": "shared"}
    return Sim(parent)


def per_job_service_set_on_a_running_job() -> Sim:
    """The annotation added to a job whose pods run with per-replica Services: refused, children kept."""
    sim = running_all_pods_observed()
    sim.sync()
    sim.change("kubeflow.org/v1", "MXJob", "mx", lambda parent: parent["metadata"].update(annotations=dict(PER_JOB)))
    return sim


VOLCANO = "scheduling.volcano.sh/v1beta1"
COSCHEDULING = "scheduling.x-k8s.io/v1alpha1"
KUBERNETES = "scheduling.k8s.io/v1beta1"


def _podgroup_observed(sim: Sim) -> Sim:
    """After the first sync, which answers the PodGroup and no pod (gang_volcano_first_sync)."""
    sim.sync()
    sim.tick(1)
    return sim


def gang_volcano_first_sync() -> Sim:
    # PodGroup first: no pod until the PodGroup is observed; the Created condition says so.
    return Sim(mxjob(replicas={"Scheduler": 1, "Server": 1, "Worker": 2}),
               controller=gang_controller(VOLCANO))


def gang_volcano_defaults() -> Sim:
    return _podgroup_observed(Sim(mxjob(replicas={"Scheduler": 1, "Server": 1, "Worker": 2}),
                                  controller=gang_controller(VOLCANO)))


def gang_volcano_queue_priority_min_available() -> Sim:
    # The mxnet-operator layout: schedulingPolicy inline under spec. Worker pods set their own
    # priority class, which the policy's must not replace.
    worker = {"replicas": 3, "template": {"spec": {
        "priorityClassName": "best-effort",
        "containers": [{"name": "mxnet", "image": "mxjob/mxnet:1.9.1"}]}}}
    return _podgroup_observed(Sim(mxjob(replicas={"Scheduler": 1, "Server": 2, "Worker": worker},
                                        schedulingPolicy={"minAvailable": 4, "queue": "research",
                                                          "priorityClass": "high-priority"}),
                                  controller=gang_controller(VOLCANO)))


def gang_scheduler_plugins_timeout_min_resources() -> Sim:
    def template(requests: dict, limits: dict) -> dict:
        return {"spec": {"containers": [{"name": "mxnet", "image": "mxjob/mxnet:1.9.1-gpu",
                                         "resources": {"requests": requests, "limits": limits}}]}}

    return _podgroup_observed(Sim(mxjob(replicas={
        "Scheduler": {"replicas": 1, "template": template({"cpu": "500m", "memory": "512Mi"}, {})},
        "Server": {"replicas": 1, "template": template({"cpu": 1, "memory": "2Gi"},
                                                        {"cpu": 2, "memory": "2Gi"})},
        # No requests: the limits count, the GPUs included.
        "Worker": {"replicas": 2, "template": template({}, {"cpu": "4", "memory": "16Gi",
                                                            "nvidia.com/gpu": 2})}},
        runPolicy={"schedulingPolicy": {"scheduleTimeoutSeconds": 120}}),
        controller=gang_controller(COSCHEDULING, "scheduler-plugins-scheduler")))


def gang_kubernetes_min_available_queue_ignored() -> Sim:
    # Kubernetes' own PodGroup has only minCount: queue, minResources and the timeout are left out;
    # every pod names the group in spec.schedulingGroup and goes to kube-scheduler.
    return _podgroup_observed(Sim(mxjob(replicas={"Scheduler": 1, "Server": 1, "Worker": 2},
                                        runPolicy={"schedulingPolicy": {
                                            "minAvailable": 3, "queue": "research", "priorityClass": "high",
                                            "minResources": {"cpu": 4}, "scheduleTimeoutSeconds": 60}}),
                                  controller=gang_controller(KUBERNETES)))


def gang_terminal_succeeded() -> Sim:
    sim = Sim(mxjob(replicas={"Scheduler": 1, "Server": 1, "Worker": 1}),
              controller=gang_controller(VOLCANO))
    sim.sync()
    sim.sync()
    sim.tick(5)
    sim.run()
    sim.sync()
    sim.tick(60)
    sim.set_phase("mx-worker-0", "Succeeded", exit_code=0)
    sim.set_phase("mx-scheduler-0", "Succeeded", exit_code=0)
    return sim


def gang_invalid_scheduling_policy() -> Sim:
    return Sim(mxjob(replicas={"Scheduler": 1, "Server": 1, "Worker": 2}, runPolicy={
        "schedulingPolicy": {"minAvailable": 9, "scheduleTimeoutSeconds": -5,
                             "minResources": {"cpu": "lots", "memory": "8Gi"}}}),
        controller=gang_controller(VOLCANO))


# --- ChainerJob ---------------------------------------------------------------------------------


def chainerjob_non_distributed() -> ChainerSim:
    return ChainerSim(example("chainerjob-single.yaml"))


def chainerjob_one_worker_set() -> ChainerSim:
    return ChainerSim(example("chainerjob-mn.yaml"))


def chainerjob_two_worker_sets_gpu() -> ChainerSim:
    return ChainerSim(example("chainerjob-gpu-two-sets.yaml"))


def chainerjob_waiting_for_workers() -> ChainerSim:
    sim = ChainerSim(example("chainerjob-gpu-two-sets.yaml"))
    sim.sync()
    sim.tick(20)
    sim.ready("example-job-gpu-workerset-big")
    sim.ready("example-job-gpu-workerset-small", 0)
    return sim


def chainerjob_master_running() -> ChainerSim:
    sim = ChainerSim(example("chainerjob-mn.yaml"))
    sim.sync()
    sim.tick(20)
    sim.all_ready()
    sim.sync()
    sim.tick(5)
    sim.master("example-job-mn-master", active=1)
    return sim


def _chainerjob_mn_running(run_policy: dict) -> ChainerSim:
    """The ChainerMN example with this runPolicy: its workers ready 20 s in, its master running 5 s later."""
    parent = example("chainerjob-mn.yaml")
    parent["spec"]["runPolicy"] = run_policy
    sim = ChainerSim(parent)
    sim.sync()
    sim.sync()
    sim.tick(20)
    sim.all_ready()
    sim.sync()
    sim.tick(5)
    sim.master("example-job-mn-master", active=1)
    sim.sync()
    return sim


def chainerjob_progress_rank_silent() -> ChainerSim:
    # spec.runPolicy.progress and stallPolicy (docs/progress.md): every rank reports; rank-1 falls
    # silent past the timeout, so Running says the job may have stalled (action Report).
    sim = _chainerjob_mn_running({"progress": {"reporters": "AllReplicas"},
                                  "stallPolicy": {"timeoutSeconds": 120, "action": "Report"}})

    def report(name: str, step: int, **metrics: float) -> None:
        entry = json.dumps({"attempt": 0, "step": step, "total": 500, "metrics": metrics,
                            "time": sim.now.strftime("%Y-%m-%dT%H:%M:%SZ")})
        sim.change("v1", "ConfigMap", "example-job-mn-progress",
                   lambda cm: cm.setdefault("data", {}).update({name: entry}))

    report("rank-1", 40, loss=1.25)
    sim.tick(100)
    report("rank-0", 120, loss=0.75, accuracy=0.875)
    sim.sync()
    sim.tick(30)
    return sim


def chainerjob_restarted_by_stall() -> ChainerSim:
    # spec.runPolicy.stallPolicy RestartJob (docs/progress.md): no report within the timeout, so the
    # master Job and the workers were replaced as attempt 1 (status.attempt, the `-attempt-1` record);
    # its master runs, so Restarting is False and Running True again.
    sim = _chainerjob_mn_running({"stallPolicy": {"timeoutSeconds": 120, "action": "RestartJob"}})
    sim.tick(120)
    sim.sync()
    sim.tick(10)
    sim.sync()  # the restart is decided and recorded
    assert sim.status["attempt"] == 1, sim.status
    sim.sync()  # attempt 0's master Job and StatefulSet are deleted
    sim.tick(5)
    sim.sync()  # attempt 1's StatefulSet is created
    sim.tick(20)
    sim.all_ready()
    sim.sync()  # and its master Job
    sim.tick(5)
    sim.master("example-job-mn-master", active=1)
    return sim


def chainerjob_suspended_running_job() -> ChainerSim:
    # spec.runPolicy.suspend (docs/chainerjob.md, "Suspend") on a running job: the suspension is
    # recorded as attempt 1 (`-attempt-1`, `suspended`); the sync that sees the record leaves attempt
    # 0's master Job and StatefulSet out (so Metacontroller deletes them), and the job is Suspended.
    sim = _chainerjob_mn_running({})
    sim.tick(60)
    sim.edit({"runPolicy": {"suspend": True}})
    sim.sync()  # the suspension is decided and recorded
    assert sim.status["attempt"] == 1, sim.status
    sim.tick(1)
    return sim


def chainerjob_master_complete() -> ChainerSim:
    sim = chainerjob_master_running()
    sim.sync()
    sim.tick(300)
    sim.master("example-job-mn-master", succeeded=1,
               finished=("Complete", "CompletionsReached", "Reached expected number of succeeded pods"))
    return sim


def chainerjob_master_failed_backoff_limit() -> ChainerSim:
    sim = ChainerSim(chainerjob(workers={"ws0": 2}, master={
        "backoffLimit": 2, "template": chainerjob()["spec"]["master"]["template"]}))
    sim.sync()
    sim.tick(20)
    sim.all_ready()
    sim.sync()
    sim.tick(5)
    sim.master("chj-master", active=1)
    sim.sync()
    sim.tick(120)
    sim.master("chj-master", failed=3,
               finished=("Failed", "BackoffLimitExceeded", "Job has reached the specified backoff limit"))
    return sim


def chainerjob_invalid_backend() -> ChainerSim:
    return ChainerSim(chainerjob(workers={"ws0": 2}, backend="nccl"))


def chainerjob_invalid_names_too_long() -> ChainerSim:
    return ChainerSim(chainerjob("a-very-long-chainerjob-name-for-a-team", workers={"second-worker-set": 2}))


def chainerjob_invalid_negative_replicas() -> ChainerSim:
    return ChainerSim(chainerjob(workers={"ws0": -1, "ws1": 1}))


def chainerjob_invalid_edit_of_running_job() -> ChainerSim:
    sim = chainerjob_master_running()
    sim.sync()
    sim.tick(30)
    sim.edit({"backend": "gloo", "workerSets": {"ws0": {**sim.parent["spec"]["workerSets"]["ws0"], "replicas": -2}}})
    assert sim.children[JOB_KEY]
    return sim


def gang_chainerjob_volcano_first_sync() -> ChainerSim:
    # PodGroup first: neither the master Job nor a StatefulSet until the PodGroup is observed.
    return ChainerSim(example("chainerjob-gpu-two-sets.yaml"), controller=chainer_gang_controller(VOLCANO))


def gang_chainerjob_volcano_podgroup_observed() -> ChainerSim:
    # Then the master Job comes at once, with the workers, and the agent waits for them.
    sim = gang_chainerjob_volcano_first_sync()
    sim.sync()
    sim.tick(1)
    return sim


def gang_chainerjob_kubernetes_podgroup_observed() -> ChainerSim:
    # The master Job's and the StatefulSets' pod templates name the group in spec.schedulingGroup.
    sim = ChainerSim(example("chainerjob-gpu-two-sets.yaml"), controller=chainer_gang_controller(KUBERNETES))
    sim.sync()
    sim.tick(1)
    return sim


def gang_chainerjob_master_complete() -> ChainerSim:
    sim = ChainerSim(example("chainerjob-mn.yaml"), controller=chainer_gang_controller(COSCHEDULING))
    sim.sync()
    sim.sync()
    sim.tick(20)
    sim.all_ready()
    sim.master("example-job-mn-master", active=1)
    sim.sync()
    sim.tick(300)
    sim.master("example-job-mn-master", succeeded=1,
               finished=("Complete", "CompletionsReached", "Reached expected number of succeeded pods"))
    return sim


CASES: dict[str, Callable[[], Scenario]] = {f.__name__.replace("_", "-"): f for f in (
    first_sync_dist_cpu, first_sync_tune, running_all_pods_observed, waiting_for_the_scheduler, terminal_succeeded,
    terminal_failed_never, terminal_failed_exitcode_permanent, restarting_exitcode_retryable,
    terminal_failed_backoff_limit, terminal_failed_deadline, terminal_ttl_cleanup,
    terminal_failed_validation, suspended_running_job, restarting_whole_job_worker_lost,
    restarting_whole_job_evicted_by_queue, restarting_whole_job_old_attempt_deleted,
    restarting_whole_job_new_attempt_created, terminal_failed_oomkilled,
    chainerjob_non_distributed, chainerjob_one_worker_set, chainerjob_two_worker_sets_gpu,
    chainerjob_waiting_for_workers, chainerjob_master_running, chainerjob_master_complete,
    chainerjob_master_failed_backoff_limit, chainerjob_invalid_backend, chainerjob_invalid_names_too_long,
    chainerjob_invalid_negative_replicas, chainerjob_invalid_edit_of_running_job,
    gang_volcano_first_sync, gang_volcano_defaults, gang_volcano_queue_priority_min_available,
    gang_scheduler_plugins_timeout_min_resources, gang_kubernetes_min_available_queue_ignored, gang_terminal_succeeded,
    gang_invalid_scheduling_policy, gang_chainerjob_volcano_first_sync, gang_chainerjob_volcano_podgroup_observed,
    gang_chainerjob_kubernetes_podgroup_observed, gang_chainerjob_master_complete, per_job_service_first_sync, per_job_service_running,
    per_job_service_terminal_succeeded, per_job_service_invalid_value, per_job_service_set_on_a_running_job,
    progress_running_one_reporter_silent, chainerjob_progress_rank_silent, chainerjob_restarted_by_stall,
    chainerjob_suspended_running_job)}


def _dump(data: dict) -> str:
    return yaml.safe_dump(data, sort_keys=False, width=100)


def _write_request(name: str, folder: Path) -> None:
    sim = CASES[name]()
    folder.mkdir(parents=True, exist_ok=True)
    request = {"now": sim.now.isoformat(), **sim.request()}
    (folder / "request.yaml").write_text(_dump(request))


def check_case(name: str, folder: Path, *, update: bool) -> None:
    """The case's answer to its request.yaml must equal its response.yaml; with `update`, the answer is
    written there first (and a missing request.yaml made from the scenario)."""
    if update and not (folder / "request.yaml").exists():
        _write_request(name, folder)
    request = yamlio.load((folder / "request.yaml").read_text())
    now = datetime.fromisoformat(request.pop("now"))
    answer = SYNC[request["parent"]["kind"]](request, now=now)
    if update:
        (folder / "response.yaml").write_text(_dump(answer))
    expected = yamlio.load((folder / "response.yaml").read_text())
    assert answer == expected


@pytest.mark.parametrize("name", sorted(CASES))
def test_golden(name):
    check_case(name, GOLDEN / name, update=UPDATE)


def test_updating_rewrites_the_answer_and_never_the_request(tmp_path):
    """request.yaml is an input: the update flag leaves its bytes alone, even where the scenario
    would now make another request, and rewrites response.yaml."""
    name = "terminal-succeeded"
    folder = tmp_path / name
    folder.mkdir()
    request_text = (GOLDEN / name / "request.yaml").read_text() + "# a committed input, kept byte for byte\n"
    (folder / "request.yaml").write_text(request_text)
    (folder / "response.yaml").write_text("status: {}\nchildren: []\n")

    check_case(name, folder, update=True)

    assert (folder / "request.yaml").read_text() == request_text
    assert (folder / "response.yaml").read_text() == (GOLDEN / name / "response.yaml").read_text()


def test_updating_makes_the_request_of_a_new_case_from_its_scenario(tmp_path):
    # A case made with the current CompositeController (an older one's request holds the child rules of its day).
    name = "progress-running-one-reporter-silent"
    check_case(name, tmp_path / name, update=True)
    assert (tmp_path / name / "request.yaml").read_text() == (GOLDEN / name / "request.yaml").read_text()
    assert (tmp_path / name / "response.yaml").read_text() == (GOLDEN / name / "response.yaml").read_text()


def test_every_golden_folder_has_a_case():
    assert sorted(p.name for p in GOLDEN.iterdir() if p.is_dir()) == sorted(CASES)


def test_every_golden_process_sees_the_mx_config_it_saw_when_the_map_was_inline():
    """The kubelet's resolution of MXJOB_CLUSTER and expansion of $(MXJOB_CLUSTER) restore the old bytes
    (for the cases that existed then)."""
    inline = json.loads(INLINE_MX_CONFIG.read_text())
    then = {key.split("/")[0] for key in inline}
    seen = {}
    for folder in sorted(p for p in GOLDEN.iterdir() if p.is_dir() and p.name in then):
        children = yamlio.load((folder / "response.yaml").read_text())["children"]
        config_maps = {c["metadata"]["name"]: c for c in children if c["kind"] == "ConfigMap"}
        for pod in (c for c in children if c["kind"] == "Pod"):
            for container in pod["spec"]["containers"]:
                env = resolve_env(container, pod, config_map=config_maps.get, runtime={})
                seen[f"{folder.name}/{pod['metadata']['name']}/{container['name']}"] = env["MX_CONFIG"]
    assert seen == inline
