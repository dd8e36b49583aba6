"""Statuses once found not to be a fixed point, each as a small explicit case.

The fuzz properties (tests/mxjob/test_fuzz.py) find such cases only when Hypothesis happens to
draw them; these cases fail by name. Each one syncs a request, feeds the status answered back as
the parent's status with every child unchanged (what a sync sees when the parent write is observed
before the children written with it), and asks for byte-identical status.
"""
from __future__ import annotations

import copy
import json
from datetime import datetime

from helpers.mcsim import Sim, mxjob

from hooks.mxjob.sync import sync_mxjob


def read_back(request: dict, now: datetime) -> tuple[dict, dict]:
    """The status answered for `request`, and the one answered when it is read back as the parent's."""
    first = sync_mxjob(request, now=now)["status"]
    again = copy.deepcopy(request)
    again["parent"]["status"] = copy.deepcopy(first)
    return first, sync_mxjob(again, now=now)["status"]


def test_a_job_failed_at_its_backoff_limit_by_a_whole_job_restart_keeps_its_restart_count():
    # Found by test_an_edit_of_spec_or_status_never_breaks_the_sync: restartCount 1, then 2.
    # With a Scheduler the job is distributed, so a worker lost without an exit code (retryable
    # under ExitCode) restarts the whole job, which backoffLimit 0 does not allow: the job fails
    # at 1 restart, the whole-job restart it was refused (the lost pod's own container restarts
    # are in it). The terminal status read back must say 1 again, not count the pod's 2 restarts.
    sim = Sim(mxjob(replicas={"Scheduler": 1, "Server": 1, "Worker": {"replicas": 1, "restartPolicy": "ExitCode"}},
                    runPolicy={"backoffLimit": 0}))
    sim.sync()
    sim.set_phase("mx-worker-0", "Failed", restarts=2)
    sim.tick(10)

    first, again = read_back(sim.request(), sim.now)

    failed = next(c for c in first["conditions"] if c["type"] == "Failed")
    # The message names the lost pod and how it ended (issue 40: it once said only the count).
    assert failed["message"] == ("MXJob ns/mx has reached the specified backoff limit: 1 restarts, backoffLimit 0; "
                                 "pod mx-worker-0 was lost (no exit code).")
    assert first["restartCount"] == 1
    assert json.dumps(again, sort_keys=True) == json.dumps(first, sort_keys=True)


def test_the_same_job_reads_the_same_count_from_its_outcome_record_and_from_its_status():
    # After the failing sync, one sync may see the terminal parent before the outcome record
    # and the next one the record: both must write the count the record holds, or the status
    # flaps (1, 2, 1) while the job is long finished.
    sim = Sim(mxjob(replicas={"Scheduler": 1, "Server": 1, "Worker": {"replicas": 1, "restartPolicy": "ExitCode"}},
                    runPolicy={"backoffLimit": 0}))
    sim.sync()
    sim.set_phase("mx-worker-0", "Failed", restarts=2)
    sim.tick(10)
    before_record = sim.request()
    sim.sync()
    assert "mx-outcome" in sim.config_maps
    before_record["parent"]["status"] = copy.deepcopy(sim.status)

    from_status = sync_mxjob(before_record, now=sim.now)["status"]
    from_record = sync_mxjob(sim.request(), now=sim.now)["status"]

    assert from_record["restartCount"] == 1
    assert from_status["restartCount"] == from_record["restartCount"]


def test_a_finished_job_whose_kept_pod_restarts_in_place_counts_no_more_restarts():
    # The same flap from the other side: cleanPodPolicy None keeps a worker running after the
    # job failed; its restarts in place are not the job's (the outcome record holds 0, an
    # absent restartCount), so the terminal status read back must not count them either.
    sim = Sim(mxjob(replicas={"Worker": {"replicas": 2, "restartPolicy": "OnFailure"}},
                    runPolicy={"cleanPodPolicy": "None", "failurePolicy": {"rules": [{"action": "FailJob"}]}}))
    sim.sync()
    sim.run()
    sim.set_phase("mx-worker-0", "Failed", exit_code=1)
    sim.tick(5)
    finished = sync_mxjob(sim.request(), now=sim.now)["status"]
    assert any(c["type"] == "Failed" and c["status"] == "True" for c in finished["conditions"])
    assert "restartCount" not in finished

    sim.set_phase("mx-worker-1", "Running", restarts=3)
    later = sim.request()
    later["parent"]["status"] = copy.deepcopy(finished)

    assert "restartCount" not in sync_mxjob(later, now=sim.now)["status"]
