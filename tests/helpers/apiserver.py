"""Talking to the real API server the `control_plane` fixture starts (tests/conftest.py).

- `fixture_crds()`: CRDs the install needs and this project does not ship (localcluster/thirdparty:
  Metacontroller's own CompositeController CRD, so the server validates our controllers, and the Volcano
  and scheduler-plugins PodGroups with their upstream spec schemas).
- `install(cp)`: those CRDs, then `kubectl apply -k metacontroller/`, once per control plane; it returns what
  that first apply printed.
- `Verdict` and `create`/`update`/`update_status`: one object through the server, with what it said (accepted or not,
  the error and its causes, the stored object), through the `kubernetes` client so a case costs milliseconds, not a kubectl;
  `user=` writes as someone else (impersonated: `user_client`), so what that user's RBAC allows is checked too.
"""

from __future__ import annotations

import copy
import json
import subprocess
import threading
import time
import warnings as _warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import kubernetes

from localcluster.controlplane.processes import ControlPlane
from localcluster.thirdparty import third_party_crds

ROOT = Path(__file__).resolve().parents[2]


def fixture_crds() -> list[dict]:
    """The CRDs of the objects we ship or emit that belong to other projects (localcluster.thirdparty)."""
    return third_party_crds()


_INSTALL_LOCK = threading.Lock()
_INSTALLED: dict[int, subprocess.CompletedProcess[str]] = {}


def apply_objects(cp: ControlPlane, objects: list[dict], *args: str) -> Any:
    return cp.kubectl("apply", "-f", "-", *args, input=json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}))


def install(cp: ControlPlane) -> subprocess.CompletedProcess[str]:
    """Fixture CRDs, then `kubectl apply -k metacontroller/` as "Install in a cluster" says; once per plane.

    Returns what that first apply, on the fresh server, printed (stdout names each object, stderr holds any warning).
    """
    with _INSTALL_LOCK:
        if id(cp) not in _INSTALLED:
            apply_objects(cp, fixture_crds())
            cp.wait_established(*(c["metadata"]["name"] for c in fixture_crds()))
            applied = cp.kubectl("apply", "-k", str(ROOT / "metacontroller"))
            cp.wait_established("mxjobs.kubeflow.org", "chainerjobs.kubeflow.org")
            _INSTALLED[id(cp)] = applied
        return _INSTALLED[id(cp)]


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
           user: str | None = None, subresource: str | None = None) -> Verdict:
    client = dynamic(cp) if user is None else user_client(cp, user)
    resource = client.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
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
           field_validation: str | None = None, user: str | None = None) -> Verdict:
    return _write(cp, "create", obj, namespace, dry_run=dry_run, field_validation=field_validation, user=user)


def update(cp: ControlPlane, obj: dict, namespace: str | None = None, *, dry_run: bool = False,
           field_validation: str | None = None, user: str | None = None) -> Verdict:
    """Replace (PUT) obj; it must carry the stored resourceVersion."""
    return _write(cp, "update", obj, namespace, dry_run=dry_run, field_validation=field_validation, user=user)


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
