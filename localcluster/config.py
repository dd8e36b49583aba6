"""The stand-in's configuration, read from the shipped CompositeController so the manifest is what runs."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

from localcluster.types import ChildRule

REPO_ROOT = Path(__file__).resolve().parent.parent
MANIFEST_DIR = REPO_ROOT / "metacontroller"

# Resource (plural) → kind for the child types the operator may declare. Real Metacontroller
# asks discovery; the local cluster has no API server, so it knows these and rejects the rest.
KNOWN_KINDS: dict[tuple[str, str], str] = {
    ("v1", "pods"): "Pod",
    ("v1", "services"): "Service",
    ("scheduling.volcano.sh/v1beta1", "podgroups"): "PodGroup",
    ("scheduling.x-k8s.io/v1alpha1", "podgroups"): "PodGroup",
    ("scheduling.k8s.io/v1beta1", "podgroups"): "PodGroup",  # served only with GenericWorkload on
    ("v1", "configmaps"): "ConfigMap",
    ("v1", "serviceaccounts"): "ServiceAccount",
    ("rbac.authorization.k8s.io/v1", "roles"): "Role",
    ("rbac.authorization.k8s.io/v1", "rolebindings"): "RoleBinding",
    ("apps/v1", "statefulsets"): "StatefulSet",
    ("batch/v1", "jobs"): "Job",
}
# Kinds a customize hook may relate but no controller has as a child: an MXJob's Kueue Workloads
# (hooks.shared.kueue), served only where Kueue's CRDs are installed.
RELATED_KINDS: dict[tuple[str, str], str] = {
    ("kueue.x-k8s.io/v1beta2", "workloads"): "Workload",
}
PARENT_KINDS: dict[tuple[str, str], str] = {
    ("kubeflow.org/v1", "mxjobs"): "MXJob",
    ("kubeflow.org/v1alpha1", "chainerjobs"): "ChainerJob",
}


@dataclass(frozen=True)
class ControllerConfig:
    """What the stand-in takes from a CompositeController."""

    name: str
    parent_api_version: str
    parent_kind: str
    children: tuple[ChildRule, ...]
    generate_selector: bool
    hook_path: str
    hook_timeout_seconds: float = 10.0
    # The URLs Metacontroller calls (webhook_url): the stand-in calls them when it resolves Service
    # names (LocalCluster(service_dns=True)); otherwise only their paths, on the local hooks server.
    hook_url: str = ""
    customize_url: str | None = None
    resync_period_seconds: float | None = None
    # The customize hook's path (spec.hooks.customize), when the controller has one: its answer
    # names the related objects each sync request carries (docs/chainerjob.md).
    customize_path: str | None = None
    source: str = "built-in default"
    raw: dict[str, Any] = field(default_factory=dict, compare=False)

    def child_key(self, rule: ChildRule) -> str:
        """The request's children map key: `Kind.apiVersion` (`Pod.v1`)."""
        return f"{rule['kind']}.{rule['apiVersion']}"

    def rule_for(self, api_version: str, kind: str) -> ChildRule | None:
        """The child rule for a type, or None when the type is not declared."""
        for rule in self.children:
            if rule["apiVersion"] == api_version and rule["kind"] == kind:
                return rule
        return None


# The MXJob controller docs/architecture.md describes, used only when metacontroller/ has no CompositeController.
DEFAULT_COMPOSITE_CONTROLLER: dict[str, Any] = {
    "apiVersion": "metacontroller.k8s.io/v1alpha1",
    "kind": "CompositeController",
    "metadata": {"name": "mxjob-controller"},
    "spec": {
        "generateSelector": True,
        "parentResource": {"apiVersion": "kubeflow.org/v1", "resource": "mxjobs"},
        "childResources": [
            {"apiVersion": "v1", "resource": "pods", "updateStrategy": {"method": "OnDelete"}},
            {"apiVersion": "v1", "resource": "services", "updateStrategy": {"method": "InPlace"}},
            {"apiVersion": "v1", "resource": "configmaps", "updateStrategy": {"method": "OnDelete"}},
        ],
        "hooks": {"sync": {"webhook": {"service": {"name": "mxjob-hooks", "namespace": "mxjob-system", "port": 80}, "path": "/sync"}}},
    },
}


def find_composite_controllers(directory: Path = MANIFEST_DIR) -> list[tuple[dict[str, Any], str]]:
    """Every document of kind CompositeController in the YAML files of `directory` (file order), with its file."""
    if not directory.is_dir():
        return []
    found: list[tuple[dict[str, Any], str]] = []
    for path in sorted(directory.rglob("*.y*ml")):
        try:
            documents = list(yaml.safe_load_all(path.read_text()))
        except yaml.YAMLError:
            continue
        for doc in documents:
            if isinstance(doc, dict) and doc.get("kind") == "CompositeController":
                found.append((doc, str(path.relative_to(directory.parent))))
    return found


