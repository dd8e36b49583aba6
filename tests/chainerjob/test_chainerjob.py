"""ChainerJob: defaults and validation, the children and their launch wiring, the master's gate, the route."""
from __future__ import annotations

import copy
import os
import re
import signal
import stat
import subprocess
import time
from pathlib import Path

import pytest
from helpers.chainersim import JOB_KEY, STATEFULSET_KEY, ChainerSim, chainerjob, example
from helpers.mcsim import T0

from hooks.chainerjob import children as builders
from hooks.chainerjob.spec import SpecError, parse_chainerjob
from hooks.chainerjob.sync import CHILD_KEYS, sync_chainerjob
from hooks.server.app import create_app


def first_sync(parent: dict, **settings) -> dict:
    return sync_chainerjob({"parent": parent, "children": {k: {} for k in CHILD_KEYS}}, now=T0, **settings)


def child(answer: dict, kind: str, name: str | None = None) -> dict:
    found = [c for c in answer["children"] if c["kind"] == kind and name in (None, c["metadata"]["name"])]
    assert len(found) == 1, [c["metadata"]["name"] for c in answer["children"]]
    return found[0]


def container(template: dict, name: str = "chainer") -> dict:
    return next(c for c in template["spec"]["containers"] if c["name"] == name)


def template(*containers: dict, **pod) -> dict:
    return {"spec": {"containers": list(containers), **pod}}


GPU = {"name": "chainer", "image": "i", "resources": {"limits": {"nvidia.com/gpu": 4}}}

# --- defaults ---------------------------------------------------------------------------------------


def test_a_lone_unnamed_container_is_named_chainer_and_the_master_never_restarts():
    job = parse_chainerjob(chainerjob(workers={"ws": {"template": template({"image": "i"})}},
                                      master={"template": template({"image": "i"})}))
    assert container(job.master.template)["image"] == "i"
    assert container(job.worker_sets["ws"].template)["image"] == "i"
    assert job.master.template["spec"]["restartPolicy"] == "Never"
    assert (job.backend, job.worker_sets["ws"].replicas) == ("mpi", 1)


def test_defaults_are_not_written_back_into_the_parent():
    parent = chainerjob(workers={"ws": {"template": template({"image": "i"})}})
    before = copy.deepcopy(parent)
    answer = first_sync(parent)
    assert parent == before
    assert "backend" not in answer["status"]


@pytest.mark.parametrize("worker_set,slots", [
    ({"template": template(GPU)}, 4),
    ({"template": template({**GPU, "resources": {"limits": {"nvidia.com/gpu": "2"}}})}, 2),
    ({"template": template({**GPU, "resources": {"limits": {"nvidia.com/gpu": 0}}})}, 1),
    ({"template": template({**GPU, "name": "main"})}, 1),
    ({"template": template({**GPU, "resources": {"requests": {"nvidia.com/gpu": 4}}})}, 1),
    ({"template": template(GPU), "mpiConfig": {"slots": 3}}, 3),
    ({"template": template({"name": "side", "image": "i"}, GPU)}, 4),
], ids=["gpu-limit", "gpu-limit-as-string", "zero-gpus-means-one", "no-chainer-container", "requests-ignored",
        "explicit-slots-win", "chainer-among-several"])
def test_worker_slots_default_to_the_chainer_containers_gpu_limit_and_at_least_one(worker_set, slots):
    job = parse_chainerjob(chainerjob(workers={"ws": worker_set}))
    assert job.worker_sets["ws"].slots == slots


def test_a_job_without_worker_sets_ignores_backend_and_mpi_config():
    job = parse_chainerjob(chainerjob(backend="anything"))
    assert not job.distributed and job.backend == ""


# --- validation -------------------------------------------------------------------------------------

TEMPLATE = chainerjob()["spec"]["master"]["template"]

