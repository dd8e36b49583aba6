"""Talking to the real API server the `control_plane` fixture starts (tests/conftest.py).

- `fixture_crds()`: CRDs the install needs and this project does not ship: Metacontroller's
  CompositeController (a minimal structural CRD of our own; Metacontroller installs the real one) and
  the Volcano and scheduler-plugins PodGroups (built from the upstream spec schemas in tests/data/podgroup).
- `install(cp)`: those CRDs, then `kubectl apply -k metacontroller/`, once per control plane.
- `Verdict` and `create`/`update`/`update_status`: one object through the server, with what it said (accepted or not,
  the error and its causes, the stored object), through the `kubernetes` client so a case costs milliseconds, not a kubectl.
"""

from __future__ import annotations

import copy
import json
import threading
import time
import warnings as _warnings
from collections.abc import Callable
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


def dynamic(cp: ControlPlane) -> kubernetes.dynamic.DynamicClient:
    """One dynamic client per plane (discovery is read once); call `refresh(cp)` after adding CRDs."""
    if id(cp) not in _CLIENTS:
        _CLIENTS[id(cp)] = _dynamic(cp)
    return _CLIENTS[id(cp)]


def refresh(cp: ControlPlane) -> None:
    _CLIENTS.pop(id(cp), None)


def _write(cp: ControlPlane, method: str, obj: dict, namespace: str | None, *, dry_run: bool, field_validation: str | None,
           subresource: str | None = None) -> Verdict:
    resource = dynamic(cp).resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
    if subresource:
        resource = resource.subresources[subresource]
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
           field_validation: str | None = None) -> Verdict:
    return _write(cp, "create", obj, namespace, dry_run=dry_run, field_validation=field_validation)


def update(cp: ControlPlane, obj: dict, namespace: str | None = None, *, dry_run: bool = False,
           field_validation: str | None = None) -> Verdict:
    """Replace (PUT) obj; it must carry the stored resourceVersion."""
    return _write(cp, "update", obj, namespace, dry_run=dry_run, field_validation=field_validation)


def update_status(cp: ControlPlane, obj: dict, namespace: str | None = None, *, dry_run: bool = False,
                  field_validation: str | None = None) -> Verdict:
    """Replace obj's status through the status subresource (as Metacontroller writes it); obj must carry
    the stored resourceVersion. The server keeps the stored spec whatever obj's says."""
    return _write(cp, "update", obj, namespace, dry_run=dry_run, field_validation=field_validation, subresource="status")


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    """Poll until condition() holds (a CRD change reaches the API server's handlers a moment later)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not after {timeout:.0f} s")
        time.sleep(0.1)
