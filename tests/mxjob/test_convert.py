"""The v1alpha1 converter: the pure conversion (hooks.mxjob.convert) and the mxjob-convert command.

Every case in tests/mxjob/convert/ is a hand-written v1alpha1 manifest. Its conversion must name exactly
the fields it could not carry, pass our CRD's schema and CEL rules, and give the hook a valid job
whose Pods and Services pass Kubernetes' own schemas.
"""
from __future__ import annotations

import copy
import io
import json
import shutil
import subprocess
import sys
from pathlib import Path

import kubernetes_validate
import pytest
import yaml
from helpers import yamlio
from helpers.crd import SCHEMA, broken_rules, pruned_paths, schema_errors
from helpers.mcsim import T0
from ruamel.yaml import YAML

from hooks.cli.mxjob_convert import main
from hooks.mxjob.convert import convert_document
from hooks.mxjob.sync import sync_mxjob
from localcluster.node.podenv import resolve_env

CASES_DIR = Path(__file__).resolve().parent / "convert"
KUBERNETES_VERSION = "1.34"

# case -> the field paths the conversion must report, in order
WARNINGS = {
    "dist-psrootport": [],
    "local-single-worker": [],
    "unknown-fields": [
        "metadata.uid",
        "metadata.resourceVersion",
        "metadata.annotations.kubectl.kubernetes.io/last-applied-configuration",
        "spec.gpus",
        "spec.replicaSpecs[2].priority",
        "spec.replicaSpecs[2].template.spec.restartPolicy",
        "spec.terminationPolicy.chief",
        "spec.mxImage",
        "spec.RuntimeId",
        "status",
    ],
    "replica-list-problems": [
        "spec.replicaSpecs[0].PsRootPort",
        "spec.replicaSpecs[1].template.spec.restartPolicy",
        "spec.replicaSpecs[1].template.spec.schedulerName",
        "spec.replicaSpecs[3]",
        "spec.replicaSpecs[4].mxReplicaType",
    ],
}


def load(case: str) -> dict:
    return yamlio.load((CASES_DIR / f"{case}.yaml").read_text())


def convert(case: str) -> tuple[dict, list[str]]:
    result = convert_document(load(case))
    assert result.converted
    return result.document, result.warnings


def first_sync(job: dict) -> dict:
    parent = copy.deepcopy(job)
    parent["metadata"].setdefault("namespace", "default")
    parent["metadata"].update(uid="uid-converted", generation=1)
    return sync_mxjob({"parent": parent, "children": {"Pod.v1": {}, "Service.v1": {}, "ConfigMap.v1": {}}}, now=T0)


def env_of(answer: dict, pod: str) -> dict[str, str]:
    """The main container's environment as the kubelet resolves it (MX_CONFIG from the job's ConfigMap)."""
    obj = next(c for c in answer["children"] if c["kind"] == "Pod" and c["metadata"]["name"] == pod)
    main_container = next(c for c in obj["spec"]["containers"] if c["name"] == "mxnet")
    config_maps = {c["metadata"]["name"]: c for c in answer["children"] if c["kind"] == "ConfigMap"}
    return resolve_env(main_container, obj, config_map=config_maps.get, runtime={})


def test_every_case_has_a_table_entry():
    assert sorted(p.stem for p in CASES_DIR.glob("*.yaml")) == sorted(WARNINGS)


@pytest.mark.parametrize("case", WARNINGS)
def test_conversion_names_exactly_what_it_could_not_carry(case):
    _, warnings = convert(case)
    assert [w.split(": ", 1)[0] for w in warnings] == WARNINGS[case], warnings


@pytest.mark.parametrize("case", WARNINGS)
def test_converted_manifest_passes_the_crd(case):
    job, _ = convert(case)
    assert job["apiVersion"] == "kubeflow.org/v1" and job["kind"] == "MXJob"
    assert schema_errors(job) == []
    assert pruned_paths(job, SCHEMA) == [], "the API server would drop these fields"
    assert broken_rules(job) == []


@pytest.mark.parametrize("case", WARNINGS)
def test_converted_manifest_gives_valid_children(case):
    job, _ = convert(case)
    answer = first_sync(job)
    assert "specError" not in answer["status"]
    assert [c["type"] for c in answer["status"]["conditions"]] == ["Created"]
    replicas = sum(s.get("replicas", 1) for s in job["spec"]["mxReplicaSpecs"].values())
    # A Pod and a Service per replica, and the job's cluster ConfigMap.
    assert len(answer["children"]) == 2 * replicas + 1
    for child in answer["children"]:
        kubernetes_validate.validate(child, KUBERNETES_VERSION, strict=True)