INVALID = {
    "unsupported-backend": (chainerjob(workers={"ws": 1}, backend="nccl"), "spec.backend: 'nccl' is not supported"),
    "negative-replicas": (chainerjob(workers={"ws": -1}), "spec.workerSets.ws.replicas: must be a non-negative"),
    "replicas-not-a-number": (chainerjob(workers={"ws": {"replicas": "2", "template": TEMPLATE}}),
                              "spec.workerSets.ws.replicas"),
    "no-master": (chainerjob(master=None), "spec.master: required"),
    "no-container": (chainerjob(master={"template": {"spec": {"containers": []}}}),
                     "spec.master.template.spec.containers: required"),
    "worker-without-template": (chainerjob(workers={"ws": {"replicas": 1}}), "spec.workerSets.ws.template: required"),
    "unnamed-among-several": (chainerjob(master={"template": template({"image": "a"}, {"image": "b"})}),
                              "spec.master.template.spec.containers[0].name: required"),
    "no-image": (chainerjob(master={"template": template({"name": "chainer"})}),
                 "spec.master.template.spec.containers[0].image: must be a non-empty image reference"),
    "master-restart-always": (chainerjob(master={"template": {**TEMPLATE, "spec": {**TEMPLATE["spec"], "restartPolicy": "Always"}}}),
                              "spec.master.template.spec.restartPolicy: 'Always' is not allowed"),
    "worker-restart-never": (chainerjob(workers={"ws": {"template": {**TEMPLATE, "spec": {**TEMPLATE["spec"], "restartPolicy": "Never"}}}}),
                             "spec.workerSets.ws.template.spec.restartPolicy: 'Never' is not allowed"),
    "master-restart-empty-map": (chainerjob(master={"template": {**TEMPLATE, "spec": {**TEMPLATE["spec"], "restartPolicy": {}}}}),
                                 "spec.master.template.spec.restartPolicy: {} is not allowed"),
    "worker-restart-empty-map": (chainerjob(workers={"ws": {"template": {
        **TEMPLATE, "spec": {**TEMPLATE["spec"], "restartPolicy": {}}}}}),
                                 "spec.workerSets.ws.template.spec.restartPolicy: {} is not allowed"),
    "zero-slots": (chainerjob(workers={"ws": {"template": TEMPLATE, "mpiConfig": {"slots": 0}}}),
                   "spec.workerSets.ws.mpiConfig.slots: must be an integer from 1 to 2147483647"),
    # Numbers that size work or land in int32 fields are bounded before anything is built from them.
    "replicas-beyond-the-bound": (chainerjob(workers={"ws": 10**9}),
                                  "spec.workerSets.ws.replicas: must be a non-negative integer of at most 1000"),
    "too-many-workers-in-all": (chainerjob(workers={"a": 600, "b": 600}),
                                "spec.workerSets: 1200 workers in all; at most 1000 fit"),
    "backoff-over-int32": (chainerjob(master={"template": TEMPLATE, "backoffLimit": 2**70}),
                           "spec.master.backoffLimit: must be an integer from 0 to 2147483647"),
    "slots-over-int32": (chainerjob(workers={"ws": {"template": TEMPLATE, "mpiConfig": {"slots": 2**63}}}),
                         "spec.workerSets.ws.mpiConfig.slots: must be an integer from 1 to 2147483647"),
    "gpu-limit-of-a-thousand-digits": (chainerjob(workers={"ws": {"template": template(
        {"name": "chainer", "image": "i", "resources": {"limits": {"nvidia.com/gpu": "9" * 1000}}})}}),
        "is too large or too precise for a resource quantity"),
    "negative-backoff": (chainerjob(master={"template": TEMPLATE, "backoffLimit": -1}), "spec.master.backoffLimit"),
    "statefulset-name-over-52": (chainerjob("j" * 30, workers={"w" * 12: 1}),
                                 "StatefulSet '" + "j" * 30 + "-workerset-" + "w" * 12 + "' would have 53 characters"),
    "master-host-name-over-63": (chainerjob("m" * 57), "the master's host name"),
    "worker-set-name-not-a-dns-label": (chainerjob(workers={"WS_0": 1}), "spec.workerSets.WS_0: the worker set name"),
    "job-name-not-a-dns-1035-label-with-workers": (chainerjob("9lives", workers={"ws": 1}),
                                                   "metadata.name: '9lives' must start with a letter"),
    "job-name-not-a-dns-label": (chainerjob("-x"), "metadata.name: '-x' must contain only lower-case"),
    # Every part of a template the hook reads or merges into, checked with its path (never a 500).
    "template-spec-not-an-object": (chainerjob(master={"template": {"spec": []}}),
                                    "spec.master.template.spec: required, an object"),
    "template-metadata-not-an-object": (chainerjob(master={"template": {**TEMPLATE, "metadata": "x"}}),
                                        "spec.master.template.metadata: must be an object"),
    "container-not-an-object": (chainerjob(master={"template": template("chainer")}),
                                "spec.master.template.spec.containers[0]: must be an object"),
    "env-as-a-map": (chainerjob(master={"template": template({"name": "chainer", "image": "i", "env": {"A": "1"}})}),
                     "spec.master.template.spec.containers[0].env: must be a list"),
    "port-without-container-port": (chainerjob(workers={"ws": {"template": template(
        {"name": "chainer", "image": "i", "ports": [{"name": "p"}]})}}),
        "spec.workerSets.ws.template.spec.containers[0].ports[0].containerPort: must be an integer"),
    "container-name-not-a-dns-label": (chainerjob(master={"template": template({"name": "Main", "image": "i"})}),
                                       "spec.master.template.spec.containers[0].name: must be lower-case"),
    "two-containers-one-name": (chainerjob(master={"template": template({"name": "chainer", "image": "i"},
                                                                        {"name": "chainer", "image": "j"})}),
                                "spec.master.template.spec.containers[1].name: 'chainer' is used by another"),
    "init-container-named-like-the-operators": (chainerjob(workers={"ws": 1}, master={"template": template(
        {"name": "chainer", "image": "i"}, initContainers=[{"name": "kubectl-delivery", "image": "k"}])}),
        "spec.master.template.spec.initContainers[0].name: 'kubectl-delivery' is used by another container"),
    "volume-named-like-the-operators": (chainerjob(workers={"ws": 1}, master={"template": template(
        {"name": "chainer", "image": "i"}, volumes=[{"name": "chainer-operator-volume-assets", "emptyDir": {}}])}),
        "spec.master.template.spec.volumes[0].name: 'chainer-operator-volume-assets' is the operator's volume"),
    "two-volumes-one-name": (chainerjob(master={"template": template(
        {"name": "chainer", "image": "i"}, volumes=[{"name": "v", "emptyDir": {}}, {"name": "v", "emptyDir": {}}])}),
        "spec.master.template.spec.volumes[1].name: 'v' names two volumes"),
    "mount-over-the-launcher-files": (chainerjob(master={"template": template({"name": "chainer", "image": "i",
        "volumeMounts": [{"name": "v", "mountPath": "/kubeflow/chainer-operator/assets"}]})}),
        "spec.master.template.spec.containers[0].volumeMounts[0].mountPath: /kubeflow/chainer-operator/assets"),
    "gpu-limit-not-a-quantity": (chainerjob(workers={"ws": {"template": template(
        {"name": "chainer", "image": "i", "resources": {"limits": {"nvidia.com/gpu": "four"}}})}}),
        "spec.workerSets.ws.template.spec.containers[0].resources.limits['nvidia.com/gpu']"),
    "resources-not-an-object": (chainerjob(master={"template": template({"name": "chainer", "image": "i",
                                                                        "resources": ["cpu"]})}),
                                "spec.master.template.spec.containers[0].resources: must be an object"),
}


