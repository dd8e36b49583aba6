"""The docs stand alone and say what the code does: no references outside the repository, the
CLI's exit codes and the defaults as implemented, and a sample request that the server answers."""

from __future__ import annotations

import io
import json
import re
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import pytest
from helpers import yamlio
from helpers.crd import pruned_paths, schema_errors

import hooks
from hooks.chainerjob.sync import CHILD_KEYS, sync_chainerjob
from hooks.mxjob.runpolicy import RunPolicy
from hooks.server.app import create_app
from localcluster.cli import commands as cli

ROOT = Path(__file__).resolve().parents[2]
TESTS_INDEX = ROOT / "tests" / "README.md"
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), TESTS_INDEX]
OUTSIDE = re.compile(r"\.\./shared|DESIGN(\.md| \d)|reference/\w+\.md")
LINK = re.compile(r"\]\(([^)#]+)(#[^)]*)?\)")
ANCHORED_LINK = re.compile(r"\]\(([^)#]*)#([^)]+)\)")


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_docs_never_point_outside_the_repository(doc: Path):
    text = doc.read_text()
    assert not OUTSIDE.findall(text)
    prose = re.sub(r"```.*?```|`[^`]*`", "", text, flags=re.S)  # code is not a link
    for target, _ in LINK.findall(prose):
        if "://" in target:
            continue
        resolved = (doc.parent / target).resolve()
        assert resolved.is_relative_to(ROOT) and resolved.exists(), f"{doc.name} links to {target}"


def test_the_tests_index_names_modules_tests_and_table_rows_that_exist():
    """tests/README.md sends a reader to a module, a test in it (`::name`, of the module named last) and a
    row of docs/lifecycle.md's transition table: each must be there, or the index sends them nowhere."""
    text = TESTS_INDEX.read_text()
    missing, module = [], None
    for token in re.findall(r"`([^`]+)`", text):
        if match := re.fullmatch(r"([a-z]+/test_\w+\.py)((?:::test_\w+)?)", token):
            module, name = ROOT / "tests" / match[1], match[2].removeprefix("::")
        elif match := re.fullmatch(r"::(test_\w+)", token):
            name = match[1]
        else:
            continue
        if module is None or not module.exists():
            missing.append(token)
        elif name and not re.search(rf"^def {name}\(", module.read_text(), re.M):
            missing.append(f"{module.relative_to(ROOT)}::{name}")
    assert module is not None and missing == []
    rows = {int(n) for n in re.findall(r"^\| (\d+) \|", (ROOT / "docs" / "lifecycle.md").read_text(), re.M)}
    cited = {int(n) for cell in re.findall(r"\brows? ([\d, -]+\d)", text) for part in cell.split(",")
             for n in range(int(part.split("-")[0]), int(part.split("-")[-1]) + 1)}
    assert cited and cited <= rows


def test_the_docs_index_lists_every_document_once_and_the_readme_points_at_it():
    index = ROOT / "docs" / "README.md"
    listed = re.findall(r"^\| \[[^]]+\]\(([^)]+)\) \| .+ \|$", index.read_text(), re.M)
    documents = sorted(p.name for p in (ROOT / "docs").glob("*.md") if p != index)
    assert sorted(t for t in listed if "/" not in t) == documents
    assert len(listed) == len(set(listed))
    assert "](docs/README.md)" in readme_section("More documentation")


# A table cell is read at a glance: at most a few lines once rendered, the detail as text under the table.
LONGEST_CELL = 300
# Documents whose tables still hold longer cells, to be split (a ratchet: this list only shrinks).
LONG_CELL_DEBT = {"docs/architecture.md", "docs/localcluster.md", "tests/README.md"}


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_table_cell_is_longer_than_a_few_lines(doc: Path):
    text = re.sub(r"```.*?```", "", doc.read_text(), flags=re.S)
    cells = [cell.strip() for line in text.splitlines() if line.startswith("|") for cell in line.split(" | ")]
    long = [cell[:60] for cell in cells if len(cell) > LONGEST_CELL]
    if str(doc.relative_to(ROOT)) in LONG_CELL_DEBT:
        assert long, "no long cell left: take the document off LONG_CELL_DEBT"
    else:
        assert long == []


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


def guide_jobs(kind: str) -> list[dict]:
    """The guide's manifests of one kind (its other YAML blocks are fragments)."""
    text = (ROOT / "docs" / "write-a-job.md").read_text()
    blocks = [yamlio.load(block) for block in re.findall(r"```yaml\n(.*?)```", text, re.S)]
    return [block for block in blocks if block.get("kind") == kind]


