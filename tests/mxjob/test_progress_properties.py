"""Properties of stall detection over generated report schedules, with stale reads of the progress
ConfigMap: every sync is a fixed point (helpers/mcsim.py checks it on every step); no restart or
failure while every reporter has reported within the timeout, whatever older copy of the ConfigMap
a sync is handed (a cache lags the API server by less than hooks.mxjob.stall.CONFIRM_SECONDS);
and a stall is said only of reporters silent but for a report the cache may not hold yet."""
from __future__ import annotations

import copy
import json
from datetime import datetime, timedelta

from helpers.mcsim import Sim, mxjob
from hypothesis import given, settings
from hypothesis import strategies as st

from hooks.mxjob.stall import CONFIRM_SECONDS
from hooks.shared.conditions import rfc3339

SETTINGS = settings(max_examples=120, deadline=None, derandomize=True)
PROGRESS = "mx-progress"
REPORTERS = ("worker-0", "worker-1")

# (seconds to wait, reporter index or None for no report, whether the sync reads a stale ConfigMap)
events = st.lists(st.tuples(st.integers(0, 90), st.sampled_from([0, 1, None]), st.booleans()),
                  min_size=1, max_size=12)


def started(timeout: int, action: str) -> Sim:
    every = {"restartPolicy": "ExitCode"}
    sim = Sim(mxjob(replicas={"Scheduler": {"replicas": 1, **every}, "Server": {"replicas": 1, **every},
                              "Worker": {"replicas": 2, **every}},
                    runPolicy={"stallPolicy": {"timeoutSeconds": timeout, "action": action},
                               "progress": {"reporters": "AllReplicas"}}))
    for _ in range(4):
        sim.sync()
    sim.run()
    sim.sync()
    sim.sync()
    assert sim.state() == "Running"
    return sim


@SETTINGS
@given(st.integers(30, 120), st.sampled_from(["Report", "RestartJob", "FailJob"]), events)
def test_no_stall_while_every_reporter_reported_within_the_timeout(timeout, action, schedule):
    sim = started(timeout, action)
    running_since = sim.now
    made: dict[str, list] = {}  # the truth: when each reporter reported
    snapshots: list[dict] = [{}]  # every version of the ConfigMap's data, oldest first
    written = sim.now  # when the newest version was written
    step = 0
    for wait, who, stale in schedule:
        sim.tick(wait)
        if who is not None:
            step += 1
            name = REPORTERS[who]
            entry = {"attempt": 0, "step": step, "total": 100, "time": rfc3339(sim.now)}
            made.setdefault(name, []).append(sim.now)
            sim.change("v1", "ConfigMap", PROGRESS,
                       lambda cm, n=name, e=entry: cm.setdefault("data", {}).update({n: json.dumps(e)}))
            snapshots.append(copy.deepcopy(sim.config_maps[PROGRESS].get("data") or {}))
            written = sim.now
        fresh = snapshots[-1]
        if stale and len(snapshots) > 1 and sim.now < written + timedelta(seconds=CONFIRM_SECONDS):
            # The informer hands this sync an older copy of the ConfigMap.
            sim.change("v1", "ConfigMap", PROGRESS, lambda cm: cm.update(data=copy.deepcopy(snapshots[-2])))
        sim.sync()
        sim.change("v1", "ConfigMap", PROGRESS, lambda cm, d=fresh: cm.update(data=copy.deepcopy(d)))
        # The truth: silent past the timeout, counted from Running or the reporter's last report.
        # A stall may be said, and acted on, only when it is true of the reports made at least
        # CONFIRM_SECONDS ago: only a newer one can be missing from the hook's cache.
        cutoff = sim.now - timedelta(seconds=CONFIRM_SECONDS)
        said = sim.state() in ("Failed", "Restarting") or sim.condition("Running")["reason"] == "MXJobStalled"
        if said:
            assert silent(made, running_since, sim.now, timeout, cutoff), (sim.status, made)
        if sim.state() in ("Failed", "Restarting"):
            return
        if not stale:
            assert said or not silent(made, running_since, sim.now, timeout, sim.now), "a stall was missed"


def silent(made: dict, since: datetime, now: datetime, timeout: int, cutoff: datetime) -> bool:
    """The truth: some reporter (or the job, when none has reported) silent past the timeout,
    counted from Running or from its last report made by `cutoff`."""
    last = [max(t for t in times if t <= cutoff) for times in made.values() if any(t <= cutoff for t in times)]
    clocks = [max(since, t) for t in last] or [since]
    return any(now >= c + timedelta(seconds=timeout) for c in clocks)