@pytest.mark.parametrize("parent,fragment", INVALID.values(), ids=list(INVALID))
def test_invalid_spec_is_reported_with_its_field_path(parent, fragment):
    with pytest.raises(SpecError) as err:
        parse_chainerjob(parent)
    assert any(fragment in p for p in err.value.problems), err.value.problems


def test_without_worker_sets_a_name_starting_with_a_digit_runs_as_it_did_under_the_original():
    answer = first_sync(chainerjob("9lives"))
    assert [c["metadata"]["name"] for c in answer["children"]] == ["9lives-master"]


def test_an_empty_restart_policy_is_unset_as_the_original_read_it():
    spec = {**TEMPLATE["spec"], "restartPolicy": ""}
    job = parse_chainerjob(chainerjob(workers={"ws": {"template": {"spec": spec}}}, master={"template": {"spec": spec}}))
    assert job.master.template["spec"]["restartPolicy"] == "Never"
    assert job.worker_sets["ws"].template["spec"]["restartPolicy"] == ""


def test_a_52_character_statefulset_name_is_accepted():
    job = parse_chainerjob(chainerjob("j" * 30, workers={"w" * 11: 1}))
    assert len(f"{job.name}-workerset-{'w' * 11}") == 52


def test_every_problem_is_reported_at_once():
    with pytest.raises(SpecError) as err:
        parse_chainerjob(chainerjob(workers={"ws": -1, "ok": {"template": TEMPLATE, "mpiConfig": {"slots": 0}}}, backend="x"))
    assert len(err.value.problems) == 3


def test_a_new_invalid_job_fails_and_gets_no_children():
    answer = first_sync(chainerjob(workers={"ws": 1}, backend="nccl"))
    assert answer["children"] == []
    (cond,) = answer["status"]["conditions"]
    assert (cond["type"], cond["status"], cond["reason"]) == ("Failed", "True", "ChainerJobFailedValidation")


def test_a_job_that_failed_validation_stays_failed_when_fixed():
    sim = ChainerSim(chainerjob(workers={"ws": 1}, backend="nccl"))
    failed = sim.sync()
    sim.edit({"backend": "mpi"})
    again = sim.sync()
    assert again["children"] == [] and again["status"]["conditions"] == failed["status"]["conditions"]


