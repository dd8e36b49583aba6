"""The install, every job we ship or document, and Metacontroller's rights, on the real API server.

1. `kubectl apply -k metacontroller/` on a fresh server (after the CRDs of other projects it needs,
   helpers/apiserver.py) as the README's "Install in a cluster" says: every object created, both CRDs
   Established, not one warning; then each gang component as docs/gang-scheduling.md adds it.
2. Every MXJob and ChainerJob under examples/ or in a YAML block of README.md and docs/*.md, in every
   version its CRD serves, applied as the README's "Submit and monitor a job" does: stored with the
   defaults the hook assumes, older versions warned about; the status Metacontroller writes (each
   golden answer's, and what the hook writes for an invalid edit) kept whole, shown by `kubectl get`.
3. Metacontroller's ServiceAccount (metacontroller/rbac.yaml) may do every verb it uses on every parent,
   status and child its CompositeControllers name (gang components included), and may create the
   launcher Role and RoleBinding the ChainerJob hook emits: the server's RBAC escalation check passes.
   On a second server with OwnerReferencesPermissionEnforcement (on in OpenShift), it may create a
   child that carries its owner reference (blockOwnerDeletion).

Everything is read from the shipped files (the served versions, printer columns, child rules, the
bound ServiceAccount), so a new example, version or child rule is covered without editing this file.
"""
from __future__ import annotations

import copy
import json
import re
import subprocess
import tempfile
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from helpers import yamlio
from helpers.apiserver import dynamic, install, refresh
from helpers.gang_manifests import readme_kustomizations, write_kustomization
from helpers.golden import golden_statuses
from helpers.manifests import render

from hooks.chainerjob.spec import parse_chainerjob
from hooks.chainerjob.sync import sync_chainerjob
from hooks.mxjob.spec import parse_mxjob
from hooks.mxjob.sync import sync_mxjob
from localcluster.controlplane.processes import ControlPlane, ControlPlaneError

pytestmark = pytest.mark.apiserver

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "golden"
JOB_KINDS = ("MXJob", "ChainerJob")
CRDS = {crd["spec"]["names"]["kind"]: crd
        for crd in (yamlio.load(p.read_text()) for p in sorted((ROOT / "crd").glob("*-crd.yaml")))}
# What the hook assumes for a field left out, which the CRD writes into every stored object (the
# clients of docs/ecosystem.md read stored jobs); ChainerJob's CRD defaults nothing.
HOOK_DEFAULTS: dict[str, dict[str, Any]] = {"MXJob": {"jobMode": "MXTrain", "runPolicy": {}}, "ChainerJob": {}}
PARSE: dict[str, Callable[[Mapping[str, Any]], object]] = {"MXJob": parse_mxjob, "ChainerJob": parse_chainerjob}


def served_versions(kind: str) -> dict[str, str]:
    """Each version the kind's CRD serves, with the warning the server gives for it ("" when none)."""
    return {v["name"]: v.get("deprecationWarning", "") if v.get("deprecated") else ""
            for v in CRDS[kind]["spec"]["versions"] if v["served"]}


def api_group(api_version: str) -> str:
    return api_version.rpartition("/")[0]


def kubectl_ref(obj: Mapping[str, Any]) -> str:
    """How kubectl names an object in what it prints: `kind.group/name` (`kind/name` for the core group)."""
    group = api_group(obj["apiVersion"])
    return f"{obj['kind'].lower()}{'.' + group if group else ''}/{obj['metadata']['name']}"


# ---------------------------------------------------------------------------------------------
# What the project ships and documents


def _jobs_in(docs: list[Any]) -> Iterator[dict]:
    for doc in docs:
        if isinstance(doc, dict) and doc.get("kind") == "List":
            yield from _jobs_in(doc.get("items") or [])
        elif isinstance(doc, dict) and doc.get("kind") in JOB_KINDS:
            yield doc


