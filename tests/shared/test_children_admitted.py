"""Every child the hooks answer is admitted by the real API server, written as Metacontroller writes it.

For every golden request, every shipped MXJob and ChainerJob example (its first sync, and a later
sync with its children observed and running, also under each gang component), and a generated
sample of valid jobs in observed states, the pure sync's answer is written to the control plane
by tests/helpers/metacontroller_writes.py: in Metacontroller's order, as its ServiceAccount, with
the last-applied annotation, creates for new children and the three-way-merge update for observed
InPlace ones. Every write must be accepted, and the Job and StatefulSet controllers must then be
able to make every pod. A refusal is a bug in the hooks (or in what we ship for Metacontroller).
"""
from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path

import pytest
from helpers import metacontroller_writes as mc
from helpers import yamlio
from helpers.chainer_strategies import jobs as chainerjobs
from helpers.chainersim import JOB_KEY, STATEFULSET_KEY, ChainerSim
from helpers.chainersim import gang_controller as chainer_gang_controller
from helpers.fuzz import SAMPLE
from helpers.go_apply_merge import LAST_APPLIED
from helpers.mcsim import MXJOB_CONTROLLER, T0, Sim, gang_controller, mxjob
from helpers.native_gang import golden_names
from helpers.requests import mxjob_sync_request
from helpers.strategies import jobs, observed_sim, pod_states, run_policies, with_rich_templates
from hypothesis import given
from hypothesis import strategies as st

from hooks.kinds import SYNC
from localcluster.controlplane.processes import ControlPlane

pytestmark = pytest.mark.apiserver

TESTS = Path(__file__).resolve().parents[1]
GOLDEN = TESTS / "golden"
EXAMPLES = TESTS.parent / "examples"
VOLCANO = "scheduling.volcano.sh/v1beta1"
COSCHEDULING = "scheduling.x-k8s.io/v1alpha1"


@pytest.fixture(scope="module")
def plane(control_plane: ControlPlane) -> ControlPlane:
    mc.install(control_plane)
    return control_plane


@pytest.fixture
def fresh(plane: ControlPlane) -> Iterator[str]:
    name = mc.new_namespace(plane)
    yield name
    mc.delete_namespace(plane, name)


# --- the golden requests -------------------------------------------------------------------------


def golden(name: str) -> tuple[dict, datetime]:
    request = yamlio.load((GOLDEN / name / "request.yaml").read_text())
    return request, datetime.fromisoformat(request.pop("now"))


# Those under Kubernetes' own gang scheduling need its feature gate: tests/localcluster/test_gang_native.py.
@pytest.mark.parametrize("name", golden_names(generic_workload=False))
def test_every_child_of_a_golden_answer_is_admitted(plane, fresh, name):
    request, now = golden(name)
    assert mc.admitted(plane, fresh, request, now) == []


# --- the shipped examples ------------------------------------------------------------------------


def examples() -> dict[str, dict]:
    found = {}
    for path in sorted(EXAMPLES.rglob("*.yaml")):
        for doc in yamlio.load_all(path.read_text()):
            if isinstance(doc, dict) and doc.get("kind") in ("MXJob", "ChainerJob"):
                doc["metadata"].update(namespace="default", uid="uid-example", generation=1)
                found[str(path.relative_to(EXAMPLES)).removesuffix(".yaml")] = doc
    return found


EXAMPLE_JOBS = examples()


def first_sync(parent: dict, gang: str | None) -> Sim | ChainerSim:
    if parent["kind"] == "MXJob":
        return Sim(parent, controller=gang_controller(gang) if gang else None)
    return ChainerSim(parent, controller=chainer_gang_controller(gang) if gang else None)


def running(parent: dict, gang: str | None) -> Sim | ChainerSim:
    """Its children made and running: MXJob pods Running; ChainerJob workers ready, master active."""
    sim = first_sync(parent, gang)
    sim.sync()
    if gang:  # the PodGroup came first; the pods come once it is observed
        sim.tick(1)
        sim.sync()
    if "progress" in (parent["spec"].get("runPolicy") or {}):  # so did the reporting ServiceAccount
        sim.tick(1)
        sim.sync()
    if isinstance(sim, Sim):
        sim.tick(5)
        sim.run()
        return sim
    sim.tick(20)
    sim.all_ready()
    sim.sync()
    sim.tick(5)
    for job in sim.names(JOB_KEY):
        sim.master(job, active=1)
    return sim


SCENES: dict[str, Callable[[dict, str | None], Sim | ChainerSim]] = {"first-sync": first_sync, "running": running}
EXAMPLE_CASES = [pytest.param(example, scene, gang, id=f"{example}-{scene}{'-' + label if label else ''}")
                 for example in EXAMPLE_JOBS
                 for scene, gang, label in (("first-sync", None, ""), ("running", None, ""),
                                            ("running", VOLCANO, "volcano"), ("running", COSCHEDULING, "scheduler-plugins"))]


