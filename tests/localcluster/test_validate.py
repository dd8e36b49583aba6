"""`localcluster run --validate` meets a job's fields as `kubectl apply --validate` does: by asking the server.

`run` reads the file as kubectl reads it (localcluster/cli/kubectlyaml.py), then submits the job with
the server's field validation (`fieldValidation=Strict|Warn|Ignore`). For every manifest of
tests/helpers/unknown_field_cases.py, checked against the real server (the `control_plane`
fixture): the `Warning:` lines `kubectl apply --validate=warn` prints must be the lines `run` gets,
one for one and in order; the fields of kubectl's default (strict) refusal must be those of `run`'s
strict refusal; a manifest kubectl cannot send, `run` refuses too, before any server is asked; and
the spec the server stores from `run`'s submission is the one it stores from kubectl's.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers.apiserver import install
from helpers.unknown_field_cases import CASES, Case

from localcluster.cli.commands import STRICT_HINT, InputError, load_job
from localcluster.controlplane.apistore import ApiStore
from localcluster.controlplane.processes import ControlPlane
from localcluster.store import StoreError

pytestmark = pytest.mark.apiserver

UNKNOWN = re.compile(r'unknown field "(.*?)"(?:, |$)')


@pytest.fixture(scope="module")
def dry_run_namespace(control_plane: ControlPlane) -> Iterator[str]:
    """One namespace for the whole module: every kubectl write is a dry run, and `run`'s jobs are deleted."""
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
    return [match.group(1) for match in UNKNOWN.finditer(listed.split(STRICT_HINT)[0].strip())]


def submit(cp: ControlPlane, namespace: str, path: Path, validation: str) -> tuple[list[str], Any, str]:
    """What `run` gets for a job file, as it submits it (LocalCluster.submit): the server's warnings,
    the stored object (None when refused) and the refusal's message. The job is deleted after."""
    warnings: list[str] = []
    job = load_job(path, warn=warnings.append)  # a deprecated version's warning comes first, as the server's does
    job["metadata"]["namespace"] = namespace
    store = ApiStore(cp.kubeconfig, [])
    try:
        stored = store.create(job, field_validation=validation, warn=warnings.append)
    except StoreError as err:
        return warnings, None, err.message
    try:
        store.delete(stored["apiVersion"], stored["kind"], namespace, stored["metadata"]["name"])
    except StoreError as err:
        # A case whose ownerReferences name no real owner is the garbage collector's to delete too,
        # and on a busy machine it can get there first.
        if err.code != 404:
            raise
    return warnings, stored, ""


@pytest.mark.parametrize("case", [c for c in CASES if not c.refused], ids=lambda c: c.id)
def test_run_warns_as_kubectl_apply_does(case: Case, control_plane: ControlPlane, dry_run_namespace: str, tmp_path: Path):
    path = manifest_file(tmp_path, case)
    applied = control_plane.kubectl("apply", "--dry-run=server", "--validate=warn", "-n", dry_run_namespace,
                                    "-o", "json", "-f", str(path), check=False)
    server_warnings = [line for line in applied.stderr.splitlines() if line.startswith("Warning: ")]

    local_warnings, stored, _ = submit(control_plane, dry_run_namespace, path, "Warn")

    assert local_warnings == server_warnings
    assert (applied.returncode == 0) == case.ok, applied.stderr
    assert (stored is not None) == case.ok
    if case.ok:
        assert stored["spec"] == json.loads(applied.stdout)["spec"]


@pytest.mark.parametrize("case", [c for c in CASES if not c.refused], ids=lambda c: c.id)
def test_strict_refuses_the_same_fields_as_kubectl(case: Case, control_plane: ControlPlane, dry_run_namespace: str,
                                                  tmp_path: Path):
    path = manifest_file(tmp_path, case)
    applied = control_plane.kubectl("apply", "--dry-run=server", "-n", dry_run_namespace, "-f", str(path), check=False)
    server_fields = strict_fields(applied.stderr) if "strict decoding error" in applied.stderr else []

    _, _, refusal = submit(control_plane, dry_run_namespace, path, "Strict")

    assert strict_fields(refusal) == server_fields
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
        load_job(path)