def shipped_jobs() -> list[tuple[str, dict]]:
    """(where, manifest) for every MXJob and ChainerJob in examples/ and in a YAML block of README.md or docs/*.md."""
    found = []
    for path in sorted([*(ROOT / "examples").rglob("*.yaml"), *(ROOT / "examples").rglob("*.yml")]):
        found += [(f"{path.relative_to(ROOT)}:{job['metadata']['name']}", job)
                  for job in _jobs_in(list(yamlio.load_all(path.read_text())))]
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for block in re.findall(r"```ya?ml\n(.*?)```", path.read_text(), re.S):
            found += [(f"{path.relative_to(ROOT)}:{job['metadata']['name']}", job)
                      for job in _jobs_in(list(yamlio.load_all(block)))]
    return found


SHIPPED_JOBS = shipped_jobs()
JOB_CASES = [pytest.param(job, version, id=f"{where}@{version}")
             for where, job in SHIPPED_JOBS for version in served_versions(job["kind"])]


def documented_columns() -> dict[str, tuple[str, list[str]]]:
    """By kind: the README's `kubectl get <short name>  # NAME, STATE (...), AGE` line, as (resource, columns)."""
    found = {}
    for resource, comment in re.findall(r"^kubectl get (\S+) +# (NAME, .*)$", (ROOT / "README.md").read_text(), re.M):
        kind = next(k for k, crd in CRDS.items() if resource in crd["spec"]["names"].get("shortNames", []))
        found[kind] = (resource, re.findall(r"\b[A-Z]{2,}\b", comment))
    return found


# ---------------------------------------------------------------------------------------------
# Fixtures


@pytest.fixture(scope="module")
def installed(control_plane: ControlPlane) -> subprocess.CompletedProcess[str]:
    """The install (once per plane); the module's dynamic client discovers its CRDs afresh."""
    applied = install(control_plane)
    refresh(control_plane)
    return applied


def resource_of(cp: ControlPlane, api_version: str, kind: str) -> Any:
    return dynamic(cp).resources.get(api_version=api_version, kind=kind)


def watched_version(kind: str) -> str:
    """The apiVersion Metacontroller reads the kind's jobs in (its CompositeController's parentResource)."""
    plural = CRDS[kind]["spec"]["names"]["plural"]
    [parent] = [o["spec"]["parentResource"] for o in render(ROOT / "metacontroller")
                if o["kind"] == "CompositeController" and o["spec"]["parentResource"]["resource"] == plural]
    return str(parent["apiVersion"])


# ---------------------------------------------------------------------------------------------
# 1. The install


def stored_controllers(cp: ControlPlane) -> dict[str, dict]:
    return {c["metadata"]["name"]: c for c in json.loads(cp.kubectl("get", "compositecontrollers", "-o", "json").stdout)["items"]}


def contains(stored: Any, sent: Any) -> bool:
    """Everything sent is stored as sent (the server may add defaults, but drops and changes nothing)."""
    if isinstance(sent, dict):
        return isinstance(stored, dict) and all(k in stored and contains(stored[k], v) for k, v in sent.items())
    return bool(stored == sent)


def test_install_creates_every_object_without_a_warning(control_plane, installed):
    rendered = [o for o in yamlio.load_all(control_plane.kubectl("kustomize", str(ROOT / "metacontroller")).stdout) if o]
    assert installed.stderr == ""
    assert sorted(installed.stdout.splitlines()) == sorted(f"{kubectl_ref(o)} created" for o in rendered)
    # Metacontroller's own CRD (localcluster/thirdparty) keeps every field of our CompositeControllers.
    stored = stored_controllers(control_plane)
    controllers = [o for o in rendered if o["kind"] == "CompositeController"]
    assert sorted(stored) == sorted(c["metadata"]["name"] for c in controllers)
    for controller in controllers:
        assert contains(stored[controller["metadata"]["name"]]["spec"], controller["spec"]), controller["metadata"]["name"]