def test_fixing_an_invalid_edit_clears_the_reported_problem():
    sim = ChainerSim(chainerjob(workers={"ws": 1}))
    sim.sync()
    sim.edit({"backend": "nccl"})
    assert "spec.backend" in sim.sync()["status"]["specError"]
    sim.edit({"backend": "mpi"})
    assert "specError" not in sim.sync()["status"]


def master_running(parent: dict) -> ChainerSim:
    """A distributed job whose workers are ready and whose master Job runs."""
    sim = ChainerSim(parent)
    sim.sync()
    sim.all_ready()
    sim.sync()
    sim.master(f"{parent['metadata']['name']}-master", active=1)
    sim.sync()
    return sim


@pytest.mark.parametrize("outcome", [("Complete", "", "done"), ("Failed", "BackoffLimitExceeded", "too many")],
                         ids=["complete", "failed"])
def test_a_master_that_finishes_during_an_invalid_edit_still_ends_the_job(outcome):
    sim = master_running(chainerjob(workers={"ws": 2}))
    sim.edit({"backend": "nccl"})
    sim.sync()
    sim.master("chj-master", succeeded=int(outcome[0] == "Complete"), failed=int(outcome[0] == "Failed"),
               finished=outcome)
    answer = sim.sync()
    assert sim.state() == outcome[0]
    assert "spec.backend" in answer["status"]["specError"]
    assert sim.children[STATEFULSET_KEY]["chj-workerset-ws"]["spec"]["replicas"] == 0
    assert answer["status"]["workerSets"]["ws"]["replicas"] == 0
    assert "chj-master" in sim.children[JOB_KEY]
    running = next(c for c in answer["status"]["conditions"] if c["type"] == "Running")
    assert running["status"] == "False"
    assert sim.sync() == answer  # a fixed point
    sim.edit({"backend": "mpi"})
    fixed = sim.sync()
    assert "specError" not in fixed["status"] and sim.state() == outcome[0]
    assert fixed["status"]["conditions"] == answer["status"]["conditions"]


# --- children -----------------------------------------------------------------------------------------

def test_hostfile_lists_worker_sets_in_name_order_ordinals_in_order_and_the_master_last():
    parent = chainerjob(workers={"b": {"replicas": 1, "template": TEMPLATE, "mpiConfig": {"slots": 2}},
                                 "a": {"replicas": 2, "template": TEMPLATE}},
                        master={"template": TEMPLATE, "mpiConfig": {"slots": 4}})
    data = child(first_sync(parent), "ConfigMap")["data"]
    assert data["hostfile"] == "chj-workerset-a-0 slots=1\nchj-workerset-a-1 slots=1\nchj-workerset-b-0 slots=2\nchj-master slots=4\n"


@pytest.mark.parametrize("replicas", [{"a": 0}, {"a": 0, "b": 0}, {"a": 2}, {"b": 1, "a": 12}],
                         ids=["one-empty-set", "all-empty", "one-set", "two-sets"])
def test_the_role_never_has_an_empty_resource_names_list(replicas):
    role = child(first_sync(chainerjob(workers=replicas)), "Role")
    assert all(rule.get("resourceNames") for rule in role["rules"]), role["rules"]
    pods = sorted(f"chj-workerset-{ws}-{i}" for ws, n in replicas.items() for i in range(n))
    rules = {tuple(r["resources"]): r for r in role["rules"]}
    if pods:
        assert rules[("pods",)]["resourceNames"] == pods and rules[("pods",)]["verbs"] == ["get", "list"]
        assert rules[("pods/exec",)]["resourceNames"] == pods
        assert rules[("pods/exec",)]["verbs"] == ["create", "get"]
    else:
        assert set(rules) == {("statefulsets",)}
    assert rules[("statefulsets",)]["resourceNames"] == sorted(f"chj-workerset-{ws}" for ws in replicas)


def test_only_the_master_gets_the_launcher_account_kubectl_and_its_host_name():
    parent = chainerjob(workers={"ws": {"replicas": 1, "template": template(
        {"name": "chainer", "image": "i"}, serviceAccountName="workload-identity")}})
    sim = ChainerSim(parent, kubectl_image="registry.example/kubectl:v1.33.0")
    sim.sync()
    sim.all_ready()
    answer = sim.sync()
    worker = child(answer, "StatefulSet")["spec"]["template"]["spec"]
    assert worker["serviceAccountName"] == "workload-identity"
    assert "initContainers" not in worker and "hostname" not in worker
    master = child(answer, "Job")["spec"]["template"]["spec"]
    assert (master["serviceAccountName"], master["hostname"]) == ("chj-launcher", "chj-master")
    (init,) = master["initContainers"]
    assert init == {"name": "kubectl-delivery", "image": "registry.example/kubectl:v1.33.0",
                    "command": ["cp", "/bin/kubectl", "/kubeflow/chainer-operator/kube/kubectl"],
                    "volumeMounts": [{"name": "chainer-operator-volume-kubectl",
                                      "mountPath": "/kubeflow/chainer-operator/kube"}]}