def test_dist_job_becomes_mxtrain_with_the_replica_map():
    job, _ = convert("dist-psrootport")
    spec = job["spec"]
    assert spec["jobMode"] == "MXTrain"
    assert list(spec["mxReplicaSpecs"]) == ["Scheduler", "Server", "Worker"]
    assert [s["replicas"] for s in spec["mxReplicaSpecs"].values()] == [1, 1, 2]


def test_template_restart_policy_moves_to_the_replica_spec():
    job, _ = convert("dist-psrootport")
    for rtype, rspec in job["spec"]["mxReplicaSpecs"].items():
        assert rspec["restartPolicy"] == "OnFailure", rtype
        assert "restartPolicy" not in rspec["template"]["spec"], rtype


def test_ps_root_port_becomes_the_schedulers_mxjob_port_and_reaches_every_pod():
    job, _ = convert("dist-psrootport")
    scheduler = job["spec"]["mxReplicaSpecs"]["Scheduler"]["template"]["spec"]["containers"][0]
    assert scheduler["ports"] == [{"name": "mxjob-port", "containerPort": 9000}]
    env = env_of(first_sync(job), "example-dist-job-worker-1")
    assert env["DMLC_PS_ROOT_PORT"] == "9000"
    assert json.loads(env["MX_CONFIG"])["cluster"]["scheduler"] == [
        {"port": 9000, "url": "example-dist-job-scheduler-0"}]


def test_missing_clean_up_policy_keeps_v1alpha1s_delete_everything_default():
    job, _ = convert("dist-psrootport")
    assert job["spec"]["runPolicy"] == {"cleanPodPolicy": "All"}


def test_local_job_keeps_metadata_policy_and_a_worker_only_layout():
    original = load("local-single-worker")
    job, _ = convert("local-single-worker")
    assert job["metadata"] == original["metadata"]
    assert job["spec"]["jobMode"] == "MXTrain"
    assert job["spec"]["runPolicy"] == {"cleanPodPolicy": "None"}
    assert list(job["spec"]["mxReplicaSpecs"]) == ["Worker"]
    worker = job["spec"]["mxReplicaSpecs"]["Worker"]
    assert worker["restartPolicy"] == "Never"
    assert worker["template"]["metadata"] == {"labels": {"app": "digits"}}
    assert "DMLC_PS_ROOT_PORT" not in env_of(first_sync(job), "local-job-worker-0")


def test_server_set_metadata_and_kubectls_copy_are_dropped():
    job, _ = convert("unknown-fields")
    assert job["metadata"] == {"name": "odd-job"}
    assert "status" not in job


def test_replica_without_a_type_is_a_worker_as_in_v1alpha1():
    job, _ = convert("unknown-fields")
    assert job["spec"]["mxReplicaSpecs"]["Worker"]["replicas"] == 2
    assert "restartPolicy" not in job["spec"]["mxReplicaSpecs"]["Worker"]


def test_replica_list_problems_keep_the_first_entry_and_carry_ports_and_scheduler_name():
    job, warnings = convert("replica-list-problems")
    specs = job["spec"]["mxReplicaSpecs"]
    assert list(specs) == ["Scheduler", "Server", "Worker"]
    assert specs["Worker"]["replicas"] == 3
    ports = {t: s["template"]["spec"]["containers"][0]["ports"] for t, s in specs.items() if t != "Worker"}
    assert ports == {"Scheduler": [{"name": "mxjob-port", "containerPort": 9100}],
                     "Server": [{"containerPort": 9300, "name": "mxjob-port"}]}
    assert {s["template"]["spec"]["schedulerName"] for s in specs.values()} == {"volcano"}
    assert specs["Server"]["restartPolicy"] == "Always"
    assert any("9100 replaces the mxjob-port port 9200" in w for w in warnings)


def test_conversion_does_not_change_its_input():
    for case in WARNINGS:
        original = load(case)
        kept = copy.deepcopy(original)
        convert_document(original)
        assert original == kept, case


OTHER_DOCUMENTS = {
    "configmap": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": "1"}},
    "v1-mxjob": yamlio.load((Path(__file__).resolve().parents[2] / "examples" / "single-worker.yaml").read_text()),
    "v1beta1-mxjob": {"apiVersion": "kubeflow.org/v1beta1", "kind": "MXJob", "metadata": {"name": "b"},
                      "spec": {"mxReplicaSpecs": {}}},
    "a-list": [1, 2],
    "a-string": "text",
}


@pytest.mark.parametrize("doc", OTHER_DOCUMENTS.values(), ids=OTHER_DOCUMENTS.keys())
def test_anything_but_a_v1alpha1_mxjob_is_left_as_it_is(doc):
    result = convert_document(copy.deepcopy(doc))
    assert result.document == doc and not result.converted
    is_mxjob = isinstance(doc, dict) and doc.get("kind") == "MXJob"
    assert [w.split(": ", 1)[0] for w in result.warnings] == (["apiVersion"] if is_mxjob else [])


# ---------------------------------------------------------------------------------------------
# The command


