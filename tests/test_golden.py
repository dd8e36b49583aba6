"""Golden tests: a readable sync request in, the exact expected answer out, one folder per case.

Every job kind shares the mechanism: the request's parent kind picks the sync function from
hooks.kinds. `UPDATE_GOLDEN=1 make test` rewrites every case from the scenarios below
(request.yaml) and the current code (response.yaml). Read every diff it makes before committing it.
"""
from __future__ import annotations

import os
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Protocol

import pytest
import yaml
from chainersim import JOB_KEY, ChainerSim, chainerjob, example
from mcsim import Sim, mxjob

from hooks.kinds import SYNC


class Scenario(Protocol):
    now: datetime

    def request(self) -> dict: ...


GOLDEN = Path(__file__).resolve().parent / "golden"
UPDATE = os.environ.get("UPDATE_GOLDEN") == "1"
EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def _example(name: str) -> Sim:
    parent = yaml.safe_load((EXAMPLES / name).read_text())
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


def terminal_failed_deadline() -> Sim:
    sim = Sim(mxjob(replicas={"Worker": 1}, runPolicy={"activeDeadlineSeconds": 60}))
    sim.sync()
    sim.run()
    sim.sync()
    sim.tick(60)
    return sim


def terminal_ttl_cleanup() -> Sim:
    sim = terminal_succeeded()
    sim.parent["spec"]["runPolicy"] = {"ttlSecondsAfterFinished": 600}
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


CASES: dict[str, Callable[[], Scenario]] = {f.__name__.replace("_", "-"): f for f in (
    first_sync_dist_cpu, first_sync_tune, running_all_pods_observed, terminal_succeeded,
    terminal_failed_never, terminal_failed_exitcode_permanent, restarting_exitcode_retryable,
    terminal_failed_backoff_limit, terminal_failed_deadline, terminal_ttl_cleanup,
    terminal_failed_validation, suspended_running_job,
    chainerjob_non_distributed, chainerjob_one_worker_set, chainerjob_two_worker_sets_gpu,
    chainerjob_waiting_for_workers, chainerjob_master_running, chainerjob_master_complete,
    chainerjob_master_failed_backoff_limit, chainerjob_invalid_backend, chainerjob_invalid_names_too_long,
    chainerjob_invalid_negative_replicas, chainerjob_invalid_edit_of_running_job)}


def _dump(data: dict) -> str:
    return yaml.safe_dump(data, sort_keys=False, width=100)


def _write_case(name: str) -> None:
    sim = CASES[name]()
    folder = GOLDEN / name
    folder.mkdir(parents=True, exist_ok=True)
    request = {"now": sim.now.isoformat(), **sim.request()}
    (folder / "request.yaml").write_text(_dump(request))


@pytest.mark.parametrize("name", sorted(CASES))
def test_golden(name):
    folder = GOLDEN / name
    if UPDATE:
        _write_case(name)
    request = yaml.safe_load((folder / "request.yaml").read_text())
    now = datetime.fromisoformat(request.pop("now"))
    answer = SYNC[request["parent"]["kind"]](request, now=now)
    if UPDATE:
        (folder / "response.yaml").write_text(_dump(answer))
    expected = yaml.safe_load((folder / "response.yaml").read_text())
    assert answer == expected


def test_every_golden_folder_has_a_case():
    assert sorted(p.name for p in GOLDEN.iterdir() if p.is_dir()) == sorted(CASES)