def test_the_default_kubectl_image_is_pinned_to_a_version():
    name, _, tag = builders.KUBECTL_IMAGE.rpartition(":")
    assert name == "registry.k8s.io/kubectl" and tag.startswith("v1.") and tag.count(".") == 2


def test_user_env_is_kept_and_the_launch_env_wins_on_the_same_name():
    tmpl = template({"name": "chainer", "image": "i", "env": [{"name": "A", "value": "1"},
                                                                {"name": "OMPI_MCA_plm_rsh_agent", "value": "ssh"}]})
    answer = first_sync(chainerjob(workers={"ws": {"template": tmpl}}))
    env = container(child(answer, "StatefulSet")["spec"]["template"])["env"]
    names = [e["name"] for e in env]
    assert names[0] == "A" and names.count("OMPI_MCA_plm_rsh_agent") == 1
    values = {e["name"]: e["value"] for e in env}
    assert values["OMPI_MCA_plm_rsh_agent"] == values["PRTE_MCA_plm_ssh_agent"] == \
        "/kubeflow/chainer-operator/assets/kubexeb.sh"
    assert values["OMPI_MCA_plm_rsh_no_tree_spawn"] == values["PRTE_MCA_plm_ssh_no_tree_spawn"] == "1"
    assert values["OMPI_MCA_orte_default_hostfile"] == values["PRTE_MCA_prte_default_hostfile"] == \
        "/kubeflow/chainer-operator/assets/hostfile"


def test_the_worker_selector_holds_operator_labels_only():
    tmpl = {"metadata": {"labels": {"team": "a", "chainerjob.kubeflow.org/role": "x"}}, "spec": TEMPLATE["spec"]}
    sts = child(first_sync(chainerjob(workers={"ws": {"template": tmpl}})), "StatefulSet")
    selector = sts["spec"]["selector"]["matchLabels"]
    assert selector == {"chainerjob.kubeflow.org/name": "chj", "chainerjob.kubeflow.org/role": "workerset",
                        "chainerjob.kubeflow.org/workersetname": "ws"}
    assert sts["spec"]["template"]["metadata"]["labels"] == {"team": "a", **selector}
    service = child(first_sync(chainerjob(workers={"ws": {"template": tmpl}})), "Service")
    assert service["spec"]["selector"] == selector and service["spec"]["clusterIP"] == "None"


# --- the agent script, run for real -----------------------------------------------------------------

def run_agent(tmp_path: Path, host: str, *command: str) -> str:
    answer = first_sync(chainerjob(workers={"ws": 1, "other": {"replicas": 1, "template": template(
        {"name": "trainer", "image": "i"})}, "ws-1": {"replicas": 11, "template": template(
        {"name": "main", "image": "i"})}}))
    agent = tmp_path / "kubexeb.sh"
    agent.write_text(child(answer, "ConfigMap")["data"]["kubexeb.sh"])
    agent.chmod(stat.S_IRWXU)
    kubectl = tmp_path / "kubectl"
    kubectl.write_text('#!/bin/sh\nfor a in "$@"; do printf "<%s>" "$a"; done\n')
    kubectl.chmod(stat.S_IRWXU)
    env = {**os.environ, "KUBECTL_DIR": str(tmp_path)}
    result = subprocess.run([str(agent), host, *command], capture_output=True, text=True, env=env, timeout=10,
                            check=True)
    return result.stdout


def test_the_agent_runs_a_command_for_this_host_here_through_a_shell(tmp_path):
    here = subprocess.run(["hostname"], capture_output=True, text=True, check=True).stdout.strip()
    assert run_agent(tmp_path, here, "echo", "a  b;", "echo", "$((1+2))") == "a b\n3\n"


@pytest.mark.parametrize("host,container_name", [("chj-workerset-ws-0", "chainer"),
                                                 ("chj-workerset-other-0", "trainer"),
                                                 ("chj-workerset-ws-1-0", "main"),
                                                 ("chj-workerset-ws-1-10", "main")],
                         ids=["chainer", "named-main-container", "set-whose-name-extends-another",
                              "two-digit-ordinal"])
def test_the_agent_execs_into_another_host_with_its_main_container(tmp_path, host, container_name):
    out = run_agent(tmp_path, host, "orted", "--flag", "x y")
    assert out == f"<exec><-i><{host}><-c><{container_name}><--></bin/sh><-c><orted --flag x y>"