@pytest.mark.parametrize("kind", sorted(CRDS))
def test_the_job_crd_is_established(control_plane, installed, kind):
    crd = resource_of(control_plane, "apiextensions.k8s.io/v1", "CustomResourceDefinition").get(
        name=CRDS[kind]["metadata"]["name"]).to_dict()
    conditions = {c["type"]: c["status"] for c in crd["status"]["conditions"]}
    assert conditions == {"NamesAccepted": "True", "Established": "True"}
    assert crd["status"]["acceptedNames"]["kind"] == kind


def test_the_hooks_pods_pass_pod_security_in_their_namespace(control_plane, installed):
    """The Deployment is accepted whatever its template says; its pods meet the namespace's enforced level."""
    [deployment] = [o for o in yamlio.load_all(control_plane.kubectl("kustomize", str(ROOT / "metacontroller")).stdout)
                    if o and o["kind"] == "Deployment"]
    template = deployment["spec"]["template"]
    pod = {"apiVersion": "v1", "kind": "Pod", "spec": template["spec"],
           "metadata": {**template["metadata"], "name": "hooks-probe", "namespace": deployment["metadata"]["namespace"]}}
    created = control_plane.kubectl("create", "--dry-run=server", "-f", "-", "-o", "name", input=json.dumps(pod), check=False)
    assert created.returncode == 0, created.stderr
    assert created.stderr == ""


@dataclass
class GangInstall:
    applied: subprocess.CompletedProcess[str]
    rendered: list[dict]
    stored: dict[str, dict]  # CompositeControllers on the server right after the apply, by name


@pytest.fixture(scope="module")
def gang_installs(control_plane, installed, tmp_path_factory) -> Iterator[dict[str, GangInstall]]:
    """Each gang component applied in turn, through the kustomization docs/gang-scheduling.md shows. The plain
    install is applied again afterwards, so every other test sees the README's controllers (the PodGroup
    ClusterRoles stay: they only add rights)."""
    done = {}
    try:
        for component, text in sorted(readme_kustomizations().items()):
            directory = write_kustomization(tmp_path_factory.mktemp(component) / "install", text)
            applied = control_plane.kubectl("apply", "-k", str(directory), check=False)
            rendered = [o for o in yamlio.load_all(control_plane.kubectl("kustomize", str(directory)).stdout) if o]
            done[component] = GangInstall(applied, rendered, stored_controllers(control_plane))
        yield done
    finally:
        control_plane.kubectl("apply", "-k", str(ROOT / "metacontroller"))


@pytest.mark.parametrize("component", sorted(readme_kustomizations()))
def test_gang_component_applies_without_a_warning_and_changes_every_controller(control_plane, installed, gang_installs, component):
    gang = gang_installs[component]
    assert gang.applied.returncode == 0, gang.applied.stderr
    assert gang.applied.stderr == ""
    verdicts = dict(line.rsplit(" ", 1) for line in gang.applied.stdout.splitlines())
    assert set(verdicts) == {kubectl_ref(o) for o in gang.rendered}
    plain = {o["metadata"]["name"]: o for o in yamlio.load_all(
        control_plane.kubectl("kustomize", str(ROOT / "metacontroller")).stdout) if o and o["kind"] == "CompositeController"}
    controllers = [o for o in gang.rendered if o["kind"] == "CompositeController"]
    assert sorted(c["metadata"]["name"] for c in controllers) == sorted(plain) == sorted(gang.stored)
    for controller in controllers:
        name = controller["metadata"]["name"]
        assert verdicts[kubectl_ref(controller)] == "configured"
        stored = gang.stored[name]
        assert contains(stored["spec"], controller["spec"]), name
        # The component adds a podgroups child rule and the scheduler annotation, and changes nothing else.
        added_rules = [r for r in stored["spec"]["childResources"] if r not in plain[name]["spec"]["childResources"]]
        assert [r["resource"] for r in added_rules] == ["podgroups"], name
        assert stored["spec"]["childResources"] == [*plain[name]["spec"]["childResources"], *added_rules]
        added_annotations = set(controller["metadata"]["annotations"]) - set(plain[name]["metadata"].get("annotations", {}))
        assert added_annotations == {"scheduling.kubeflow.org/scheduler-name"}
        assert stored["metadata"]["annotations"][next(iter(added_annotations))] == \
            controller["metadata"]["annotations"][next(iter(added_annotations))]