def test_every_example_is_found():
    assert sorted(EXAMPLE_JOBS) == [
        "byteps", "chainerjob/chainerjob-gpu-two-sets", "chainerjob/chainerjob-mn", "chainerjob/chainerjob-single",
        "digits/mxjob", "dist-cpu-train", "dist-gpu-train", "local/chainer-mn-digits", "local/dist-train-digits",
        "local/dist-train-digits-resume",
        "single-worker", "smoke", "tune"]


@pytest.mark.parametrize(("example", "scene", "gang"), EXAMPLE_CASES)
def test_every_child_of_an_example_is_admitted(plane, fresh, example, scene, gang):
    sim = SCENES[scene](EXAMPLE_JOBS[example], gang)
    request = sim.request()
    if scene == "running":  # the scene is what it says: children observed, and pods where the kind has them
        assert any(request["children"].values())
        if isinstance(sim, ChainerSim) and sim.children[STATEFULSET_KEY]:
            assert sim.names(JOB_KEY)
    assert mc.admitted(plane, fresh, request, sim.now) == []


# --- the largest job ------------------------------------------------------------------------------


def largest_mxjob(name: str, namespace: str) -> tuple[dict, dict, int]:
    """The request and answer of the MXJob with the most workers the hook accepts (its pods' expanded
    MX_CONFIG just fits Linux's limit), and that count."""
    def attempt(workers: int) -> tuple[dict, dict, bool]:
        parent = mxjob(name, replicas={"Scheduler": 1, "Server": 1, "Worker": workers})
        parent["metadata"]["namespace"] = namespace
        request = mxjob_sync_request(parent) | {"controller": yamlio.load(MXJOB_CONTROLLER.read_text())}
        answer = SYNC["MXJob"](request, now=T0)
        return request, answer, not any(c.get("reason") == "MXJobFailedValidation" for c in answer["status"]["conditions"])

    low, high = 1, 10_000
    while low < high:
        middle = (low + high + 1) // 2
        low, high = (middle, high) if attempt(middle)[2] else (low, middle - 1)
    request, answer, _ = attempt(low)
    return request, answer, low


def test_the_cluster_map_of_the_largest_mxjob_fits_the_servers_limits(plane, fresh):
    """Its ConfigMap holds the whole cluster map twice (data, and Metacontroller's last-applied
    annotation: the server allows 256 KiB of annotations); every pod and Service has the shape of
    the first of its type, so those are written."""
    request, answer, workers = largest_mxjob("dist-train-digits", fresh)
    assert 2_000 < workers < 4_000
    answer["children"] = [c for c in answer["children"] if c["kind"] == "ConfigMap" or c["metadata"]["name"].endswith("-0")]
    writes = mc.write_sync(plane, fresh, request, answer)
    assert [str(w) for w in writes if not w.verdict.accepted] == []
    assert sorted(f"{w.obj['kind']} {w.obj['metadata']['name']}" for w in writes) == [
        "ConfigMap dist-train-digits-cluster",
        "Pod dist-train-digits-scheduler-0", "Pod dist-train-digits-server-0", "Pod dist-train-digits-worker-0",
        "Service dist-train-digits-scheduler-0", "Service dist-train-digits-server-0", "Service dist-train-digits-worker-0"]
    config_map = next(w.obj for w in writes if w.obj["kind"] == "ConfigMap")
    assert len(config_map["metadata"]["annotations"][LAST_APPLIED]) > 128 * 1024


# --- a generated sample --------------------------------------------------------------------------


@SAMPLE
@given(jobs.map(with_rich_templates), run_policies, pod_states, st.integers(0, 200))
def test_every_child_of_a_generated_mxjob_in_any_observed_state_is_admitted(plane, parent, policy, states, elapsed):
    sim = observed_sim(parent, policy, states, elapsed)
    namespace = mc.new_namespace(plane, "gen")
    try:
        assert mc.admitted(plane, namespace, sim.request(), sim.now) == []
    finally:
        mc.delete_namespace(plane, namespace)


@SAMPLE
@given(chainerjobs, st.sampled_from([None, VOLCANO, COSCHEDULING]))
def test_every_child_of_a_generated_running_chainerjob_is_admitted(plane, parent, gang):
    sim = running(parent, gang)
    namespace = mc.new_namespace(plane, "gen")
    try:
        assert mc.admitted(plane, namespace, sim.request(), sim.now) == []
    finally:
        mc.delete_namespace(plane, namespace)