@pytest.mark.parametrize("running", [True, False], ids=["target-running", "target-never-running"])
def test_under_a_gang_the_agent_waits_for_its_target_and_gives_up_with_a_message(tmp_path, monkeypatch, running):
    from hooks.chainerjob import launch

    monkeypatch.setattr(launch, "AGENT_WAIT_SECONDS", 2)
    monkeypatch.setattr(launch, "AGENT_WAIT_STEP", 1)
    job = parse_chainerjob(chainerjob(workers={"ws": 1}))
    agent = tmp_path / "kubexeb.sh"
    agent.write_text(launch.agent_script(job, wait_for_target=True))
    agent.chmod(stat.S_IRWXU)
    started_at = "2026-01-01T00:00:00Z" if running else ""
    kubectl = tmp_path / "kubectl"
    kubectl.write_text(f'#!/bin/sh\nif [ "$1" = get ]; then printf "{started_at}"; exit 0; fi\n'
                       'for a in "$@"; do printf "<%s>" "$a"; done\n')
    kubectl.chmod(stat.S_IRWXU)
    result = subprocess.run([str(agent), "chj-workerset-ws-0", "orted"], capture_output=True, text=True,
                            env={**os.environ, "KUBECTL_DIR": str(tmp_path)}, timeout=20)
    if running:
        assert (result.returncode, result.stdout) == (0, "<exec><-i><chj-workerset-ws-0><-c><chainer><--></bin/sh><-c><orted>")
    else:
        assert result.returncode == 1 and result.stdout == ""
        assert re.search(r"kubexeb.sh: container chainer of pod chj-workerset-ws-0 is not running after [23] s; "
                         r"giving up", result.stderr), result.stderr


# --- the master's launcher, run for real ----------------------------------------------------------------
# OpenMPI 5's mpiexec exits 0 when it loses a worker's daemon before it reads the agent's exit, and
# then SIGKILLs the agents still running (docs/chainerjob.md, "A lost worker or master"). Here a
# shell stands in for mpiexec and runs the real agent, whose kubectl runs the command locally.

WORKER = "chj-workerset-ws-0"