# ---------------------------------------------------------------------------------------------
# 2. Jobs


@pytest.mark.parametrize("kind", JOB_KINDS)
def test_every_older_version_is_deprecated_with_a_warning_naming_the_stored_one(kind):
    stored = next(v["name"] for v in CRDS[kind]["spec"]["versions"] if v["storage"])
    group = CRDS[kind]["spec"]["group"]
    for version, warning in served_versions(kind).items():
        assert (version == stored) == (warning == ""), version
        assert warning == "" or f"use {group}/{stored}" in warning


def test_every_file_that_holds_a_job_is_searched():
    """The search above misses nothing: each example or doc that spells out a job kind yields a job."""
    sources = {where.split(":")[0] for where, _ in SHIPPED_JOBS}
    spelled = {str(p.relative_to(ROOT)) for p in [*(ROOT / "examples").rglob("*"), ROOT / "README.md", *(ROOT / "docs").glob("*.md")]
               if p.is_file() and p.suffix in (".yaml", ".yml", ".md")
               and re.search(r"^\s*kind: *(MXJob|ChainerJob)\s*$", p.read_text(), re.M)}
    assert sources == spelled
    assert {job["kind"] for _, job in SHIPPED_JOBS} == set(JOB_KINDS)


@pytest.mark.parametrize(("manifest", "version"), JOB_CASES)
def test_every_shipped_job_is_admitted_in_every_served_version(control_plane, installed, namespace, manifest, version):
    kind = manifest["kind"]
    group = CRDS[kind]["spec"]["group"]
    sent = {**copy.deepcopy(manifest), "apiVersion": f"{group}/{version}"}
    applied = control_plane.kubectl("apply", "-f", "-", "-n", namespace, "-o", "json", input=json.dumps(sent), check=False)
    assert applied.returncode == 0, applied.stderr
    warning = served_versions(kind)[version]
    assert applied.stderr.splitlines() == ([f"Warning: {warning}"] if warning else [])
    assert json.loads(applied.stdout)["apiVersion"] == sent["apiVersion"]
    # As Metacontroller reads it: in the version its CompositeController watches.
    stored = resource_of(control_plane, watched_version(kind), kind).get(name=manifest["metadata"]["name"], namespace=namespace).to_dict()
    assert stored["spec"] == {**HOOK_DEFAULTS[kind], **manifest["spec"]}
    # The hook reads the stored job exactly as the manifest: the defaults written are the ones it assumes.
    assert PARSE[kind](stored) == PARSE[kind]({**manifest, "apiVersion": stored["apiVersion"], "metadata": stored["metadata"]})


# The job each status is written onto: the status schema does not depend on the spec.
STATUS_PARENT = {"MXJob": "examples/dist-cpu-train.yaml", "ChainerJob": "examples/chainerjob/chainerjob-mn.yaml"}
# Status fields the CRDs declare that no hook answer holds, and why.
NOT_WRITTEN_BY_THE_HOOK = {
    "observedGeneration": "Metacontroller writes it (the tests add it as it does)",
    "mxReplicaStatuses": "declared so the status mxnet-operator wrote is kept; the hook only reads it",
}


def _hook_status(golden: str, edit: Callable[[dict], None]) -> dict:
    """The status the hook answers to a golden request after `edit`."""
    request = yamlio.load((GOLDEN / golden / "request.yaml").read_text())
    edit(request)
    now = datetime.fromisoformat(request["now"])
    if request["parent"]["kind"] == "MXJob":
        return sync_mxjob(request, now=now)["status"]
    return sync_chainerjob(request, now=now)["status"]


def _invalid_mxjob_edit(request: dict) -> None:
    """A running MXJob edited to an invalid spec, with a malformed counter in its old status."""
    request["parent"]["status"] = yamlio.load((GOLDEN / "running-all-pods-observed" / "response.yaml").read_text())["status"]
    request["parent"]["status"]["restartCount"] = "many"
    request["parent"]["spec"]["mxReplicaSpecs"]["Worker"]["replicas"] = -1