def parse_composite_controller(cc: dict[str, Any], source: str) -> ControllerConfig:
    """Resolve a CompositeController into the stand-in's configuration."""
    spec = cc.get("spec", {})
    parent = spec["parentResource"]
    parent_key = (parent["apiVersion"], parent["resource"])
    if parent_key not in PARENT_KINDS:
        raise ValueError(f"{source}: parent resource {parent_key} is not one the local cluster knows")
    rules: list[ChildRule] = []
    for child in spec.get("childResources", []):
        kind = KNOWN_KINDS.get((child["apiVersion"], child["resource"]))
        if kind is None:
            raise ValueError(f"{source}: child resource {child['apiVersion']}/{child['resource']} is not emulated")
        method = (child.get("updateStrategy") or {}).get("method") or "OnDelete"
        if method not in ("OnDelete", "InPlace", "Recreate"):
            raise ValueError(f"{source}: update strategy {method!r} is not emulated (rolling updates are out of scope)")
        rules.append(ChildRule(apiVersion=child["apiVersion"], resource=child["resource"], kind=kind, updateStrategy=method))
    sync = spec.get("hooks", {}).get("sync", {}).get("webhook", {})
    path = _webhook_path(sync)
    customize = (spec.get("hooks", {}).get("customize") or {}).get("webhook")
    try:
        hook_url, customize_url = webhook_url(sync), webhook_url(customize) if customize else None
    except ValueError as err:
        raise ValueError(f"{source}: {err}") from err
    timeout = sync.get("timeout")
    return ControllerConfig(
        name=cc.get("metadata", {}).get("name", "composite-controller"),
        parent_api_version=parent["apiVersion"],
        parent_kind=PARENT_KINDS[parent_key],
        children=tuple(rules),
        generate_selector=bool(spec.get("generateSelector", False)),
        hook_path=path,
        hook_timeout_seconds=_duration_seconds(timeout) if timeout else 10.0,
        hook_url=hook_url,
        customize_url=customize_url,
        resync_period_seconds=spec.get("resyncPeriodSeconds"),
        customize_path=_webhook_path(customize) if customize else None,
        source=source,
        raw=cc,
    )


def _webhook_path(webhook: dict[str, Any]) -> str:
    """The path a webhook is called at (the stand-in calls the local hooks server there)."""
    if "url" in webhook:
        return urlsplit(webhook["url"]).path or "/"
    return webhook.get("path") or "/"


def webhook_url(webhook: dict[str, Any]) -> str:
    """The URL Metacontroller v4.17 calls for a webhook (pkg/hooks/webhook.go, webhookURL): `url` when
    set, else `<protocol>://<service name>.<service namespace>:<port><path>` (port 80, http by default)."""
    if "url" in webhook:
        return str(webhook["url"])
    service, path = webhook.get("service"), webhook.get("path")
    if not service or path is None:
        raise ValueError("invalid webhook config: must specify either a full 'url', or both 'service' and 'path'")
    if not service.get("name") or not service.get("namespace"):
        raise ValueError("invalid webhook config: 'service' must specify both 'name' and 'namespace'")
    return f"{service.get('protocol', 'http')}://{service['name']}.{service['namespace']}:{service.get('port', 80)}{path}"


def _duration_seconds(value: str | float) -> float:
    """A Go duration such as `10s` or `500ms` (the webhook timeout field) in seconds."""
    if isinstance(value, (int, float)):
        return float(value)
    for suffix, scale in (("ms", 0.001), ("s", 1.0), ("m", 60.0)):
        if value.endswith(suffix):
            return float(value[: -len(suffix)]) * scale
    return float(value)


def load_controller_configs(directory: Path = MANIFEST_DIR) -> list[ControllerConfig]:
    """One configuration per shipped CompositeController (one per job kind), or the MXJob default when there is none."""
    found = find_composite_controllers(directory)
    if not found:
        return [parse_composite_controller(DEFAULT_COMPOSITE_CONTROLLER, "built-in default (no CompositeController in metacontroller/)")]
    configs = [parse_composite_controller(*item) for item in found]
    kinds = [config.parent_kind for config in configs]
    duplicates = sorted({kind for kind in kinds if kinds.count(kind) > 1})
    if duplicates:
        # Two controllers of one parent kind would fight over its children, in a cluster as here.
        raise ValueError(f"metacontroller/: more than one CompositeController for {', '.join(duplicates)}")
    return configs