def run_launcher(tmp_path: Path, mpiexec: str, *, stdin: str = "", sig: int | None = None) -> subprocess.CompletedProcess:
    assets = child(first_sync(chainerjob(workers={"ws": 1})), "ConfigMap")["data"]
    for key in ("launcher.sh", "kubexeb.sh"):
        (tmp_path / key).write_text(assets[key])
        (tmp_path / key).chmod(stat.S_IRWXU)
    kubectl = tmp_path / "kubectl"
    kubectl.write_text('#!/bin/sh\nshift 6\nexec "$@"\n')  # exec -i <pod> -c <container> -- <command...>
    kubectl.chmod(stat.S_IRWXU)
    env = {**os.environ, "KUBECTL_DIR": str(tmp_path), "AGENT": str(tmp_path / "kubexeb.sh"), "TMPDIR": str(tmp_path)}
    proc = subprocess.Popen([str(tmp_path / "launcher.sh"), "sh", "-c", mpiexec], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    if sig is not None:
        time.sleep(0.5)
        proc.send_signal(sig)
    out, err = proc.communicate(stdin, timeout=20)
    assert not list(tmp_path.glob("chainerjob-agents.*"))  # the records go with the launcher
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


@pytest.mark.parametrize(("mpiexec", "code", "lost"), [
    (f'"$AGENT" {WORKER} "exit 0"; exit 0', 0, None),
    (f'"$AGENT" {WORKER} "exit 0"; exit 3', 3, None),
    (f'"$AGENT" {WORKER} "kill -9 \\$\\$"; exit 0', 1, "kubectl exec ended with exit code 137"),
    # The daemon outlives its killed agent (a few seconds, off the pipes this test reads).
    (f'"$AGENT" {WORKER} "exec sleep 3 >/dev/null 2>&1" & sleep 0.5; kill -9 $!; exit 0', 1,
     "its agent was killed by mpiexec, as it does when it aborts"),
    (f'"$AGENT" {WORKER} "kill -9 \\$\\$"; exit 2', 2, None),
    (f'"$AGENT" {WORKER} "sleep 1.5" & exit 0', 0, None),
], ids=["daemon-ended-cleanly", "command-failed", "daemon-lost-exit-0-fails", "agent-killed-by-mpiexec-fails",
        "daemon-lost-command-failed-keeps-its-code", "agent-still-ending-is-awaited"])
def test_the_launcher_fails_a_command_that_exits_0_after_losing_a_worker_daemon(tmp_path, mpiexec, code, lost):
    result = run_launcher(tmp_path, mpiexec)
    assert result.returncode == code, result.stderr
    if lost is None:
        assert "launcher.sh" not in result.stderr
    else:
        assert result.stderr.splitlines()[-1] == (
            f"launcher.sh: error: the command exited 0, but mpiexec lost a worker's MPI daemon; daemons that did "
            f"not end cleanly: {WORKER} ({lost}). Failing the master so that its Job retries")


def test_the_launcher_passes_stdin_and_forwards_a_termination_signal_to_its_command(tmp_path):
    assert run_launcher(tmp_path, "read x; echo got $x", stdin="in\n").stdout == "got in\n"
    result = run_launcher(tmp_path, 'trap "echo TERM; exit 7" TERM; sleep 5 & wait', sig=signal.SIGTERM)
    assert (result.returncode, result.stdout) == (7, "TERM\n")


@pytest.mark.parametrize(("workers", "command", "expected"), [
    ({"ws": 1}, ["mpiexec", "-n", "2"], ["/kubeflow/chainer-operator/assets/launcher.sh", "mpiexec", "-n", "2"]),
    ({"ws": 1}, None, None),
    ({}, ["python", "train.py"], ["python", "train.py"]),
], ids=["distributed", "image-entrypoint-kept", "single-pod-unchanged"])
def test_the_masters_command_runs_through_the_launcher_when_it_has_workers(workers, command, expected):
    main = {"name": "chainer", "image": "i", **({"command": command} if command else {})}
    job = chainerjob(workers=workers)
    job["spec"]["master"] = {"template": template(main, {"name": "side", "image": "i", "command": ["sleep", "1"]})}
    pod = builders.master_job_for(parse_chainerjob(job), kubectl_image="k")["spec"]["template"]["spec"]
    assert [c.get("command") for c in pod["containers"]] == [expected, ["sleep", "1"]]


# --- the master's gate and the workers' scale-down ------------------------------------------------------

def test_the_master_waits_for_every_worker_then_stays():
    sim = ChainerSim(chainerjob(workers={"a": 2, "b": 1}))
    sim.sync()
    assert sim.names(JOB_KEY) == [] and sim.state() == "Waiting"
    sim.ready("chj-workerset-a")
    sim.ready("chj-workerset-b", 0)
    sim.sync()
    assert sim.names(JOB_KEY) == []
    assert "2 of 3 ready (a 2/2, b 0/1)" in sim.status["conditions"][-1]["message"]
    sim.ready("chj-workerset-b")
    sim.sync()
    assert sim.names(JOB_KEY) == ["chj-master"]
    sim.ready("chj-workerset-a", 1)  # a worker restarts: the master is kept
    assert [c["kind"] for c in sim.sync()["children"]][-1] == "Job"


def test_a_non_distributed_job_starts_its_master_at_once_and_nothing_else():
    sim = ChainerSim(chainerjob())
    answer = sim.sync()
    assert [c["kind"] for c in answer["children"]] == ["Job"]
    assert "serviceAccountName" not in child(answer, "Job")["spec"]["template"]["spec"]


@pytest.mark.parametrize("outcome", [("Complete", "CompletionsReached", "done"),
                                     ("Failed", "DeadlineExceeded", "Job was active longer than specified deadline")],
                         ids=["complete", "failed"])
def test_a_finished_master_scales_workers_to_zero_and_is_never_created_again(outcome):
    sim = master_running(chainerjob(workers={"ws": 2}))
    sim.tick(60)
    sim.master("chj-master", finished=outcome)
    finished = sim.sync()
    assert child(finished, "StatefulSet")["spec"]["replicas"] == 0
    assert sim.state() == outcome[0]
    sim.delete(JOB_KEY, "chj-master")
    sim.tick(60)
    after = sim.sync()
    assert sim.names(JOB_KEY) == []
    assert after["status"] == finished["status"]


def test_a_master_deleted_before_it_finished_is_created_again():
    sim = ChainerSim(chainerjob(workers={"ws": 1}))
    sim.sync()
    sim.all_ready()
    sim.sync()
    sim.delete(JOB_KEY, "chj-master")
    sim.sync()
    assert sim.names(JOB_KEY) == ["chj-master"]


def test_a_removed_worker_set_is_deleted_and_leaves_the_hostfile():
    sim = ChainerSim(chainerjob(workers={"a": 1, "b": 1}))
    sim.sync()
    spec = copy.deepcopy(sim.parent["spec"])
    del spec["workerSets"]["b"]
    sim.edit(spec)
    sim.sync()
    assert sim.names(STATEFULSET_KEY) == ["chj-workerset-a"]
    assert "workerset-b" not in sim.children["ConfigMap.v1"]["chj-assets"]["data"]["hostfile"]


# --- Kubernetes' own schemas -----------------------------------------------------------------------------

# --- the HTTP route and the kubectl image setting ----------------------------------------------------------

def post(client, path: str, parent: dict):
    return client.post(path, json={"parent": parent, "children": {k: {} for k in CHILD_KEYS}})


def test_the_route_passes_the_kubectl_image_setting_to_the_core(monkeypatch):
    monkeypatch.setenv("CHAINERJOB_KUBECTL_IMAGE", "registry.example/kubectl:v1.32.4")
    client = create_app().test_client()
    parent = chainerjob()
    parent["spec"]["workerSets"] = {"ws": {"replicas": 0, "template": TEMPLATE}}
    reply = post(client, "/chainerjob/sync", parent)
    assert reply.status_code == 200, reply.get_json()
    (job,) = [c for c in reply.get_json()["children"] if c["kind"] == "Job"]
    assert job["spec"]["template"]["spec"]["initContainers"][0]["image"] == "registry.example/kubectl:v1.32.4"


def test_without_the_setting_the_pinned_image_is_used(monkeypatch):
    monkeypatch.delenv("CHAINERJOB_KUBECTL_IMAGE", raising=False)
    parent = chainerjob(workers={"ws": 0})
    reply = post(create_app().test_client(), "/chainerjob/sync", parent)
    (job,) = [c for c in reply.get_json()["children"] if c["kind"] == "Job"]
    assert job["spec"]["template"]["spec"]["initContainers"][0]["image"] == builders.KUBECTL_IMAGE


@pytest.mark.parametrize("path", ["/sync", "/mxjob/sync"])
def test_a_chainerjob_sent_to_the_mxjob_route_is_refused(path):
    reply = post(create_app().test_client(), path, chainerjob())
    assert reply.status_code == 400 and "MXJob" in reply.get_json()["error"]


def test_a_request_missing_a_child_rule_is_refused_not_taken_as_no_children():
    client = create_app().test_client()
    reply = client.post("/chainerjob/sync", json={"parent": chainerjob(), "children": {"Job.batch/v1": {}}})
    assert reply.status_code == 400 and "children[ServiceAccount.v1]" in reply.get_json()["error"]


@pytest.mark.parametrize("status", [[], "Running", {"conditions": ["Created"]}, {"conditions": None}],
                         ids=["list", "string", "condition-not-an-object", "null-conditions"])
def test_a_status_the_hook_did_not_write_is_ignored(status):
    parent = chainerjob(workers={"ws": 1})
    parent["status"] = status
    answer = first_sync(parent)
    assert [c["kind"] for c in answer["children"]][:1] == ["ServiceAccount"]
    assert answer["status"]["conditions"][-1]["type"] == "Waiting"


# --- StatefulSet update strategy: running workers never roll ----------------------------------------


def test_worker_statefulsets_are_on_delete():
    answer = first_sync(example("chainerjob-mn.yaml"))
    assert child(answer, "StatefulSet")["spec"]["updateStrategy"] == {"type": "OnDelete"}


def test_enabling_a_gang_on_a_running_job_changes_the_template_but_stays_on_delete():
    from helpers.chainersim import gang_controller

    sim = ChainerSim(example("chainerjob-mn.yaml"))
    sim.sync()
    sim.all_ready()
    sim.sync()
    [name] = sim.names(STATEFULSET_KEY)
    before = copy.deepcopy(sim.children[STATEFULSET_KEY][name]["spec"])
    sim.use_controller(gang_controller("scheduling.volcano.sh/v1beta1"))
    sim.sync()
    sim.sync()
    after = sim.children[STATEFULSET_KEY][name]["spec"]
    assert after["template"] != before["template"]  # the gang's marks, for pods created from now on
    assert after["updateStrategy"] == before["updateStrategy"] == {"type": "OnDelete"}


def test_a_statefulset_created_with_rolling_update_is_frozen_not_switched():
    # An older hook emitted no updateStrategy: the API server defaulted RollingUpdate with a
    # rollingUpdate the merge cannot remove, and OnDelete beside it would be refused (422).
    sim = ChainerSim(example("chainerjob-mn.yaml"))
    sim.sync()
    [name] = sim.names(STATEFULSET_KEY)
    sim.change("apps/v1", "StatefulSet", name, lambda sts: sts["spec"].update(updateStrategy={
        "type": "RollingUpdate", "rollingUpdate": {"partition": 0}}))
    answer = sim.sync()
    assert child(answer, "StatefulSet")["spec"]["updateStrategy"] == {
        "type": "RollingUpdate", "rollingUpdate": {"partition": 2**31 - 1}}
    assert sim.sync() == answer