def _malformed_chainerjob_status(request: dict) -> None:
    request["parent"]["status"]["active"] = "many"


def status_cases() -> dict[str, tuple[str, dict]]:
    """(kind, status) the hook writes, by case: every golden answer, and the invalid edits that add
    `specError` and `statusWarnings`."""
    cases = golden_statuses()
    cases["hook-mxjob-invalid-edit-malformed-status"] = (
        "MXJob", _hook_status("running-all-pods-observed", _invalid_mxjob_edit))
    cases["hook-chainerjob-invalid-edit-malformed-status"] = (
        "ChainerJob", _hook_status("chainerjob-invalid-edit-of-running-job", _malformed_chainerjob_status))
    return cases


STATUS_CASES = status_cases()


@pytest.mark.parametrize("kind", JOB_KINDS)
def test_the_status_cases_hold_every_status_field_the_crd_declares(kind):
    declared = set(next(v for v in CRDS[kind]["spec"]["versions"] if v["storage"])
                   ["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"])
    written = {key for case_kind, status in STATUS_CASES.values() if case_kind == kind for key in status}
    assert written == declared - set(NOT_WRITTEN_BY_THE_HOOK)


def create_status_parent(cp: ControlPlane, kind: str, namespace: str) -> tuple[Any, dict]:
    [job] = _jobs_in(list(yamlio.load_all((ROOT / STATUS_PARENT[kind]).read_text())))
    resource = resource_of(cp, watched_version(kind), kind)
    job = {**job, "apiVersion": watched_version(kind), "metadata": {**job["metadata"], "namespace": namespace}}
    return resource, resource.create(body=job, namespace=namespace).to_dict()


def write_status(resource: Any, job: dict, status: dict) -> dict:
    """PUT the status subresource, as Metacontroller does, with the observedGeneration it adds; the stored status."""
    written = resource.status.replace(body={**job, "status": status}, namespace=job["metadata"]["namespace"]).to_dict()
    return dict(written["status"])


@pytest.mark.parametrize("case", sorted(STATUS_CASES))
def test_the_status_metacontroller_writes_is_kept_whole_and_shown(control_plane, installed, namespace, case):
    kind, status = STATUS_CASES[case]
    resource, job = create_status_parent(control_plane, kind, namespace)
    status = {**copy.deepcopy(status), "observedGeneration": job["metadata"]["generation"]}
    write_status(resource, job, status)
    name = job["metadata"]["name"]
    assert resource.get(name=name, namespace=namespace).to_dict()["status"] == status
    # `kubectl get` as the README shows it: the documented columns, STATE the last condition's type.
    command, columns = documented_columns()[kind]
    header, row = control_plane.kubectl("get", command, name, "-n", namespace).stdout.splitlines()
    state = status["conditions"][-1]["type"]
    assert (header.split(), row.split()[:2]) == (columns, [name, state])
    if "progress" in status:  # the Progress column: the least advanced reporter's percentage
        assert row.split()[2] == str(status["progress"]["progressPercentage"])
    # The state is a condition `kubectl wait` sees as met at once (True, and observed at this generation).
    control_plane.kubectl("wait", f"--for=condition={state}", f"{CRDS[kind]['spec']['names']['plural']}/{name}",
                          "-n", namespace, "--timeout=10s")


def test_an_undeclared_status_field_is_pruned(control_plane, installed, namespace):
    """The server does prune: the comparison above would see a field the CRD forgot."""
    resource, job = create_status_parent(control_plane, "MXJob", namespace)
    stored = write_status(resource, job, {"startTime": "2026-11-21T10:00:00Z", "notDeclared": 1})
    assert stored == {"startTime": "2026-11-21T10:00:00Z"}


