"""Namespace users' rights on MXJobs and ChainerJobs (metacontroller/user-rbac.yaml), on a real API server.

After `kubectl apply -k metacontroller/`, a user bound in one namespace to the built-in `edit` ClusterRole
(a RoleBinding, as a cluster admin gives a team its namespace) creates, reads, updates and deletes an
MXJob and a ChainerJob there and reads their status; `admin` may do the same; `view` may only read; no
user may write the status (Metacontroller's) nor touch another namespace. The roles reach the built-in
ones through kube-controller-manager's ClusterRole aggregation, as on any cluster. Checked twice: by the
server's answers to impersonated writes, and by `kubectl auth can-i --as`, as the README tells users.
"""

from __future__ import annotations

import copy
import uuid
from collections.abc import Iterator
from pathlib import Path

import kubernetes
import pytest
from helpers import yamlio
from helpers.apiserver import create, dynamic, install, update, user_client, wait_for

from localcluster.controlplane.processes import ControlPlane

pytestmark = pytest.mark.apiserver

ROOT = Path(__file__).resolve().parents[2]
JOBS = {"mxjobs": ROOT / "examples" / "local" / "dist-train-digits.yaml",
        "chainerjobs": ROOT / "examples" / "chainerjob" / "chainerjob-mn.yaml"}
VERBS = ("create", "get", "list", "watch", "update", "patch", "delete")


def aggregated(cp: ControlPlane, role: str, resource: str) -> bool:
    rules = dynamic(cp).resources.get(api_version="rbac.authorization.k8s.io/v1", kind="ClusterRole").get(name=role).rules or []
    return any(resource in (rule.resources or []) for rule in rules)


@pytest.fixture(scope="module")
def installed(control_plane: ControlPlane) -> ControlPlane:
    install(control_plane)
    for role in ("admin", "edit", "view"):
        wait_for(lambda role=role: all(aggregated(control_plane, role, r) for r in JOBS), f"mxjobs in ClusterRole {role}")
    return control_plane


@pytest.fixture
def users(installed: ControlPlane, namespace: str) -> Iterator[dict[str, str]]:
    """One user per built-in role, each bound to it in `namespace` only."""
    names = {role: f"{role}-{uuid.uuid4().hex[:6]}" for role in ("admin", "edit", "view")}
    for role, user in names.items():
        installed.kubectl("create", "rolebinding", f"{user}", f"--clusterrole={role}", f"--user={user}", "-n", namespace)
    yield names


def job_of(resource: str, name: str) -> dict:
    job = yamlio.load(JOBS[resource].read_text())
    job["metadata"] = {"name": name}
    return job


def can_i(cp: ControlPlane, user: str, verb: str, resource: str, namespace: str) -> bool:
    answer = cp.kubectl("auth", "can-i", verb, f"{resource}.kubeflow.org", "--as", user, "-n", namespace, check=False)
    assert answer.stdout.strip() in ("yes", "no"), answer.stderr
    return answer.stdout.strip() == "yes"


@pytest.mark.parametrize("role", ["edit", "admin"])
@pytest.mark.parametrize("resource", list(JOBS))
def test_an_edit_or_admin_user_creates_reads_updates_and_deletes_jobs_in_its_namespace(
        installed: ControlPlane, namespace: str, users: dict[str, str], resource: str, role: str):
    user = users[role]
    job = job_of(resource, f"by-{role}")
    made = create(installed, job, namespace, user=user)
    assert made.accepted, made.message
    client = user_client(installed, user)
    api = client.resources.get(api_version=job["apiVersion"], kind=job["kind"])
    stored = api.get(name=job["metadata"]["name"], namespace=namespace).to_dict()
    assert [item["metadata"]["name"] for item in api.get(namespace=namespace).to_dict()["items"]] == [job["metadata"]["name"]]
    assert api.subresources["status"].get(name=job["metadata"]["name"], namespace=namespace).to_dict()["metadata"]["uid"] \
        == stored["metadata"]["uid"]
    changed = copy.deepcopy(stored)
    changed["metadata"].setdefault("labels", {})["team"] = "vision"
    assert update(installed, changed, namespace, user=user).accepted
    # The status is Metacontroller's: a user's write to it is refused.
    with pytest.raises(kubernetes.dynamic.exceptions.ForbiddenError):
        api.subresources["status"].replace(body={**changed, "status": {"conditions": []}}, namespace=namespace)
    # Not in another namespace.
    assert not create(installed, job, "default", user=user).accepted
    api.delete(name=job["metadata"]["name"], namespace=namespace)
    assert api.get(namespace=namespace).to_dict()["items"] == []


@pytest.mark.parametrize("resource", list(JOBS))
def test_a_view_user_reads_jobs_and_their_status_and_changes_nothing(
        installed: ControlPlane, namespace: str, users: dict[str, str], resource: str):
    job = job_of(resource, "seen")
    assert create(installed, job, namespace).accepted  # by the admin
    viewer = users["view"]
    api = user_client(installed, viewer).resources.get(api_version=job["apiVersion"], kind=job["kind"])
    stored = api.get(name="seen", namespace=namespace).to_dict()
    assert api.subresources["status"].get(name="seen", namespace=namespace).to_dict()["metadata"]["name"] == "seen"
    verdict = create(installed, job_of(resource, "mine"), namespace, user=viewer)
    assert (verdict.accepted, verdict.status) == (False, 403)
    changed = copy.deepcopy(stored)
    changed["metadata"].setdefault("labels", {})["team"] = "vision"
    assert update(installed, changed, namespace, user=viewer).status == 403
    with pytest.raises(kubernetes.dynamic.exceptions.ForbiddenError):
        api.delete(name="seen", namespace=namespace)


@pytest.mark.parametrize("resource", list(JOBS))
def test_kubectl_auth_can_i_says_the_same(installed: ControlPlane, namespace: str, users: dict[str, str], resource: str):
    for role in ("admin", "edit"):
        assert [verb for verb in VERBS if not can_i(installed, users[role], verb, resource, namespace)] == [], role
        assert not can_i(installed, users[role], "create", resource, "default")
    assert [verb for verb in VERBS if can_i(installed, users["view"], verb, resource, namespace)] == ["get", "list", "watch"]
    nobody = f"nobody-{uuid.uuid4().hex[:6]}"
    assert [verb for verb in VERBS if can_i(installed, nobody, verb, resource, namespace)] == []