def test_the_guides_job_is_a_valid_mxjob_for_the_local_cluster():
    (job,) = guide_jobs("MXJob")
    request = {"controller": {}, "parent": {**job, "metadata": {**job["metadata"], "namespace": "default", "uid": "u1",
                                                               "generation": 1}},
               "children": {"Pod.v1": {}, "Service.v1": {}, "ConfigMap.v1": {}}, "related": {}, "finalizing": False}
    response = create_app().test_client().post("/sync", json=request)
    assert response.status_code == 200
    assert json.loads(response.data)["status"]["conditions"][-1]["type"] == "Created"
    for spec in job["spec"]["mxReplicaSpecs"].values():
        (container,) = spec["template"]["spec"]["containers"]
        assert container["command"][0] == "python" and (ROOT / container["command"][-1]).is_file()


def anchors(doc: Path) -> set[str]:
    """The anchors GitHub gives a document's headings: lower case, punctuation dropped, spaces as '-'."""
    text = re.sub(r"```.*?```", "", doc.read_text(), flags=re.S)
    return {re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")
            for title in re.findall(r"^#+ (.+)$", text, re.M)}


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_link_to_a_section_finds_its_heading(doc: Path):
    prose = re.sub(r"```.*?```|`[^`]*`", "", doc.read_text(), flags=re.S)
    for target, anchor in ANCHORED_LINK.findall(prose):
        if "://" in target:
            continue
        assert anchor in anchors(doc.parent / target if target else doc), f"{doc.name} links to {target}#{anchor}"


def test_the_readme_starts_with_a_contents_list_of_its_own_sections():
    readme = (ROOT / "README.md").read_text()
    contents = readme.split("## Contents", 1)[1].split("\n## ", 1)[0]
    listed = re.findall(r"\]\(#([^)]+)\)", contents)
    sections = [s for s in anchors(ROOT / "README.md") if s != "contents"]
    # Every top-level section is listed (the anchors check above proves each entry resolves).
    top = {re.sub(r"[^\w\- ]", "", t.strip().lower()).replace(" ", "-") for t in re.findall(r"^## (.+)$", readme, re.M)}
    assert top - {"contents"} == set(listed), "README contents list and its ## sections differ"
    assert set(listed) <= set(sections)
    # User-facing sections first: the internals moved to docs/, and the quick start leads.
    assert listed[0] == "quick-start-no-cluster-needed"


def test_one_version_everywhere():
    """The VERSION file is the release: the package, the hooks image tag of the install, the newest
    CHANGELOG entry (with an Unreleased heading kept above it) and the README's build commands agree."""
    version = (ROOT / "VERSION").read_text().strip()
    assert re.fullmatch(r"\d+\.\d+\.\d+", version)
    assert hooks.__version__ == version
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert 'dynamic = ["version"]' in pyproject and 'version = {file = "VERSION"}' in pyproject
    assert not re.search(r'^version = "', pyproject, re.M)
    kustomization = yamlio.load((ROOT / "metacontroller" / "kustomization.yaml").read_text())
    assert [i["newTag"] for i in kustomization["images"] if i["name"] == "mxjob-hooks"] == [version]
    changelog = re.findall(r"^## (Unreleased|\d+\.\d+\.\d+)", (ROOT / "CHANGELOG.md").read_text(), re.M)
    assert changelog[:2] == ["Unreleased", version]
    readme = (ROOT / "README.md").read_text()
    assert f"Version {version}" in readme
    tags = set(re.findall(r"mxjob-hooks:(\d+\.\d+\.\d+)", readme)) | set(re.findall(r"newTag: (\S+)", readme))
    assert tags == {version}


def test_the_quick_start_says_where_the_accuracy_is():
    readme = (ROOT / "README.md").read_text()
    quick = readme.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    example = yamlio.load((ROOT / "examples" / "local" / "dist-train-digits.yaml").read_text())
    name = example["metadata"]["name"]
    assert f".localcluster/default/{name}/{name}-worker-0.log" in quick
    script = (ROOT / "examples" / "digits" / "train.py").read_text()
    # The line the README tells the reader to look for is the one the training script prints.
    assert "final validation-accuracy=" in quick and 'final validation-accuracy={val_acc:.4f}' in script
    assert "train-accuracy=" in quick and "validation-accuracy={val_acc:.4f} time=" in script


def test_the_chainerjob_master_default_retry_limit_is_stated():
    readme = (ROOT / "README.md").read_text()
    chainer = readme.split("## ChainerJob", 1)[1].split("\n## ", 1)[0]
    assert re.search(r"`backoffLimit`.*?batch Job default applies: 6", chainer, re.S)


