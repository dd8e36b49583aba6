"""The transition table in docs/lifecycle.md, checked row by row against the implementation."""
from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest
from helpers.mcsim import Sim, mxjob, running

TABLE = Path(__file__).resolve().parents[2] / "docs" / "lifecycle.md"
ROW = re.compile(r"^\| (\d+) \| ([^|]+) \| ([^|]+) \| ([^|]+) \| (\w+)=(True|False) (\w+) \|$")


def table_rows() -> dict[int, tuple[str, str, str, str, str]]:
    rows = {}
    for line in TABLE.read_text().splitlines():
        match = ROW.match(line.strip())
        if match:
            n, frm, _, to, ctype, status, reason = match.groups()
            rows[int(n)] = (frm.strip(), to.strip(), ctype, status, reason)
    return rows


def exitcode_job(**spec) -> dict:
    return mxjob(replicas={"Scheduler": 1, "Server": 1,
                           "Worker": {"replicas": 2, "restartPolicy": "ExitCode"}}, **spec)


# Each scenario: (sim in the "from" state, the observation to apply before the next sync).
def row_1():
    return Sim(mxjob()), lambda sim: None


def row_2():
    return Sim(mxjob(replicas={"Worker": -1})), lambda sim: None


def row_3():
    sim = Sim(mxjob())
    sim.sync()
    return sim, lambda s: s.run()


def end(sim: Sim, name: str, code: int = 0) -> None:
    """A pod ends with `code` now, as the kubelet reports it (finishedAt starts the success grace)."""
    sim.set_phase(name, "Succeeded" if code == 0 else "Failed", exit_code=code)


def waiting_for_the_others() -> Sim:
    sim = running()
    end(sim, "mx-scheduler-0")
    sim.sync()
    return sim


def row_4():
    def all_end(s: Sim) -> None:
        end(s, "mx-scheduler-0")
        end(s, "mx-server-0", 143)
        end(s, "mx-worker-0")
        end(s, "mx-worker-1")
    return running(), all_end


def row_5():
    return running(), lambda s: s.set_phase("mx-server-0", "Failed", exit_code=1)


def row_6():
    return running(exitcode_job()), lambda s: s.set_phase("mx-worker-0", "Failed", exit_code=127)


def workers_job(**spec) -> dict:
    """Independent workers, no Scheduler: a lost pod restarts alone."""
    return mxjob(replicas={"Worker": {"replicas": 2, "restartPolicy": "ExitCode"}}, **spec)


def row_7():
    return running(workers_job()), lambda s: s.set_phase("mx-worker-1", "Failed", exit_code=138)


def row_8():
    sim = running(workers_job())
    sim.set_phase("mx-worker-1", "Failed", exit_code=130)
    sim.sync()  # the restart is recorded in a child
    sim.sync()  # which is seen: the failed pod is deleted
    sim.sync()  # and created again
    return sim, lambda s: s.run("mx-worker-1")


def row_9():
    job = mxjob(replicas={"Worker": {"replicas": 1, "restartPolicy": "Always"}})
    return running(job), lambda s: s.set_phase("mx-worker-0", "Failed")


def row_10():
    job = mxjob(replicas={"Scheduler": 1, "Server": 1,
                          "Worker": {"replicas": 1, "restartPolicy": "OnFailure"}},
                runPolicy={"backoffLimit": 0})
    return running(job), lambda s: s.set_phase("mx-worker-0", "Running", restarts=1)


def row_11():
    return running(mxjob(runPolicy={"activeDeadlineSeconds": 30})), lambda s: s.tick(30)


def row_12():
    return running(), lambda s: s.edit({"runPolicy": {"suspend": True}})


def row_13():
    sim = running()
    sim.edit({"runPolicy": {"suspend": True}})
    sim.sync()
    return sim, lambda s: s.edit({"runPolicy": {"suspend": False}})


def row_14():
    sim = running()
    for name in list(sim.pods):
        end(sim, name)
    sim.sync()
    sim.sync()  # the outcome record is seen

    def vanish(s: Sim) -> None:
        for name in list(s.pods):
            s.gc(name)
        s.tick(3600)
    return sim, vanish


def row_15():
    return running(), lambda s: s.edit({"jobMode": "MXRun"})


def row_16():
    return running(), lambda s: end(s, "mx-scheduler-0")


