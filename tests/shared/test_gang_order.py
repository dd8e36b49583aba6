"""PodGroup before pods (hooks.shared.gang.new_pods_wait): under a gang, what makes pods is created
only once the job's PodGroup is observed, because Metacontroller writes `scheduling.*` children
after every other child; what exists is never dropped; the waiting status is a fixed point."""
from __future__ import annotations

import copy
import json

import pytest
from helpers.chainersim import ChainerSim, example
from helpers.chainersim import gang_controller as chainer_controller
from helpers.mcsim import Sim, gang_controller, mxjob

from hooks.chainerjob.sync import sync_chainerjob
from hooks.mxjob.sync import sync_mxjob
from hooks.shared.gang import COSCHEDULING_API, KUBERNETES_API, VOLCANO_API, new_pods_wait

GROUP = {"apiVersion": VOLCANO_API, "kind": "PodGroup", "metadata": {"name": "g", "namespace": "ns"}}


def drop_podgroups(sim) -> None:
    """Someone deletes the job's PodGroup (every stored PodGroup of the job's namespace)."""
    for name in list(sim.objects(VOLCANO_API, "PodGroup")):
        sim.remove(VOLCANO_API, "PodGroup", name)
    assert sim.objects(VOLCANO_API, "PodGroup") == {}


def kinds(answer: dict) -> list[str]:
    return sorted({c["kind"] for c in answer["children"]})


def dumps(value) -> str:
    return json.dumps(value, sort_keys=True)


@pytest.mark.parametrize(("podgroup", "observed", "waits"), [
    pytest.param(None, {}, False, id="no-podgroup-wanted"),
    pytest.param(GROUP, {}, True, id="not-observed"),
    pytest.param(GROUP, {"g": {"metadata": {"name": "g"}}}, False, id="observed"),
    pytest.param(GROUP, {"g": {"metadata": {"name": "g", "deletionTimestamp": "2026-11-21T10:00:00Z"}}},
                 True, id="being-deleted"),
    pytest.param(GROUP, {"other": {"metadata": {"name": "other"}}}, True, id="another-group"),
])
def test_new_pods_wait(podgroup, observed, waits):
    assert new_pods_wait(podgroup, observed) is waits


# --- MXJob -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("api_version", [VOLCANO_API, COSCHEDULING_API, KUBERNETES_API])
def test_mxjob_first_sync_answers_the_podgroup_and_no_pod(api_version):
    sim = Sim(mxjob(), controller=gang_controller(api_version))
    first = sim.sync()
    assert kinds(first) == ["ConfigMap", "PodGroup", "Service"]
    [created] = first["status"]["conditions"]
    assert created["type"] == "Created" and created["status"] == "True"
    assert created["message"].startswith("MXJob ns/mx: its pods are created once its PodGroup ns/mx "
                                         f"({api_version}) exists")
    second = sim.sync()
    assert kinds(second) == ["ConfigMap", "Pod", "PodGroup", "Service"]
    assert len([c for c in second["children"] if c["kind"] == "Pod"]) == 4
    assert sim.condition("Created")["message"] == "MXJob ns/mx is created."


@pytest.mark.parametrize(("api_version", "hint"), [
    pytest.param(VOLCANO_API, "check that the PodGroup CRD is installed", id="volcano"),
    pytest.param(KUBERNETES_API, "check that the API server serves it (kube-apiserver --feature-gates="
                 "GenericWorkload=true --runtime-config=scheduling.k8s.io/v1beta1=true)", id="kubernetes"),
])
def test_the_wait_message_says_what_makes_the_podgroup_api_exist(api_version, hint):
    [created] = Sim(mxjob(), controller=gang_controller(api_version)).sync()["status"]["conditions"]
    assert hint in created["message"]


def test_mxjob_waiting_status_is_a_fixed_point():
    sim = Sim(mxjob(), controller=gang_controller(VOLCANO_API))
    request = sim.request()
    first = sync_mxjob(request, now=sim.now)
    # The PodGroup is not created yet (Metacontroller writes it last); the status was written.
    request["parent"]["status"] = first["status"]
    sim.tick(30)
    again = sync_mxjob(request, now=sim.now)
    assert dumps(again) == dumps(first)


def test_mxjob_pods_that_exist_are_kept_when_the_podgroup_goes_and_only_new_ones_wait():
    sim = Sim(mxjob(), controller=gang_controller(VOLCANO_API))
    sim.sync()
    sim.sync()
    sim.run()
    sim.sync()
    assert sim.state() == "Running"
    drop_podgroups(sim)  # someone deletes the PodGroup while the job runs
    sim.tick(10)
    answer = sim.sync()
    assert sorted(c["metadata"]["name"] for c in answer["children"] if c["kind"] == "Pod") == sorted(sim.pods)
    assert len(sim.pods) == 4 and not [d for d in sim.deleted if d.startswith("Pod/")]
    assert "PodGroup" in kinds(answer)  # created again
    # Nothing waited, so the status does not say anything waits.
    assert sim.condition("Created")["message"] == "MXJob ns/mx is created."


