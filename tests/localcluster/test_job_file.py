"""A job file as `localcluster run` reads it (as kubectl does: localcluster/cli/kubectlyaml.py), and its
unknown fields as `--validate` has the server meet them when the job is submitted."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from helpers import yamlio

from localcluster.cli import commands as cli
from localcluster.cli import kubectlyaml
from localcluster.controlplane.apistore import ApiStore
from localcluster.controlplane.processes import ControlPlane
from localcluster.store import StoreError

ROOT = Path(__file__).resolve().parents[2]


def typo_job(tmp_path: Path) -> Path:
    job = yamlio.load((ROOT / "examples" / "local" / "dist-train-digits.yaml").read_text())
    job["spec"]["mxReplicaSpecs"]["Worker"]["replica"] = 2
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    return path


def submitted(cp: ControlPlane, namespace: str, path: Path, validation: str, warnings: list[str]) -> dict:
    """The job as the server stores it from `run`'s submission (LocalCluster.submit's call)."""
    job = cli.load_job(path)
    job["metadata"]["namespace"] = namespace
    return dict(ApiStore(cp.kubeconfig, []).create(job, field_validation=validation, warn=warnings.append))


@pytest.mark.apiserver
def test_warn_names_the_field_and_the_job_is_stored_without_it_and_with_the_crds_defaults(
        tmp_path: Path, cluster_plane: ControlPlane, namespace: str):
    warnings: list[str] = []
    job = submitted(cluster_plane, namespace, typo_job(tmp_path), "Warn", warnings)
    assert warnings == ['Warning: unknown field "spec.mxReplicaSpecs.Worker.replica"']
    assert "replica" not in job["spec"]["mxReplicaSpecs"]["Worker"]
    assert job["spec"]["jobMode"] == "MXTrain" and "runPolicy" in job["spec"]  # the CRD's defaults


@pytest.mark.apiserver
def test_strict_refuses_the_job_naming_the_field(tmp_path: Path, cluster_plane: ControlPlane, namespace: str):
    with pytest.raises(StoreError) as refused:
        submitted(cluster_plane, namespace, typo_job(tmp_path), "Strict", [])
    assert refused.value.code == 400
    assert 'strict decoding error: unknown field "spec.mxReplicaSpecs.Worker.replica"' in refused.value.message


@pytest.mark.apiserver
def test_ignore_says_nothing(tmp_path: Path, cluster_plane: ControlPlane, namespace: str):
    warnings: list[str] = []
    job = submitted(cluster_plane, namespace, typo_job(tmp_path), "Ignore", warnings)
    assert warnings == [] and "replica" not in job["spec"]["mxReplicaSpecs"]["Worker"]


@pytest.mark.parametrize("spelling", ["true", "STRICT", "strict"])
def test_validate_takes_kubectls_spellings(spelling: str):
    args = cli.parser().parse_args(["run", "job.yaml", f"--validate={spelling}"])
    assert cli.VALIDATE_CHOICES[args.validate] == "Strict"


def test_state_dir_may_follow_the_subcommand():
    assert cli.parser().parse_args(["run", "job.yaml", "--state-dir", "elsewhere"]).state_dir == "elsewhere"
    assert cli.parser().parse_args(["logs", "j", "p", "--state-dir", "x"]).state_dir == "x"
    assert cli.parser().parse_args(["--state-dir", "before", "run", "job.yaml"]).state_dir == "before"
    assert cli.parser().parse_args(["run", "job.yaml"]).state_dir == cli.DEFAULT_STATE_DIR


@pytest.mark.parametrize(("metadata", "problem"), [
    ({"labels": {"a": 1}}, "metadata.labels.a must be a string"),
    ({"finalizers": "x"}, "metadata.finalizers must be an array"),
    ({"generation": 1.5}, "metadata.generation must be an integer"),
    ({"creationTimestamp": "2026-13-01T00:00:00Z"}, "metadata.creationTimestamp must be an RFC 3339 time"),
    ({"ownerReferences": [{"uid": "u", "controller": "yes"}]}, "metadata.ownerReferences[0].controller must be a boolean"),
], ids=["labels", "finalizers", "generation", "time", "owner-reference"])
def test_metadata_that_kubectl_cannot_decode(metadata: dict, problem: str):
    assert (kubectlyaml.metadata_error({"metadata": {"name": "n", **metadata}}) or "").startswith(problem)


def test_metadata_that_decodes():
    assert kubectlyaml.metadata_error({"metadata": {"name": "n", "generation": 2.0, "creationTimestamp": "2026-01-02T03:04:05.5+01:00",
                                        "labels": {"a": "b"}, "managedFields": [{"fieldsV1": {"f:x": {}}}]}}) is None


def test_kubectl_reads_yaml_as_go_yaml_v2():
    (doc,) = kubectlyaml.load_all(
        "t: 2001-01-01\nbools: [y, N, yes, off, 'y']\nints: [0x1F, 0o17, 017, 1_000, +3]\n"
        "floats: [1e3, 1.5, 2.0, 08]\nstrings: [190:20:30, !!str 1]\n1: a\nyes: b\n1.5: c\n")
    assert doc == {"t": "2001-01-01", "bools": [True, False, True, False, "y"], "ints": [31, 15, 15, 1000, 3],
                   "floats": [1000, 1.5, 2, 8], "strings": ["190:20:30", "1"], "1": "a", "true": "b", "1.5": "c"}


@pytest.mark.parametrize("text", ["~: x\n", "a: .inf\n", "9223372036854775808: x\n"], ids=["null-key", "infinity", "huge-key"])
def test_what_kubectl_cannot_turn_into_json(text: str):
    with pytest.raises(kubectlyaml.ManifestError):
        kubectlyaml.load_all(text)


@pytest.mark.parametrize(("value", "text"), [(1.5, "1.5"), (1.0, "1"), (1.5e-7, "1.5e-07"), (1e6, "1e+06"),
                                             (123456.0, "123456"), (0.1, "0.1"), (3.14159265, "3.1415927")])
def test_float_keys_are_written_as_go_writes_a_float32(value: float, text: str):
    assert kubectlyaml.format_float32(value) == text


def test_null_fields_are_left_out_as_kubectl_apply_does(tmp_path: Path):
    job = yamlio.load((ROOT / "examples" / "local" / "dist-train-digits.yaml").read_text())
    job["spec"]["typo"] = None
    job["spec"]["mxReplicaSpecs"]["Worker"]["template"]["spec"]["nodeName"] = None
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    warnings: list[str] = []
    loaded = cli.load_job(path, warn=warnings.append)
    assert warnings == []
    assert "typo" not in loaded["spec"] and "nodeName" not in loaded["spec"]["mxReplicaSpecs"]["Worker"]["template"]["spec"]
