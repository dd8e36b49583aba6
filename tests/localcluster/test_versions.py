"""The local cluster accepts every version the CRDs serve, as an API server with `conversion: None` does."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from localcluster.cli import commands as cli
from localcluster.cli.commands import InputError, load_job
from localcluster.cli.crds import served_kinds

REPO = Path(__file__).resolve().parents[2]


def mxjob(api_version: str, name: str = "old", command: str = "print('trained')") -> dict:
    """A one-Worker MXJob in the inline layout every served version shares."""
    return {
        "apiVersion": api_version, "kind": "MXJob", "metadata": {"name": name},
        "spec": {"jobMode": "MXTrain", "cleanPodPolicy": "None", "mxReplicaSpecs": {"Worker": {
            "replicas": 1, "restartPolicy": "Never",
            "template": {"spec": {"containers": [{"name": "mxnet", "image": "mxnet:1.9.1",
                                                  "command": ["python", "-c", command]}]}},
        }}},
    }


def write(tmp_path: Path, manifest: dict) -> Path:
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(manifest))
    return path


def test_the_crds_are_read_as_shipped():
    kinds = served_kinds()
    assert kinds["MXJob"].storage == "v1" and kinds["ChainerJob"].storage == "v1alpha1"
    assert set(kinds["MXJob"].served) == {"v1", "v1beta1", "v1alpha2"}
    assert "v1alpha1" not in kinds["MXJob"].served
    assert kinds["MXJob"].warning_for("v1") is None
    assert "use kubeflow.org/v1" in (kinds["MXJob"].warning_for("v1beta1") or "")


@pytest.mark.parametrize("version", ["v1beta1", "v1alpha2"])
def test_a_deprecated_version_is_stored_as_v1_with_the_crds_warning(tmp_path: Path, version: str):
    warnings: list[str] = []
    job = load_job(write(tmp_path, mxjob(f"kubeflow.org/{version}")), warn=warnings.append)
    assert job["apiVersion"] == "kubeflow.org/v1"
    assert job["spec"]["mxReplicaSpecs"]["Worker"]["replicas"] == 1
    assert len(warnings) == 1 and warnings[0].startswith(f"Warning: kubeflow.org/{version} MXJob is deprecated")


def test_the_storage_version_loads_without_a_warning(tmp_path: Path):
    warnings: list[str] = []
    assert load_job(write(tmp_path, mxjob("kubeflow.org/v1")), warn=warnings.append)["apiVersion"] == "kubeflow.org/v1"
    assert warnings == []


def test_a_v1alpha1_mxjob_is_refused_with_the_converter_named(tmp_path: Path):
    with pytest.raises(InputError, match=r"kubeflow\.org/v1alpha1.* is not served for MXJob.*mxjob-convert"):
        load_job(write(tmp_path, mxjob("kubeflow.org/v1alpha1")))


@pytest.mark.parametrize("api_version", ["kubeflow.org/v2", "example.com/v1", "v1", None],
                         ids=["unknown-version", "other-group", "core-group", "missing"])
def test_an_unserved_api_version_lists_the_served_ones(tmp_path: Path, api_version):
    manifest = mxjob("x")
    manifest["apiVersion"] = api_version
    with pytest.raises(InputError, match=r"is not served for MXJob; use one of kubeflow\.org/v1, ") as caught:
        load_job(write(tmp_path, manifest))
    assert "mxjob-convert" not in str(caught.value)


def test_run_refuses_v1alpha1_with_exit_2(tmp_path: Path):
    err = io.StringIO()
    args = cli.argparse.Namespace(file=str(write(tmp_path, mxjob("kubeflow.org/v1alpha1"))),
                                  state_dir=str(tmp_path / "state"), timeout=10)
    assert cli.run(args, out=io.StringIO(), err=err) == cli.EXIT_INVALID
    assert "mxjob-convert" in err.getvalue()
    assert not (tmp_path / "state").exists()


@pytest.mark.e2e
@pytest.mark.apiserver
def test_a_v1alpha2_job_runs_to_success_with_the_warning_on_stderr(tmp_path: Path):
    path = write(tmp_path, mxjob("kubeflow.org/v1alpha2", name="legacy"))
    result = subprocess.run([sys.executable, "-m", "localcluster", "--state-dir", str(tmp_path / "state"),
                             "run", str(path), "--timeout", "60"], cwd=REPO, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == cli.EXIT_SUCCEEDED, result.stdout + result.stderr
    assert "Warning: kubeflow.org/v1alpha2 MXJob is deprecated" in result.stderr
    assert "MXJob default/legacy Succeeded" in result.stdout
    assert "trained" in (tmp_path / "state" / "default" / "legacy" / "legacy-worker-0.log").read_text()
