"""Hypothesis strategies for ChainerJob property tests: jobs with rich templates, master Job states, and
observations through the ChainerJob simulator."""

from __future__ import annotations

from hypothesis import strategies as st

from helpers.chainersim import JOB_KEY, STATEFULSET_KEY, ChainerSim, chainerjob

MASTER_STATES = [None, "active", "Complete", "Failed", "deleted-after-finish"]


def rich_template(main: str) -> dict:
    """Every part of a template the hook reads or adds to, so that an edit can hit each of them."""
    return {"metadata": {"labels": {"team": "vision"}, "annotations": {"note": "x"}},
            "spec": {"containers": [{"name": main, "image": "chainer/chainermn:7.8.1", "command": ["python3", "t.py"],
                                     "env": [{"name": "EPOCHS", "value": "3"}],
                                     "ports": [{"name": "metrics", "containerPort": 8080}],
                                     "resources": {"limits": {"nvidia.com/gpu": 1, "cpu": "500m"}},
                                     "volumeMounts": [{"name": "data", "mountPath": "/data"}]}],
                     "initContainers": [{"name": "fetch", "image": "busybox", "command": ["true"]}],
                     "volumes": [{"name": "data", "emptyDir": {}}]}}


jobs = st.builds(
    lambda sets, slots: chainerjob(
        workers={name: {"replicas": n, "template": rich_template("chainer"), "mpiConfig": {"slots": slots}}
                 for name, n in sets.items()} or None,
        master={"template": rich_template("chainer"), "backoffLimit": 2, "activeDeadlineSeconds": 600}),
    st.dictionaries(st.sampled_from(["a", "b"]), st.integers(0, 2), max_size=2), st.integers(1, 4))


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