@pytest.mark.parametrize("kind", JOB_KINDS)
def test_the_documented_columns_are_the_crds(kind):
    version = next(v for v in CRDS[kind]["spec"]["versions"] if v["storage"])
    # Word by word: a column name may have two (LAST REPORT).
    assert documented_columns()[kind][1] == ["NAME", *(word for c in version["additionalPrinterColumns"]
                                                       for word in c["name"].upper().split())]


# ---------------------------------------------------------------------------------------------
# 3. Metacontroller's rights


def metacontroller_subject() -> str:
    """The ServiceAccount metacontroller/rbac.yaml binds (Metacontroller's own), as a user name."""
    rbac = [d for d in yamlio.load_all((ROOT / "metacontroller" / "rbac.yaml").read_text()) if d]
    [subject] = [s for d in rbac if d["kind"] == "ClusterRoleBinding" for s in d["subjects"]]
    assert subject["kind"] == "ServiceAccount"
    return f"system:serviceaccount:{subject['namespace']}:{subject['name']}"


SUBJECT = metacontroller_subject()
PARENT_VERBS = ("get", "list", "watch", "update", "patch")
STATUS_VERBS = ("update", "patch")
# Metacontroller's owner reference in each child sets blockOwnerDeletion, which OwnerReferencesPermissionEnforcement
# (below) allows only to who may update the owner's finalizers.
FINALIZERS_VERBS = ("update",)
CHILD_VERBS = ("get", "list", "watch", "create", "update", "patch", "delete")


def installed_controllers() -> list[dict]:
    """The CompositeControllers of the install and of each gang component's kustomization."""
    with tempfile.TemporaryDirectory() as tmp:
        renders = [render(ROOT / "metacontroller")] + [
            render(write_kustomization(Path(tmp) / component, text)) for component, text in sorted(readme_kustomizations().items())]
    return [o for objects in renders for o in objects if o["kind"] == "CompositeController"]


def metacontroller_rights() -> list[tuple[str, str, str]]:
    """(verb, resource.group, subresource) for everything Metacontroller does to the controllers' parents and children."""
    rights = set()

    def resource(rule: Mapping[str, str]) -> str:
        group = api_group(rule["apiVersion"])
        return f"{rule['resource']}.{group}" if group else rule["resource"]

    for controller in installed_controllers():
        parent = resource(controller["spec"]["parentResource"])
        rights |= {(verb, parent, "") for verb in PARENT_VERBS}
        rights |= {(verb, parent, "status") for verb in STATUS_VERBS}
        rights |= {(verb, parent, "finalizers") for verb in FINALIZERS_VERBS}
        rights |= {(verb, resource(child), "") for child in controller["spec"]["childResources"] for verb in CHILD_VERBS}
    return sorted(rights)


RIGHTS = metacontroller_rights()


# Kubernetes' own PodGroups, served only with the GenericWorkload gate, which this plane keeps off:
# `kubectl auth can-i` needs discovery to name them, so they are asked for by a SubjectAccessReview.
NOT_SERVED_HERE = {"podgroups.scheduling.k8s.io"}


def access_review(cp: ControlPlane, verb: str, resource: str, subresource: str, user: str) -> str:
    """What `kubectl auth can-i` asks the server, without discovery: "yes" or "no"."""
    plural, _, group = resource.partition(".")
    review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": {
        "user": user, "resourceAttributes": {"verb": verb, "group": group, "resource": plural,
                                             "subresource": subresource}}}
    answer = cp.kubectl("create", "-f", "-", "-o", "json", input=json.dumps(review))
    return "yes" if json.loads(answer.stdout)["status"].get("allowed") else "no"


def can_i(cp: ControlPlane, verb: str, resource: str, subresource: str = "", *, user: str = SUBJECT) -> str:
    """`kubectl auth can-i` in every namespace, as `user`: "yes" or "no"."""
    if resource in NOT_SERVED_HERE:
        return access_review(cp, verb, resource, subresource, user)
    args = ["auth", "can-i", verb, resource, "--all-namespaces", f"--as={user}"]
    if subresource:
        args.append(f"--subresource={subresource}")
    answer = cp.kubectl(*args, check=False)
    assert answer.returncode in (0, 1) and answer.stderr == "", answer.stderr
    return answer.stdout.strip()