def run(args: list[str], stdin: str = "") -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(args, stdin=io.StringIO(stdin), stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


def test_a_clean_conversion_exits_0():
    code, out, err = run([str(CASES_DIR / "dist-psrootport.yaml")])
    assert code == 0
    [doc] = yamlio.load_all(out)
    assert doc == convert("dist-psrootport")[0]
    assert "converted to kubeflow.org/v1" in err


def test_warnings_go_to_stderr_with_the_document_and_exit_1():
    code, out, err = run([str(CASES_DIR / "unknown-fields.yaml")])
    assert code == 1
    assert yamlio.load(out)["apiVersion"] == "kubeflow.org/v1"
    lines = [line for line in err.splitlines() if "converted to" not in line]
    assert len(lines) == len(WARNINGS["unknown-fields"])
    assert all(line.startswith(f"{CASES_DIR / 'unknown-fields.yaml'}: document 1 (MXJob odd-job): ")
               for line in lines)


def test_stdin_with_several_documents_converts_only_the_v1alpha1_mxjobs():
    others = [OTHER_DOCUMENTS["configmap"], OTHER_DOCUMENTS["v1-mxjob"]]
    text = yaml.safe_dump_all([others[0], load("local-single-worker"), others[1]])
    code, out, err = run(["-"], text)
    docs = list(yamlio.load_all(out))
    assert [d["apiVersion"] for d in docs] == ["v1", "kubeflow.org/v1", "kubeflow.org/v1"]
    assert (docs[0], docs[2]) == (others[0], others[1])
    assert docs[1] == convert("local-single-worker")[0]
    assert code == 1, "the v1 MXJob is reported"
    assert "<stdin>: document 3 (MXJob single-worker): apiVersion: 'kubeflow.org/v1' left as it is" in err


def test_a_list_of_objects_converts_the_v1alpha1_mxjobs_among_its_items():
    items = [OTHER_DOCUMENTS["configmap"], load("local-single-worker")]
    code, out, err = run(["-"], yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": items}))
    [doc] = yamlio.load_all(out)
    assert doc["kind"] == "List" and doc["items"][0] == OTHER_DOCUMENTS["configmap"]
    assert doc["items"][1] == convert("local-single-worker")[0]
    assert "<stdin>: document 1, items[1] (MXJob local-job): converted to kubeflow.org/v1" in err
    assert code == (1 if WARNINGS["local-single-worker"] else 0)


@pytest.mark.parametrize("text", ["", "---\n---\n", "# only a comment\n"], ids=["empty", "empty-documents", "comment"])
def test_input_without_a_document_is_reported_not_silently_accepted(text):
    code, out, err = run(["-"], text)
    assert (code, out) == (1, "")
    assert err == "mxjob-convert: <stdin> holds no YAML document; nothing to convert\n"


UNREADABLE = {
    "missing-file": (["/nonexistent/job.yaml"], ""),
    "not-yaml": (["-"], "spec: [unclosed\n"),
    "bad-indentation": (["-"], "a: 1\n b: 2\n"),
}


@pytest.mark.parametrize("args, stdin", UNREADABLE.values(), ids=UNREADABLE.keys())
def test_unreadable_input_exits_2_and_writes_nothing(args, stdin):
    code, out, err = run(args, stdin)
    assert (code, out) == (2, "")
    assert err.startswith("mxjob-convert: cannot read ")


def test_a_file_that_is_not_utf8_exits_2(tmp_path):
    path = tmp_path / "latin1.yaml"
    path.write_bytes("metadata: {name: caf\xe9}\n".encode("latin-1"))
    assert run([str(path)])[0] == 2


def test_comments_in_carried_parts_survive():
    text = (CASES_DIR / "local-single-worker.yaml").read_text()
    text = text.replace("    owner: alice", "    owner: alice  # the team lead")
    text = text.replace("            - name: mxnet", "            # the training process\n            - name: mxnet")
    _, out, _ = run(["-"], text)
    assert out.startswith("---\n# A non-distributed v1alpha1 job")
    assert "owner: alice  # the team lead" in out
    assert "# the training process" in out
    assert yamlio.load(out) == convert("local-single-worker")[0]


def test_output_round_trips_through_ruamel_as_well():
    _, out, _ = run([str(CASES_DIR / "replica-list-problems.yaml")])
    assert YAML(typ="safe").load(out) == convert("replica-list-problems")[0]


def test_the_console_command_is_installed_by_setup():
    command = shutil.which("mxjob-convert", path=str(Path(sys.executable).parent))
    if command is None:
        pytest.fail("mxjob-convert is not installed in this virtualenv: run `make setup`")
    result = subprocess.run([command, "-"], input=(CASES_DIR / "dist-psrootport.yaml").read_text(),
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert yamlio.load(result.stdout) == convert("dist-psrootport")[0]
