"""The docs stand alone and say what the code does: no references outside the repository, the
CLI's exit codes and the defaults as implemented, and a sample request that the server answers."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from hooks.mxjob.spec import RunPolicy
from hooks.server.app import create_app
from localcluster import cli

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
OUTSIDE = re.compile(r"\.\./shared|DESIGN(\.md| \d)|reference/\w+\.md")
LINK = re.compile(r"\]\(([^)#]+)(#[^)]*)?\)")


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_docs_never_point_outside_the_repository(doc: Path):
    text = doc.read_text()
    assert not OUTSIDE.findall(text)
    prose = re.sub(r"```.*?```|`[^`]*`", "", text, flags=re.S)  # code is not a link
    for target, _ in LINK.findall(prose):
        if "://" in target:
            continue
        resolved = (doc.parent / target).resolve()
        assert resolved.is_relative_to(ROOT) and resolved.exists(), f"{doc.name} links to {target}"


def test_every_exit_code_of_the_cli_is_in_the_readme():
    table = dict(re.findall(r"^\| `(\d+)` \| ([^|]+) \|$", (ROOT / "README.md").read_text(), re.M))
    codes = {value for name, value in vars(cli).items() if name.startswith("EXIT_")}
    codes |= {128 + int(sig) for sig in cli.STOP_SIGNALS}
    assert {int(code) for code in table} == codes


def test_the_defaults_table_says_what_the_code_does():
    readme = (ROOT / "README.md").read_text()
    defaults = RunPolicy()
    rows = dict(re.findall(r"^\| `(\w+)` \| ([^|]+?) \|", readme, re.M))
    assert rows["cleanPodPolicy"].startswith(f"`{defaults.clean_pod_policy}`")
    assert defaults.backoff_limit is None and rows["backoffLimit"].startswith("unlimited")
    assert defaults.active_deadline_seconds is None and rows["activeDeadlineSeconds"].startswith("none")
    assert defaults.ttl_seconds_after_finished is None and rows["ttlSecondsAfterFinished"].startswith("none")


def test_the_sample_sync_request_is_answered_with_children():
    body = (ROOT / "examples" / "hooks" / "sync-request.json").read_bytes()
    response = create_app().test_client().post("/sync", data=body, content_type="application/json")
    assert response.status_code == 200, response.data
    answer = json.loads(response.data)
    assert sorted(c["metadata"]["name"] for c in answer["children"] if c["kind"] == "Pod") == [
        "hello-scheduler-0", "hello-server-0", "hello-worker-0", "hello-worker-1"]
    assert answer["status"]["conditions"][-1]["type"] == "Created"


def test_the_guides_job_is_a_valid_mxjob_for_the_local_cluster():
    text = (ROOT / "docs" / "write-a-job.md").read_text()
    (manifest,) = [yaml.safe_load(block) for block in re.findall(r"```yaml\n(.*?)```", text, re.S)]
    job = manifest
    request = {"controller": {}, "parent": {**job, "metadata": {**job["metadata"], "namespace": "default", "uid": "u1",
                                                               "generation": 1}},
               "children": {"Pod.v1": {}, "Service.v1": {}, "ConfigMap.v1": {}}, "related": {}, "finalizing": False}
    response = create_app().test_client().post("/sync", json=request)
    assert response.status_code == 200
    assert json.loads(response.data)["status"]["conditions"][-1]["type"] == "Created"
    for spec in job["spec"]["mxReplicaSpecs"].values():
        (container,) = spec["template"]["spec"]["containers"]
        assert container["command"][0] == "python" and (ROOT / container["command"][-1]).is_file()


def test_operations_doc_gives_metacontrollers_write_budget_and_is_linked():
    text = (ROOT / "docs" / "operations.md").read_text()
    assert "docs/operations.md" in (ROOT / "README.md").read_text()
    assert "`--client-go-qps`" in text and "`--client-go-burst`" in text
    # A Pod and a Service per replica plus the cluster ConfigMap, at Metacontroller's default 5 writes/s.
    for replicas, seconds in re.findall(r"^\| ([\d,]+) \| about [\d,]+ \| about \**(\d+) s", text, re.M):
        assert round((2 * int(replicas.replace(",", "")) + 1) / 5) == int(seconds)
    assert "| 1,000 | about 2,001 | about **400 s**" in text


def test_rbac_comment_lists_what_a_narrowed_metacontroller_role_still_needs():
    comment = (ROOT / "metacontroller" / "rbac.yaml").read_text().split("apiVersion:")[0]
    for need in ("compositecontrollers", "controllerrevisions", "customresourcedefinitions", "events", "leases"):
        assert need in comment
