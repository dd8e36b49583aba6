"""Hypothesis strategies for MXJob property tests: jobs, run policies, pod states, and observations through the Metacontroller simulator."""

from __future__ import annotations

from hypothesis import strategies as st
from mcsim import Sim, mxjob

PHASES = ["Pending", "Running", "Succeeded", "Failed"]
EXIT_CODES = [None, 0, 1, 2, 137, 138, 143]
jobs = st.one_of(
    st.builds(lambda s, w, pol, sp: mxjob(replicas={"Scheduler": 1, "Server": s,
                                                     "Worker": {"replicas": w, "restartPolicy": pol}},
                                           successPolicy=sp),
              st.integers(1, 3), st.integers(1, 4),
              st.sampled_from(["Never", "ExitCode", "OnFailure"]), st.sampled_from(["", "AllWorkers"])),
    st.builds(lambda w: mxjob(replicas={"Worker": w}), st.integers(1, 4)),
    st.builds(lambda n: mxjob(jobMode="MXTune", replicas={"TunerTracker": 1, "TunerServer": n,
                                                          "Tuner": 1}), st.integers(1, 3)),
)
pod_states = st.lists(st.tuples(st.sampled_from(PHASES), st.sampled_from(EXIT_CODES),
                                st.integers(0, 2), st.booleans()), min_size=12, max_size=12)
run_policies = st.fixed_dictionaries({}, optional={
    "backoffLimit": st.integers(0, 3), "cleanPodPolicy": st.sampled_from(["All", "Running", "None"]),
    "activeDeadlineSeconds": st.integers(1, 120), "ttlSecondsAfterFinished": st.integers(0, 60)})


def observed_sim(parent: dict, policy: dict, states: list, elapsed: int) -> Sim:
    """A job after its first sync, its pods in the generated states, some time later."""
    parent["spec"]["runPolicy"] = policy
    sim = Sim(parent)
    sim.sync()
    for name, (phase, code, restarts, present) in zip(sorted(sim.pods), states, strict=False):
        if not present:
            sim.gc(name)
            continue
        sim.set_phase(name, phase, exit_code=code if phase in ("Succeeded", "Failed") else None,
                      restarts=restarts)
    sim.tick(elapsed)
    return sim


def with_rich_templates(parent: dict) -> dict:
    """Every part of a template the hook reads present, so that an edit can hit each of them."""
    for spec in parent["spec"]["mxReplicaSpecs"].values():
        template = spec["template"]
        template["metadata"] = {"labels": {"team": "vision"}, "annotations": {"note": "x"}}
        template["spec"]["containers"][0].update(
            env=[{"name": "EPOCHS", "value": "3"},
                 {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}],
            ports=[{"name": "metrics", "containerPort": 8080}])
        template["spec"]["containers"].append({"name": "sidecar", "image": "busybox",
                                               "env": [{"name": "A", "value": "1"}]})
    return parent
