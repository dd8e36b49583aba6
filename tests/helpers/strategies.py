"""Hypothesis strategies for MXJob property tests: jobs, run policies, pod states, and observations through the Metacontroller simulator."""

from __future__ import annotations

import copy

from hypothesis import strategies as st

from helpers.mcsim import Sim, mxjob

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
    "activeDeadlineSeconds": st.integers(1, 120), "ttlSecondsAfterFinished": st.integers(0, 60),
    # Progress reporting (docs/progress.md): its children, the pods' wait for their ServiceAccount, stalls.
    "stallPolicy": st.fixed_dictionaries({"timeoutSeconds": st.integers(1, 120),
                                          "action": st.sampled_from(["Report", "RestartJob", "FailJob"])})})


def observed_sim(parent: dict, policy: dict, states: list, elapsed: int) -> Sim:
    """A job after its first sync, its pods in the generated states, some time later."""
    parent["spec"]["runPolicy"] = policy
    sim = Sim(parent)
    sim.sync()
    if not sim.pods:
        sim.sync()  # runPolicy.stallPolicy: pods wait for the job's ServiceAccount (docs/progress.md)
    for name, (phase, code, restarts, present) in zip(sorted(sim.pods), states, strict=False):
        if not present:
            sim.gc(name)
            continue
        sim.set_phase(name, phase, exit_code=code if phase in ("Succeeded", "Failed") else None,
                      restarts=restarts)
    sim.tick(elapsed)
    return sim


# --- issue 29: the memory records (tests/shared/test_memory_properties.py) -----------------------------------

OUTCOME = "mx-outcome"  # the outcome record of mxjob()'s job "mx"


def run_to_outcome(sim: Sim) -> list[dict]:
    """Sync a job until its outcome record exists, and return every status written on the way.

    After a few syncs every pod still unfinished is made to succeed, so each run ends; the statuses
    are what a stale read can show later (the parent of one, two, ... writes earlier).
    """
    written = [copy.deepcopy(sim.status)]
    for step in range(16):
        if OUTCOME in sim.config_maps:
            return written
        if step >= 4:
            for name, pod in sim.pods.items():
                if (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed"):
                    sim.set_phase(name, "Succeeded", exit_code=0)
        sim.tick(40)
        sim.sync()
        written.append(copy.deepcopy(sim.status))
    raise AssertionError(f"no outcome record after 16 syncs: {sim.status}")


finished_runs = st.builds(lambda sim: (sim, run_to_outcome(sim)),
                          st.builds(observed_sim, jobs, run_policies, pod_states, st.integers(0, 200)))

# MXTune jobs, started: every pod Running. The layout guard must see the old layout in what the
# request still shows of it, whatever is terminating or not observed (hooks.mxjob.sync).
MXTUNE_TYPES = ("TunerTracker", "TunerServer", "Tuner")


def started_mxtune(servers: int) -> Sim:
    sim = Sim(mxjob(jobMode="MXTune", replicas={"TunerTracker": 1, "TunerServer": servers, "Tuner": 1}))
    sim.sync()
    sim.run()
    sim.sync()
    return sim


mxtune_edits = st.fixed_dictionaries({
    "servers": st.integers(1, 4),  # the new TunerServer count
    "port": st.sampled_from([None, None, 9999]),  # a new mxjob-port for one type
    "port_type": st.sampled_from(MXTUNE_TYPES),
})
mxtune_views = st.fixed_dictionaries({
    "terminating": st.lists(st.booleans(), min_size=6, max_size=6),  # per pod, in name order
    "config_map": st.sampled_from(["observed", "deleted", "terminating"]),
    "annotated": st.booleans(),  # False: pods from before the replica-layout annotation
})


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
