"""Talking to the real API server the `control_plane` fixture starts (tests/conftest.py).

- `fixture_crds()`: CRDs the install needs and this project does not ship: Metacontroller's
  CompositeController (a minimal structural CRD of our own; Metacontroller installs the real one) and
  the Volcano and scheduler-plugins PodGroups (built from the upstream spec schemas in tests/data/podgroup).
- `install(cp)`: those CRDs, then `kubectl apply -k metacontroller/`, once per control plane.
- `Verdict` and `create`/`update`: one object through the server, with what it said (accepted or not,
  the error and its causes, the stored object), through the `kubernetes` client so a case costs milliseconds, not a kubectl;
  `user=` writes as someone else (impersonated: `user_client`), so what that user's RBAC allows is checked too.
"""

from __future__ import annotations

import copy
import json
import threading
import warnings as _warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import kubernetes
import yaml

from localcluster.controlplane import ControlPlane

ROOT = Path(__file__).resolve().parents[2]
PODGROUP_SCHEMAS = ROOT / "tests" / "data" / "podgroup"

# group, version, kind, plural, the spec schema file (upstream, see tests/data/podgroup/README.md)
PODGROUP_APIS = (
    ("scheduling.volcano.sh", "v1beta1", "PodGroup", "podgroups", "volcano-v1beta1.yaml"),
    ("scheduling.x-k8s.io", "v1alpha1", "PodGroup", "podgroups", "scheduler-plugins-v1alpha1.yaml"),
)


def _crd(group: str, version: str, kind: str, plural: str, scope: str, spec_schema: dict) -> dict:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {
            "group": group,
            "scope": scope,
            "names": {"kind": kind, "plural": plural, "singular": kind.lower(), "listKind": f"{kind}List"},
            "versions": [{
                "name": version, "served": True, "storage": True,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": spec_schema,
                    "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                }}},
            }],
        },
    }


def fixture_crds() -> list[dict]:
    """The CRDs of the objects we ship or emit that belong to other projects."""
    composite = _crd("metacontroller.k8s.io", "v1alpha1", "CompositeController", "compositecontrollers", "Cluster",
                     {"type": "object", "x-kubernetes-preserve-unknown-fields": True})
    # A *.k8s.io group is protected: the server wants this annotation (Metacontroller's own CRD carries it).
    composite["metadata"]["annotations"] = {"api-approved.kubernetes.io": "unapproved, request not yet submitted"}
    crds = [composite]
    for group, version, kind, plural, schema_file in PODGROUP_APIS:
        spec = yaml.safe_load((PODGROUP_SCHEMAS / schema_file).read_text())
        crds.append(_crd(group, version, kind, plural, "Namespaced", spec))
    return crds


_INSTALL_LOCK = threading.Lock()
_INSTALLED: set[int] = set()


def apply_objects(cp: ControlPlane, objects: list[dict], *args: str) -> Any:
    return cp.kubectl("apply", "-f", "-", *args, input=json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}))


def install(cp: ControlPlane) -> None:
    """Fixture CRDs, then `kubectl apply -k metacontroller/` as "Install in a cluster" says; once per plane."""
    with _INSTALL_LOCK:
        if id(cp) in _INSTALLED:
            return
        apply_objects(cp, fixture_crds())
        cp.kubectl("wait", "--for=condition=Established", "--timeout=60s",
                   *[f"crd/{c['metadata']['name']}" for c in fixture_crds()])
        cp.kubectl("apply", "-k", str(ROOT / "metacontroller"))
        cp.kubectl("wait", "--for=condition=Established", "--timeout=60s", "crd/mxjobs.kubeflow.org", "crd/chainerjobs.kubeflow.org")
        _INSTALLED.add(id(cp))


def api_client(cp: ControlPlane) -> kubernetes.client.ApiClient:
    return kubernetes.config.new_client_from_config(config_file=str(cp.kubeconfig))