def test_the_guides_chainerjob_is_valid_and_runs_the_shipped_script():
    (job,) = guide_jobs("ChainerJob")
    crd = yamlio.load((ROOT / "crd" / "chainerjob-crd.yaml").read_text())
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    assert schema_errors(job, schema) == [] and pruned_paths(job, schema) == []
    parent = {**job, "metadata": {**job["metadata"], "namespace": "default", "uid": "u1", "generation": 1}}
    answer = sync_chainerjob({"parent": parent, "children": {k: {} for k in CHILD_KEYS}},
                             now=datetime(2025, 1, 1, tzinfo=UTC), kubectl_image="kubectl:test")
    assert "specError" not in answer["status"]
    assert [c["kind"] for c in answer["children"] if c["kind"] == "StatefulSet"] == ["StatefulSet"]
    command = job["spec"]["master"]["template"]["spec"]["containers"][0]["command"]
    assert command[0] == "mpiexec" and (ROOT / command[-1]).is_file()
    # The same ranks and script as the shipped example the local cluster runs in the tests.
    shipped = yamlio.load((ROOT / "examples" / "local" / "chainer-mn-digits.yaml").read_text())
    assert shipped["spec"]["master"]["template"]["spec"]["containers"][0]["command"][:3] == command[:3]


def test_the_guide_names_the_cluster_side_guard_against_a_hung_job():
    text = (ROOT / "docs" / "write-a-job.md").read_text()
    fragment = [yamlio.load(b) for b in re.findall(r"```yaml\n(.*?)```", text, re.S) if "kind:" not in b]
    assert {"spec": {"runPolicy": {"activeDeadlineSeconds": 3600}}} in fragment
    assert "spec.master.activeDeadlineSeconds" in text


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
    for need in ("compositecontrollers", "decoratorcontrollers", "controllerrevisions", "customresourcedefinitions", "events",
                 "namespaces", "leases"):
        assert need in comment