def row_17():
    return waiting_for_the_others(), lambda s: end(s, "mx-worker-1", 1)


def row_18():
    return waiting_for_the_others(), lambda s: s.tick(30)


def row_19():
    sim = running()
    before = sim.parent["status"]
    for name in list(sim.pods):
        end(sim, name)
    sim.sync()
    sim.sync()  # the outcome record is seen

    def stale(s: Sim) -> None:
        s.set_parent_status(before)
    return sim, stale


def row_20():
    sim = running()
    before = sim.parent["status"]
    end(sim, "mx-worker-1", 1)  # restartPolicy Never: the job fails
    sim.sync()
    sim.sync()  # the outcome record is seen

    def stale_and_edited(s: Sim) -> None:
        s.set_parent_status(before)
        s.edit({"mxReplicaSpecs": {**s.parent["spec"]["mxReplicaSpecs"], "Worker": {
            **s.parent["spec"]["mxReplicaSpecs"]["Worker"], "replicas": 3}}})
    return sim, stale_and_edited


def row_21():
    return running(exitcode_job()), lambda s: s.set_phase("mx-worker-1", "Failed", exit_code=137)


def row_22():
    sim = running(exitcode_job())
    sim.set_phase("mx-worker-1", "Failed", exit_code=137)
    sim.sync()  # attempt 1 is recorded
    return sim, lambda s: None  # the next sync sees the record: the old pods are deleted


def row_23():
    sim = row_22()[0]
    sim.sync()
    sim.sync()  # attempt 1's pods are created
    return sim, lambda s: s.run()


def row_24():
    return (running(exitcode_job(runPolicy={"failurePolicy": {"maxRestarts": 0}})),
            lambda s: s.set_phase("mx-scheduler-0", "Failed", exit_code=137))


def row_25():
    job = mxjob(replicas={"Scheduler": 1, "Server": 1, "Worker": {"replicas": 1, "restartPolicy": "OnFailure"}},
                runPolicy={"failurePolicy": {"rules": [{"action": "RestartPod"}]}})
    return running(job), lambda s: s.set_phase("mx-worker-0", "Running", restarts=1, last_exit_code=137)


def stall_job(action: str) -> Sim:
    """A running job with a stallPolicy: its first sync makes the reporting children, the next its pods."""
    sim = Sim(exitcode_job(runPolicy={"stallPolicy": {"timeoutSeconds": 60, "action": action}}))
    sim.sync()
    sim.sync()
    sim.run()
    sim.sync()
    return sim


def row_26():
    return stall_job("Report"), lambda s: s.tick(60)


def _said(action: str) -> Sim:
    sim = stall_job(action)
    sim.tick(60)
    sim.sync()
    return sim


def row_27():
    return _said("RestartJob"), lambda s: s.tick(10)


def row_28():
    return _said("FailJob"), lambda s: s.tick(10)


def row_29():
    def kueue_stops_the_group(s: Sim) -> None:
        for name in list(s.pods):
            status = {**s.pods[name]["status"], "conditions": [
                {"type": "TerminationTarget", "status": "True", "reason": "WorkloadEvictedDueToPreempted",
                 "message": "Preempted to accommodate a workload (UID: 7f3c) due to prioritization in the ClusterQueue"}]}
            s.write_status("v1", "Pod", name, status)
            s.terminating(name)
    return running(mxjob(runPolicy={"backoffLimit": 0})), kueue_stops_the_group


SCENARIOS: dict[int, Callable] = {int(name[4:]): f for name, f in globals().items()
                                  if name.startswith("row_")}


def test_every_row_has_a_scenario_and_every_scenario_a_row():
    assert sorted(table_rows()) == sorted(SCENARIOS)


@pytest.mark.parametrize("row", sorted(table_rows()), ids=lambda n: f"row-{n}")
def test_transition(row):
    frm, to, ctype, status, reason = table_rows()[row]
    sim, observe = SCENARIOS[row]()
    assert (sim.state() or "(new)") == frm
    created = len(sim.created)
    observe(sim)
    sim.sync()
    assert sim.state() == to
    cond = sim.condition(ctype)
    assert (cond["status"], cond["reason"]) == (status, reason)
    if frm in ("Succeeded", "Failed"):
        assert len(sim.created) == created