def test_the_rights_cover_both_kinds_and_every_podgroup_api():
    resources = {resource for _, resource, _ in RIGHTS}
    assert {"mxjobs.kubeflow.org", "chainerjobs.kubeflow.org", "pods", "roles.rbac.authorization.k8s.io",
            "podgroups.scheduling.volcano.sh", "podgroups.scheduling.x-k8s.io", "podgroups.scheduling.k8s.io"} <= resources


@pytest.mark.parametrize(("verb", "resource", "subresource"), RIGHTS,
                         ids=[f"{v}:{r}{'/' + s if s else ''}" for v, r, s in RIGHTS])
def test_metacontroller_may(control_plane, gang_installs, verb, resource, subresource):
    assert can_i(control_plane, verb, resource, subresource) == "yes"


@pytest.mark.parametrize(("verb", "resource"), [("delete", "mxjobs.kubeflow.org"), ("delete", "chainerjobs.kubeflow.org"),
                                                ("get", "secrets"), ("create", "clusterroles.rbac.authorization.k8s.io")])
def test_metacontroller_may_not_do_what_it_does_not_need(control_plane, gang_installs, verb, resource):
    assert can_i(control_plane, verb, resource) == "no"


def test_the_review_of_a_resource_not_served_here_can_say_no(control_plane, gang_installs):
    resource = next(iter(NOT_SERVED_HERE))
    assert can_i(control_plane, "get", resource) == "yes"
    assert can_i(control_plane, "get", resource, user="system:serviceaccount:default:default") == "no"


def launcher_rbac(golden: str, namespace: str) -> list[dict]:
    """The ServiceAccount, Role and RoleBinding a golden ChainerJob answer emits for its launcher, moved to `namespace`."""
    children = yamlio.load((GOLDEN / golden / "response.yaml").read_text())["children"]
    found = []
    for child in copy.deepcopy([c for c in children if c["kind"] in ("ServiceAccount", "Role", "RoleBinding")]):
        child["metadata"]["namespace"] = namespace
        for subject in child.get("subjects", []):
            subject["namespace"] = namespace
        found.append(child)
    return found


LAUNCHER_CASES = sorted(p.parent.name for p in GOLDEN.glob("*/response.yaml")
                        if any(c["kind"] == "Role" for c in yamlio.load(p.read_text())["children"]))


def test_some_golden_answers_emit_a_launcher_role():
    assert len(LAUNCHER_CASES) >= 2


def as_list(objects: list[dict]) -> str:
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": objects})


@pytest.mark.parametrize("golden", LAUNCHER_CASES)
def test_metacontroller_may_create_the_launcher_rbac_the_hook_emits(control_plane, installed, namespace, golden):
    objects = launcher_rbac(golden, namespace)
    created = control_plane.kubectl("create", "-f", "-", f"--as={SUBJECT}", input=as_list(objects), check=False)
    assert created.returncode == 0, created.stderr
    assert created.stderr == ""
    assert created.stdout.splitlines() == [f"{kubectl_ref(o)} created" for o in objects]


def test_the_escalation_check_refuses_the_launcher_role_to_a_role_without_pods_exec(control_plane, installed, namespace):
    """Why rbac.yaml grants pods/exec: with every other rule of its ClusterRole, the Role is refused."""
    [role] = [d for d in yamlio.load_all((ROOT / "metacontroller" / "rbac.yaml").read_text()) if d and d["kind"] == "ClusterRole"]
    narrowed = f"mxjob-metacontroller-without-exec-{uuid.uuid4().hex[:8]}"
    user = f"system:serviceaccount:{namespace}:without-exec"
    cluster_objects = [
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": narrowed},
         "rules": [r for r in role["rules"] if "pods/exec" not in r["resources"]]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": narrowed},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": narrowed},
         "subjects": [{"kind": "ServiceAccount", "name": "without-exec", "namespace": namespace}]},
    ]
    assert len(cluster_objects[0]["rules"]) == len(role["rules"]) - 1
    control_plane.kubectl("create", "-f", "-", input=as_list(cluster_objects))
    try:
        [launcher_role] = [o for o in launcher_rbac(LAUNCHER_CASES[0], namespace) if o["kind"] == "Role"]
        assert can_i(control_plane, "create", "roles.rbac.authorization.k8s.io", user=user) == "yes"
        refused = control_plane.kubectl("create", "-f", "-", f"--as={user}", input=json.dumps(launcher_role), check=False)
        assert refused.returncode == 1, refused.stdout
        assert "is attempting to grant RBAC permissions not currently held" in refused.stderr
        assert "pods/exec" in refused.stderr
    finally:
        control_plane.kubectl("delete", "-f", "-", "--wait=false", input=as_list(cluster_objects), check=False)