def test_no_code_or_test_points_outside_the_project():
    # The project stands alone: code and tests name its own docs, never notes kept outside it.
    tracked = subprocess.run(["git", "ls-files", "*.py", "Makefile", "*.yaml", "*.toml", "*.txt", ".ci/*"],
                             cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    found = [f"{path}: {hit}" for path in tracked if path != "tests/install/test_docs.py"
             for hit in OUTSIDE.findall(allowed_outside(path, (ROOT / path).read_text(errors="replace")))]
    assert found == []


def allowed_outside(path: str, text: str) -> str:
    """The text a test reads for pointers outside the project: all of it but CI's entry point, which alone
    may hand the tests a binary CI provides beside the checkout (tests/README.md, "Two Metacontrollers")."""
    return "" if path == ".ci/run" else text


# --- what a new user meets ---------------------------------------------------------------------------------


def readme_section(title: str) -> str:
    return (ROOT / "README.md").read_text().split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def test_the_install_pins_the_supported_metacontroller_and_says_how_to_install_it():
    install = readme_section("Install in a cluster")
    assert "kubectl apply -k 'github.com/metacontroller/metacontroller/manifests/production?ref=v4.17.2'" in install
    assert "git checkout v4.17.2 && kubectl apply -k manifests/production" in install
    assert "Other Metacontroller\nversions are not supported" in install
    assert "| Metacontroller | v4.17.x, install v4.17.2" in readme_section("Supported versions")
    # The ServiceAccount the pinned manifests create is the one rbac.yaml binds.
    binding = [d for d in yamlio.load_all((ROOT / "metacontroller" / "rbac.yaml").read_text()) if d["kind"] == "ClusterRoleBinding"]
    assert binding[0]["subjects"] == [{"kind": "ServiceAccount", "name": "metacontroller", "namespace": "metacontroller"}]


def test_the_install_check_names_what_the_install_creates():
    check = readme_section("Check the install")
    rendered = {(d["kind"], d["metadata"]["name"]) for d in yamlio.load_all(subprocess.run(
        ["kubectl", "kustomize", str(ROOT / "metacontroller")], capture_output=True, text=True, check=True).stdout)}
    for crd in re.findall(r"crd/(\S+)", check):
        assert ("CustomResourceDefinition", crd) in rendered
    assert re.findall(r"crd/(\S+)", check) == ["mxjobs.kubeflow.org", "chainerjobs.kubeflow.org"]
    [deployment] = re.findall(r"deployment/(\S+) --timeout", check)
    assert ("Deployment", deployment) in rendered
    for controller in ("mxjob-controller", "chainerjob-controller"):
        assert ("CompositeController", controller) in rendered and controller in check
    smoke = yamlio.load((ROOT / "examples" / "smoke.yaml").read_text())
    assert f"kubectl wait --for=condition=Succeeded mxjob/{smoke['metadata']['name']}" in check
    assert "kubectl apply -f examples/smoke.yaml" in check


@pytest.mark.apiserver
def test_the_smoke_job_uses_a_public_image_and_succeeds_on_the_local_cluster(tmp_path: Path):
    smoke = yamlio.load((ROOT / "examples" / "smoke.yaml").read_text())
    [container] = smoke["spec"]["mxReplicaSpecs"]["Worker"]["template"]["spec"]["containers"]
    # The hooks image's own base (Dockerfile), published on Docker Hub, not an image of this project.
    assert f"FROM {container['image']}" in (ROOT / "Dockerfile").read_text()
    args = cli.parser().parse_args(["--state-dir", str(tmp_path), "run", str(ROOT / "examples" / "smoke.yaml"),
                                    "--timeout", "60"])
    out = io.StringIO()
    assert cli.run(args, out=out, err=io.StringIO()) == cli.EXIT_SUCCEEDED
    assert "smoke: the MXJob operator ran this pod" in (tmp_path / "default" / "smoke" / "smoke-worker-0.log").read_text().splitlines()
    assert out.getvalue().strip().endswith("MXJob default/smoke Succeeded")


def test_submit_and_monitor_builds_the_image_it_submits():
    section = readme_section("Submit and monitor a job")
    job = yamlio.load((ROOT / "examples" / "digits" / "mxjob.yaml").read_text())
    images = {c["image"] for spec in job["spec"]["mxReplicaSpecs"].values() for c in spec["template"]["spec"]["containers"]}
    assert images == {"mxjob/digits-example:1.9.1"}
    assert "docker build -f examples/digits/Dockerfile -t <registry>/digits-example:1.9.1 ." in section
    assert "sed 's#image: mxjob/digits-example:1.9.1#image: <registry>/digits-example:1.9.1#' examples/digits/mxjob.yaml" in section
    assert f"job-name={job['metadata']['name']}" in section
    assert "dist-cpu-train.yaml\n" not in section.split("Examples, and where")[0]


def test_kueue_is_said_plainly_with_its_version_range():
    readme = (ROOT / "README.md").read_text()
    assert "Kueue v0.5 to\nv0.10" in readme
    assert "**Kueue v0.11 and later have no MXJob\nintegration**: there the `kueue.x-k8s.io/queue-name` label does nothing" in readme
    kueue = (ROOT / "docs" / "ecosystem.md").read_text().split("\n## Kueue\n", 1)[1].split("\n## ", 1)[0]
    assert kueue.startswith("\n**Supported: Kueue v0.5 to v0.10; Kueue v0.11 and later in part (below).**")
    assert "the job runs at once, outside any quota" in kueue
    # The part that works on Kueue v0.11 and later, how to turn it on, and what does not work yet.
    assert "**Kueue v0.11 and later: plain-pod groups (in progress).**" in kueue
    assert "`MXJOB_KUEUE_POD_GROUPS=true`" in kueue and "Not done yet:" in kueue


def test_the_readme_says_what_make_test_leaves_on_disk_and_how_to_remove_it():
    quick = readme_section("Quick start (no cluster needed)")
    assert "`make test` leaves about 0.8 GB in `.image-check/`" in quick and "`make clean`" in quick
    clean = (ROOT / "Makefile").read_text().split("\nclean:\n", 1)[1].splitlines()[0]
    assert ".image-check" in clean and ".controlplane" in clean


def test_the_readme_and_localcluster_doc_say_run_validates_as_kubectl_apply():
    assert "refuses the file, exit 2, naming every such field, as `kubectl apply` does by default" in (ROOT / "README.md").read_text()
    assert "| `strict` (or `true`; the default) |" in (ROOT / "docs" / "localcluster.md").read_text()
    assert cli.parser().parse_args(["run", "x.yaml"]).validate == "strict"


USER_FILES = [ROOT / "README.md", ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").glob("*.md")),
              *sorted(p for p in (ROOT / "examples").rglob("*") if p.suffix in (".yaml", ".py", ".md") or p.name == "Dockerfile")]


@pytest.mark.parametrize("path", USER_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_internal_notes_in_user_files(path: Path):
    text = path.read_text()
    notes = re.findall(r"(?i)\bseed \d{3}\b|\bturn \d+\b|\bissue \d+\b|\(for the changelog\)|\bFINDINGS-\w"
                       r"|spec was silent|the task left|no registry is reachable|\b(?:this|one|same|other) sessions?\b"
                       r"|starting commit", text)
    assert notes == [], notes
