"""Hypothesis strategies for ChainerJob property tests: master Job states and observations through the ChainerJob simulator."""

from __future__ import annotations

from chainersim import JOB_KEY, STATEFULSET_KEY, ChainerSim

MASTER_STATES = [None, "active", "Complete", "Failed", "deleted-after-finish"]


def observed_sim(parent: dict, obs: tuple) -> ChainerSim:
    """A job after its first syncs, its StatefulSets and master in the generated states."""
    ready, master, elapsed = obs
    sim = ChainerSim(parent)
    sim.sync()
    sim.all_ready()
    sim.sync()
    for name, count in zip(sim.names(STATEFULSET_KEY), ready, strict=False):
        if count is not None:
            sim.ready(name, count)
    if sim.names(JOB_KEY) and master is not None:
        job = sim.names(JOB_KEY)[0]
        if master == "active":
            sim.master(job, active=1)
        else:
            outcome = "Failed" if master == "Failed" else "Complete"
            sim.master(job, succeeded=int(outcome == "Complete"), finished=(outcome, "Reason", "a message"))
            if master == "deleted-after-finish":
                sim.sync()
                sim.delete(JOB_KEY, job)
    sim.tick(elapsed)
    return sim
