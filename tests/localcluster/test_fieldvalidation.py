"""Unknown fields: the paths the API server would prune from a job, and what `localcluster run` does with them."""

from __future__ import annotations

import copy
import io
from pathlib import Path

import pytest
import yaml

from localcluster import cli, kubectlyaml
from localcluster.fieldvalidation import crd_schemas, defaulted, metadata_error, pruned, unknown_fields, unknown_fields_of

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = sorted([*ROOT.glob("examples/**/*.yaml"), *ROOT.glob("tests/versions/*.yaml")])
SCHEMA = {
    "type": "object",
    "properties": {
        "spec": {"type": "object", "properties": {
            "known": {"type": "integer"},
            "map": {"type": "object", "additionalProperties": {"type": "object", "properties": {"a": {"type": "string"}}}},
            "list": {"type": "array", "items": {"type": "object", "properties": {"b": {"type": "string"}}}},
            "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": True,
                     "properties": {"declared": {"type": "object", "properties": {"c": {"type": "string"}}}}},
            "embedded": {"type": "object", "x-kubernetes-embedded-resource": True,
                         "properties": {"spec": {"type": "object", "properties": {}}}},
        }},
        "status": {"type": "object", "properties": {}},
    },
}


def paths(obj: dict) -> list[str]:
    return unknown_fields(obj, SCHEMA)


def test_a_known_object_has_no_unknown_fields():
    assert paths({"apiVersion": "x/v1", "kind": "K", "metadata": {"name": "n", "labels": {"a": "b"}},
                  "spec": {"known": 1, "map": {"any": {"a": "x"}}, "list": [{"b": "y"}]}}) == []


def test_unknown_keys_are_named_with_their_path_map_keys_and_list_indexes():
    obj = {"metadata": {"name": "n", "lables": {}}, "specs": {}, "spec": {
        "knwon": 1, "map": {"Worker": {"a": "x", "replica": 2}}, "list": [{"b": "y"}, {"bb": "z"}]}}
    assert paths(obj) == ["metadata.lables", "spec.knwon", "spec.list[1].bb", "spec.map.Worker.replica", "specs"]


def test_preserve_unknown_fields_keeps_unknown_keys_and_still_prunes_declared_properties():
    obj = {"spec": {"free": {"anything": {"deep": 1}, "declared": {"c": "ok", "typo": 1}}}}
    assert paths(obj) == ["spec.free.declared.typo"]


def test_an_embedded_resource_keeps_type_meta_and_prunes_object_meta():
    obj = {"spec": {"embedded": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "nmae": "q"},
                                 "spec": {"x": 1}, "extra": 2}}}
    # Embedded metadata is coerced after pruning, so its paths come after the sorted pruned ones.
    assert paths(obj) == ["spec.embedded.extra", "spec.embedded.spec.x", "spec.embedded.metadata.nmae"]


def test_a_value_of_another_type_is_pruned_by_shape_and_a_scalar_never():
    """The keys of a map where the schema has no properties, and of maps in a list where it has no
    items, are unknown (the server then refuses the type); a scalar is left to validation."""
    assert paths({"spec": {"known": {"not": "an int"}, "list": "not a list", "map": [{"a": 1}]}}) == [
        "spec.known.not", "spec.map[0].a"]


def test_pruned_drops_exactly_those_fields_and_leaves_the_input_alone():
    obj = {"apiVersion": "x/v1", "kind": "K", "metadata": {"name": "n", "bad": 1},
           "spec": {"known": 1, "typo": 2, "list": [{"b": "y", "c": 3}], "free": {"keep": 1}}}
    before = copy.deepcopy(obj)
    assert pruned(obj, SCHEMA) == {"apiVersion": "x/v1", "kind": "K", "metadata": {"name": "n"},
                                   "spec": {"known": 1, "list": [{"b": "y"}], "free": {"keep": 1}}}
    assert obj == before


def test_every_crd_version_has_a_schema():
    kinds = {(group, kind) for group, kind, _ in crd_schemas()}
    assert kinds == {("kubeflow.org", "MXJob"), ("kubeflow.org", "ChainerJob")}