def test_mxjob_pod_to_recreate_waits_for_a_missing_podgroup():
    parent = mxjob(replicas={"Worker": {"replicas": 2, "restartPolicy": "ExitCode"}})
    sim = Sim(parent, controller=gang_controller(VOLCANO_API))
    sim.sync()
    sim.sync()
    sim.run()
    sim.sync()
    sim.set_phase("mx-worker-1", "Failed", exit_code=137)
    sim.sync()  # the restart is recorded (hooks.shared.memory) while the failed pod stays
    assert "mx-worker-1" in sim.pods
    sim.sync()  # the record is observed: the failed pod is deleted for recreation
    assert "mx-worker-1" not in sim.pods
    drop_podgroups(sim)
    answer = sim.sync()
    assert [c["metadata"]["name"] for c in answer["children"] if c["kind"] == "Pod"] == ["mx-worker-0"]
    assert "its pods are created once its PodGroup ns/mx" in sim.condition("Created")["message"]
    sim.sync()  # the PodGroup exists again
    assert sorted(sim.pods) == ["mx-worker-0", "mx-worker-1"]


def test_mxjob_finished_job_without_its_podgroup_does_not_wait():
    sim = Sim(mxjob(replicas={"Worker": 1}), controller=gang_controller(VOLCANO_API))
    sim.sync()
    sim.sync()
    sim.set_phase("mx-worker-0", "Succeeded", exit_code=0)
    answer = sim.sync()
    assert sim.state() == "Succeeded"
    assert "PodGroup" not in kinds(answer) and sim.podgroups == {}
    again = sim.sync()
    assert "its pods are created once" not in json.dumps(again["status"])
    assert dumps(sim.sync()) == dumps(again)


def test_mxjob_without_a_gang_creates_pods_at_once():
    assert "Pod" in kinds(Sim(mxjob()).sync())


# --- ChainerJob --------------------------------------------------------------------------------------


def chainer_sim(file_name: str = "chainerjob-mn.yaml") -> ChainerSim:
    return ChainerSim(example(file_name), controller=chainer_controller(VOLCANO_API))


def waiting(sim: ChainerSim) -> dict | None:
    return next((c for c in sim.status["conditions"] if c["type"] == "Waiting"), None)


def test_chainerjob_first_sync_answers_the_podgroup_and_no_pod_maker():
    sim = chainer_sim()
    first = sim.sync()
    assert kinds(first) == ["ConfigMap", "PodGroup", "Role", "RoleBinding", "Service", "ServiceAccount"]
    assert sim.state() == "Waiting"
    assert waiting(sim)["reason"] == "WaitingForPodGroup"
    assert "its master Job and worker StatefulSets are created once its PodGroup" in waiting(sim)["message"]
    second = sim.sync()
    assert {"Job", "StatefulSet", "PodGroup"} <= set(kinds(second))
    assert waiting(sim)["status"] == "False" and waiting(sim)["reason"] == "PodGroupCreated"


def test_chainerjob_waiting_status_is_a_fixed_point():
    sim = chainer_sim()
    request = sim.request()
    first = sync_chainerjob(request, now=sim.now)
    request["parent"]["status"] = first["status"]
    sim.tick(30)
    assert dumps(sync_chainerjob(request, now=sim.now)) == dumps(first)


def test_chainerjob_non_distributed_master_waits_for_the_podgroup():
    sim = chainer_sim("chainerjob-single.yaml")
    assert kinds(sim.sync()) == ["PodGroup"]
    assert waiting(sim)["reason"] == "WaitingForPodGroup"
    assert "Job" in kinds(sim.sync())


def test_chainerjob_children_that_exist_are_kept_when_the_podgroup_goes():
    sim = chainer_sim()
    sim.sync()
    sim.sync()
    sim.all_ready()
    [master] = sim.names("Job.batch/v1")
    sim.master(master, active=1)
    sim.sync()
    before = {key: sorted(objs) for key, objs in sim.children.items() if not key.startswith("PodGroup")}
    drop_podgroups(sim)
    answer = sim.sync()
    after = {key: sorted(objs) for key, objs in sim.children.items() if not key.startswith("PodGroup")}
    assert after == before and "PodGroup" in kinds(answer)
    assert sim.state() == "Running" and waiting(sim)["status"] == "False"


def test_chainerjob_statefulset_deleted_while_the_podgroup_is_gone_waits_the_rest_is_kept():
    sim = chainer_sim()
    sim.sync()
    sim.sync()
    [statefulset] = sim.names("StatefulSet.apps/v1")
    sim.delete("StatefulSet.apps/v1", statefulset)
    drop_podgroups(sim)
    answer = sim.sync()
    assert "StatefulSet" not in kinds(answer) and "Job" in kinds(answer)
    assert waiting(sim)["reason"] == "WaitingForPodGroup"
    sim.sync()
    assert sim.names("StatefulSet.apps/v1") == [statefulset]


def test_chainerjob_finished_job_without_its_podgroup_does_not_wait():
    sim = chainer_sim()
    sim.sync()
    sim.sync()
    sim.all_ready()
    [master] = sim.names("Job.batch/v1")
    sim.master(master, succeeded=1, finished=("Complete", "", ""))
    answer = sim.sync()
    assert sim.state() == "Complete" and "PodGroup" not in kinds(answer)
    again = copy.deepcopy(sim.sync())
    assert waiting(sim)["reason"] != "WaitingForPodGroup"
    assert dumps(sim.sync()) == dumps(again)
