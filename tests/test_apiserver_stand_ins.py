"""Two API server stand-ins checked against the real server (the `control_plane` fixture).

Field validation: `localcluster run` reads a job file and names the fields the CRD does not declare
(localcluster/fieldvalidation.py, through localcluster/kubectlyaml.py's reading of the YAML). For
every manifest of tests/helpers/unknown_field_cases.py, the `Warning:` lines `kubectl apply
--validate=warn` prints must be the lines `run` prints, one for one and in order; the fields of
kubectl's default (strict) refusal must be those of `run --validate=strict`; a manifest kubectl
cannot send, `run` refuses too; and the spec the server stores is the spec `run` submits.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers.apiserver import install
from helpers.unknown_field_cases import CASES, Case

from localcluster.cli import InputError, load_job
from localcluster.controlplane import ControlPlane

pytestmark = pytest.mark.apiserver

UNKNOWN = re.compile(r'unknown field "(.*?)"(?:, |$)')


@pytest.fixture(scope="module")
def dry_run_namespace(control_plane: ControlPlane) -> Iterator[str]:
    """One namespace for the whole module: every write here is a dry run, so nothing is left in it."""
    install(control_plane)
    name = f"t-{uuid.uuid4().hex[:10]}"
    control_plane.kubectl("create", "namespace", name)
    control_plane.kubectl("wait", "--for=create", "serviceaccount/default", "-n", name, "--timeout=30s")
    yield name
    control_plane.kubectl("delete", "namespace", name, "--wait=false", check=False)


def manifest_file(tmp_path: Path, case: Case) -> Path:
    path = tmp_path / f"{case.id}.yaml"
    path.write_text(case.manifest)
    return path


def strict_fields(message: str) -> list[str]:
    """The fields of a `strict decoding error: unknown field "a", unknown field "b"` message, in order."""
    _, _, listed = message.partition("strict decoding error: ")
    return [match.group(1) for match in UNKNOWN.finditer(listed.split(" (fix the spelling")[0].strip())]


@pytest.mark.parametrize("case", [c for c in CASES if not c.refused], ids=lambda c: c.id)
def test_run_warns_as_kubectl_apply_does(case: Case, control_plane: ControlPlane, dry_run_namespace: str, tmp_path: Path):
    path = manifest_file(tmp_path, case)
    applied = control_plane.kubectl("apply", "--dry-run=server", "--validate=warn", "-n", dry_run_namespace,
                                    "-o", "json", "-f", str(path), check=False)
    server_warnings = [line for line in applied.stderr.splitlines() if line.startswith("Warning: ")]

    local_warnings: list[str] = []
    job = load_job(path, warn=local_warnings.append)

    assert local_warnings == server_warnings
    assert (applied.returncode == 0) == case.ok, applied.stderr
    if case.ok:
        assert job["spec"] == json.loads(applied.stdout)["spec"]


@pytest.mark.parametrize("case", [c for c in CASES if not c.refused], ids=lambda c: c.id)
def test_strict_refuses_the_same_fields_as_kubectl(case: Case, control_plane: ControlPlane, dry_run_namespace: str,
                                                  tmp_path: Path):
    path = manifest_file(tmp_path, case)
    applied = control_plane.kubectl("apply", "--dry-run=server", "-n", dry_run_namespace, "-f", str(path), check=False)
    server_fields = strict_fields(applied.stderr) if "strict decoding error" in applied.stderr else []

    try:
        load_job(path, validate="strict")
        local_fields: list[str] = []
    except InputError as err:
        local_fields = strict_fields(str(err))

    assert local_fields == server_fields
    if server_fields:
        assert applied.returncode != 0


@pytest.mark.parametrize("case", [c for c in CASES if c.refused], ids=lambda c: c.id)
def test_run_refuses_what_kubectl_cannot_send(case: Case, control_plane: ControlPlane, dry_run_namespace: str, tmp_path: Path):
    path = manifest_file(tmp_path, case)
    applied = control_plane.kubectl("apply", "--dry-run=server", "--validate=warn", "-n", dry_run_namespace,
                                    "-f", str(path), check=False)
    assert applied.returncode != 0
    assert applied.stderr.startswith("error: "), applied.stderr  # kubectl's own error: the server was never asked
    with pytest.raises(InputError):
        load_job(path, validate="warn")