@pytest.mark.parametrize("manifest", MANIFESTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_the_shipped_manifests_have_no_unknown_fields(manifest: Path):
    for doc in yaml.safe_load_all(manifest.read_text()):
        if isinstance(doc, dict) and doc.get("kind") in ("MXJob", "ChainerJob"):
            assert unknown_fields_of(doc) == [], manifest


def test_typos_in_an_mxjob_are_found_in_the_crd_and_inside_the_pod_template():
    job = yaml.safe_load((ROOT / "examples" / "local" / "dist-train-digits.yaml").read_text())
    job["spec"]["cleanPodPolcy"] = "All"
    job["spec"]["mxReplicaSpecs"]["Worker"]["replica"] = 2
    job["spec"]["mxReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["imagePullPolcy"] = "Always"
    assert unknown_fields_of(job) == ["spec.cleanPodPolcy", "spec.mxReplicaSpecs.Worker.replica",
                                      "spec.mxReplicaSpecs.Worker.template.spec.containers[0].imagePullPolcy"]


def test_typos_in_a_chainerjob_are_found():
    job = yaml.safe_load((ROOT / "examples" / "chainerjob" / "chainerjob-mn.yaml").read_text())
    job["spec"]["master"]["backofLimit"] = 1
    (workers,) = job["spec"]["workerSets"].values()
    workers["replcias"] = 3
    (name,) = job["spec"]["workerSets"]
    assert unknown_fields_of(job) == ["spec.master.backofLimit", f"spec.workerSets.{name}.replcias"]


def typo_job(tmp_path: Path) -> Path:
    job = yaml.safe_load((ROOT / "examples" / "local" / "dist-train-digits.yaml").read_text())
    job["spec"]["mxReplicaSpecs"]["Worker"]["replica"] = 2
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    return path


def test_warn_names_the_field_and_the_job_runs_without_it(tmp_path: Path):
    warnings: list[str] = []
    job = cli.load_job(typo_job(tmp_path), warn=warnings.append)
    assert warnings == ['Warning: unknown field "spec.mxReplicaSpecs.Worker.replica"']
    assert "replica" not in job["spec"]["mxReplicaSpecs"]["Worker"]


def test_strict_refuses_the_job_with_exit_2_naming_the_field(tmp_path: Path):
    err = io.StringIO()
    args = cli.parser().parse_args(["--state-dir", str(tmp_path / "state"), "run", str(typo_job(tmp_path)),
                                    "--validate=strict"])
    assert cli.run(args, out=io.StringIO(), err=err) == cli.EXIT_INVALID
    assert 'unknown field "spec.mxReplicaSpecs.Worker.replica"' in err.getvalue()
    assert not (tmp_path / "state").exists()  # refused before anything ran


def test_ignore_says_nothing(tmp_path: Path):
    warnings: list[str] = []
    cli.load_job(typo_job(tmp_path), warn=warnings.append, validate="ignore")
    assert warnings == []


@pytest.mark.parametrize("spelling", ["true", "STRICT", "strict"])
def test_validate_takes_kubectls_spellings(spelling: str):
    args = cli.parser().parse_args(["run", "job.yaml", f"--validate={spelling}"])
    assert cli.VALIDATE_CHOICES[args.validate] == "strict"


def test_state_dir_may_follow_the_subcommand():
    assert cli.parser().parse_args(["run", "job.yaml", "--state-dir", "elsewhere"]).state_dir == "elsewhere"
    assert cli.parser().parse_args(["logs", "j", "p", "--state-dir", "x"]).state_dir == "x"
    assert cli.parser().parse_args(["--state-dir", "before", "run", "job.yaml"]).state_dir == "before"
    assert cli.parser().parse_args(["run", "job.yaml"]).state_dir == cli.DEFAULT_STATE_DIR


def test_metadata_comes_first_depth_first_then_the_rest_sorted_as_strings():
    obj = {"aaa": 1, "metadata": {"zzz": 1, "managedFieldsA": 1, "managedFields": [{"manager": "m", "x": 1}],
                                  "ownerReferences": [{"name": "o", "y": 2}]},
           "spec": {"list": [{"b": "y", "q": n} for n in range(11)]}}
    assert paths(obj)[:4] == ["metadata.managedFields[0].x", "metadata.managedFieldsA", "metadata.ownerReferences[0].y",
                              "metadata.zzz"]
    assert paths(obj)[4:7] == ["aaa", "spec.list[0].q", "spec.list[10].q"]


@pytest.mark.parametrize(("metadata", "problem"), [
    ({"labels": {"a": 1}}, "metadata.labels.a must be a string"),
    ({"finalizers": "x"}, "metadata.finalizers must be an array"),
    ({"generation": 1.5}, "metadata.generation must be an integer"),
    ({"creationTimestamp": "2026-13-01T00:00:00Z"}, "metadata.creationTimestamp must be an RFC 3339 time"),
    ({"ownerReferences": [{"uid": "u", "controller": "yes"}]}, "metadata.ownerReferences[0].controller must be a boolean"),
], ids=["labels", "finalizers", "generation", "time", "owner-reference"])
def test_metadata_that_kubectl_cannot_decode(metadata: dict, problem: str):
    assert (metadata_error({"metadata": {"name": "n", **metadata}}) or "").startswith(problem)


def test_metadata_that_decodes():
    assert metadata_error({"metadata": {"name": "n", "generation": 2.0, "creationTimestamp": "2026-01-02T03:04:05.5+01:00",
                                        "labels": {"a": "b"}, "managedFields": [{"fieldsV1": {"f:x": {}}}]}}) is None


def test_crd_defaults_fill_what_is_absent_and_nothing_else():
    schema = {"type": "object", "properties": {"spec": {"type": "object", "properties": {
        "mode": {"type": "string", "default": "A"},
        "policy": {"type": "object", "default": {}, "properties": {"n": {"type": "integer", "default": 1}}}}}}}
    assert defaulted({"spec": {}}, schema) == {"spec": {"mode": "A", "policy": {"n": 1}}}
    assert defaulted({"spec": {"mode": "B", "policy": {"n": 2}}}, schema) == {"spec": {"mode": "B", "policy": {"n": 2}}}


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
    job = yaml.safe_load((ROOT / "examples" / "local" / "dist-train-digits.yaml").read_text())
    job["spec"]["typo"] = None
    job["spec"]["mxReplicaSpecs"]["Worker"]["template"]["spec"]["nodeName"] = None
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    warnings: list[str] = []
    loaded = cli.load_job(path, warn=warnings.append)
    assert warnings == []
    assert "typo" not in loaded["spec"] and "nodeName" not in loaded["spec"]["mxReplicaSpecs"]["Worker"]["template"]["spec"]
    assert loaded["spec"]["jobMode"] == "MXTrain" and "runPolicy" in loaded["spec"]  # the CRD's defaults
