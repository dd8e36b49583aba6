"""Golden tests: a readable sync request in, the exact expected answer out, one folder per case.

`UPDATE_GOLDEN=1 make test` rewrites every case from the scenarios below (request.yaml) and the
current code (response.yaml). Read every diff it makes before committing it.
"""
from __future__ import annotations

import json
import os
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

import pytest
import yaml
from mcsim import Sim, mxjob

from hooks.mxjob.sync import sync_mxjob
from localcluster.podenv import resolve_env

GOLDEN = Path(__file__).resolve().parent / "golden"
UPDATE = os.environ.get("UPDATE_GOLDEN") == "1"
EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
# MX_CONFIG of every golden pod's containers as it was when the whole cluster map was written
# inline into each pod, before it moved to the `<job>-cluster` ConfigMap.
INLINE_MX_CONFIG = Path(__file__).resolve().parent / "data" / "golden_mx_config.json"


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


CASES: dict[str, Callable[[], Sim]] = {f.__name__.replace("_", "-"): f for f in (
    first_sync_dist_cpu, first_sync_tune, running_all_pods_observed, terminal_succeeded,
    terminal_failed_never, terminal_failed_exitcode_permanent, restarting_exitcode_retryable,
    terminal_failed_backoff_limit, terminal_failed_deadline, terminal_ttl_cleanup,
    terminal_failed_validation, suspended_running_job)}


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
    answer = sync_mxjob(request, now=now)
    if UPDATE:
        (folder / "response.yaml").write_text(_dump(answer))
    expected = yaml.safe_load((folder / "response.yaml").read_text())
    assert answer == expected


def test_every_golden_folder_has_a_case():
    assert sorted(p.name for p in GOLDEN.iterdir() if p.is_dir()) == sorted(CASES)


def test_every_golden_process_sees_the_mx_config_it_saw_when_the_map_was_inline():
    """The kubelet's resolution of MXJOB_CLUSTER and expansion of $(MXJOB_CLUSTER) restore the old bytes."""
    seen = {}
    for folder in sorted(p for p in GOLDEN.iterdir() if p.is_dir()):
        children = yaml.safe_load((folder / "response.yaml").read_text())["children"]
        config_maps = {c["metadata"]["name"]: c for c in children if c["kind"] == "ConfigMap"}
        for pod in (c for c in children if c["kind"] == "Pod"):
            for container in pod["spec"]["containers"]:
                env = resolve_env(container, pod, base={}, config_map=config_maps.get, runtime={})
                seen[f"{folder.name}/{pod['metadata']['name']}/{container['name']}"] = env["MX_CONFIG"]
    assert seen == json.loads(INLINE_MX_CONFIG.read_text())