@dataclass
class Verdict:
    """What the server answered to one write."""

    accepted: bool
    status: int = 0
    message: str = ""
    stored: dict | None = None
    causes: list[dict] = field(default_factory=list)


def _dynamic(cp: ControlPlane) -> kubernetes.dynamic.DynamicClient:
    return kubernetes.dynamic.DynamicClient(api_client(cp))


_CLIENTS: dict[int, kubernetes.dynamic.DynamicClient] = {}
_USER_CLIENTS: dict[tuple[int, str], kubernetes.dynamic.DynamicClient] = {}


def dynamic(cp: ControlPlane) -> kubernetes.dynamic.DynamicClient:
    """One dynamic client per plane (discovery is read once); call `refresh(cp)` after adding CRDs."""
    if id(cp) not in _CLIENTS:
        _CLIENTS[id(cp)] = _dynamic(cp)
    return _CLIENTS[id(cp)]


def refresh(cp: ControlPlane) -> None:
    _CLIENTS.pop(id(cp), None)
    for key in [key for key in _USER_CLIENTS if key[0] == id(cp)]:
        del _USER_CLIENTS[key]


def user_client(cp: ControlPlane, user: str) -> kubernetes.dynamic.DynamicClient:
    """A dynamic client that acts as `user` (the admin impersonates it: Impersonate-User). A service
    account's user name (`system:serviceaccount:<ns>:<name>`) gets its groups from the server."""
    if (id(cp), user) not in _USER_CLIENTS:
        client = api_client(cp)
        client.set_default_header("Impersonate-User", user)
        _USER_CLIENTS[(id(cp), user)] = kubernetes.dynamic.DynamicClient(client)
    return _USER_CLIENTS[(id(cp), user)]


def get(cp: ControlPlane, api_version: str, kind: str, name: str, namespace: str | None = None) -> dict | None:
    """The stored object, or None when there is none."""
    resource = dynamic(cp).resources.get(api_version=api_version, kind=kind)
    try:
        found = resource.get(name=name, namespace=namespace if resource.namespaced else None)
    except kubernetes.dynamic.exceptions.NotFoundError:
        return None
    return dict(found.to_dict())


def _write(cp: ControlPlane, method: str, obj: dict, namespace: str | None, *, dry_run: bool, field_validation: str | None,
           user: str | None = None) -> Verdict:
    client = dynamic(cp) if user is None else user_client(cp, user)
    resource = client.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
    query = {}
    if dry_run:
        query["dryRun"] = "All"
    if field_validation:
        query["fieldValidation"] = field_validation
    body = copy.deepcopy(obj)
    ns = namespace if resource.namespaced else None
    if ns:
        body.setdefault("metadata", {})["namespace"] = ns
    with _warnings.catch_warnings(record=True):
        try:
            if method == "create":
                answer = resource.create(body=body, namespace=ns, query_params=list(query.items()))
            else:
                answer = resource.replace(body=body, namespace=ns, query_params=list(query.items()))
        except kubernetes.dynamic.exceptions.DynamicApiError as exc:
            details = json.loads(exc.body) if exc.body else {}
            return Verdict(False, exc.status, details.get("message", str(exc)), causes=details.get("details", {}).get("causes", []))
    return Verdict(True, 201 if method == "create" else 200, "", answer.to_dict())


def create(cp: ControlPlane, obj: dict, namespace: str | None = None, *, dry_run: bool = False,
           field_validation: str | None = None, user: str | None = None) -> Verdict:
    return _write(cp, "create", obj, namespace, dry_run=dry_run, field_validation=field_validation, user=user)


def update(cp: ControlPlane, obj: dict, namespace: str | None = None, *, dry_run: bool = False,
           field_validation: str | None = None, user: str | None = None) -> Verdict:
    """Replace (PUT) obj; it must carry the stored resourceVersion."""
    return _write(cp, "update", obj, namespace, dry_run=dry_run, field_validation=field_validation, user=user)