# The admission plugin OpenShift and hardened clusters turn on (it is off by default): an owner reference with
# blockOwnerDeletion, as Metacontroller writes into every child, needs update on the owner's finalizers.
OWNER_REFERENCE_ENFORCEMENT = "--enable-admission-plugins=OwnerReferencesPermissionEnforcement"


@pytest.fixture(scope="module")
def enforcing_plane() -> Iterator[ControlPlane]:
    """A second control plane, with OwnerReferencesPermissionEnforcement on, and the install."""
    plane = ControlPlane(extra_apiserver_flags=(OWNER_REFERENCE_ENFORCEMENT,))
    try:
        plane.start()
    except ControlPlaneError as exc:
        pytest.fail(f"the control plane with {OWNER_REFERENCE_ENFORCEMENT} did not start: {exc}", pytrace=False)
    try:
        install(plane)
        yield plane
    finally:
        plane.stop()


def owned_child(job: Mapping[str, Any], name: str) -> dict:
    """A ConfigMap (a child of every CompositeController) owned by `job` as Metacontroller owns its children."""
    owner = {"apiVersion": job["apiVersion"], "kind": job["kind"], "name": job["metadata"]["name"],
             "uid": job["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": job["metadata"]["namespace"], "ownerReferences": [owner]}}


@pytest.mark.parametrize("kind", JOB_KINDS)
def test_metacontroller_may_create_children_where_owner_references_are_enforced(enforcing_plane, kind):
    plural = CRDS[kind]["spec"]["names"]["plural"]
    children = {(r["apiVersion"], r["resource"]) for c in installed_controllers()
                if c["spec"]["parentResource"]["resource"] == plural for r in c["spec"]["childResources"]}
    assert ("v1", "configmaps") in children
    namespace = f"t-{uuid.uuid4().hex[:10]}"
    enforcing_plane.kubectl("create", "namespace", namespace)
    [manifest] = _jobs_in(list(yamlio.load_all((ROOT / STATUS_PARENT[kind]).read_text())))
    job = json.loads(enforcing_plane.kubectl("create", "-n", namespace, "-o", "json", "-f", "-",
                                             input=json.dumps({**manifest, "apiVersion": watched_version(kind)})).stdout)
    created = enforcing_plane.kubectl("create", "-f", "-", f"--as={SUBJECT}", input=json.dumps(owned_child(job, "owned")), check=False)
    assert created.returncode == 0, created.stderr
    # The plugin is on: one who may create ConfigMaps but not update the job's finalizers is refused the same child.
    user = "without-finalizers"
    enforcing_plane.kubectl("create", "role", user, "--verb=create", "--resource=configmaps", "-n", namespace)
    enforcing_plane.kubectl("create", "rolebinding", user, f"--role={user}", f"--serviceaccount={namespace}:{user}", "-n", namespace)
    refused = enforcing_plane.kubectl("create", "-f", "-", f"--as=system:serviceaccount:{namespace}:{user}",
                                      input=json.dumps(owned_child(job, "refused")), check=False)
    assert refused.returncode == 1, refused.stdout
    assert "cannot set blockOwnerDeletion if an ownerReference refers to a resource you can't set finalizers on" in refused.stderr
