"""Kubernetes' own gang scheduling (scheduling.k8s.io/v1beta1 PodGroups): what a control plane needs to
serve it, and which golden requests need such a plane (the session's plane has the gate off, so its API
server would refuse their PodGroups and silently drop their pods' spec.schedulingGroup)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from helpers import yamlio

KUBERNETES_GANG_API = "scheduling.k8s.io/v1beta1"
# ControlPlane(**GENERIC_WORKLOAD): the gate on kube-apiserver and kube-scheduler, and the API served.
GENERIC_WORKLOAD: dict[str, Any] = {
    "feature_gates": ("GenericWorkload=true",),
    "extra_apiserver_flags": (f"--runtime-config={KUBERNETES_GANG_API}=true",),
}
GOLDEN = Path(__file__).resolve().parents[1] / "golden"


def needs_generic_workload(request: dict[str, Any]) -> bool:
    """Whether a sync request's controller has Kubernetes' own PodGroups as children."""
    rules = ((request.get("controller") or {}).get("spec") or {}).get("childResources") or []
    return any(rule.get("apiVersion") == KUBERNETES_GANG_API for rule in rules)


def golden_names(*, generic_workload: bool) -> list[str]:
    """The golden folders whose request does (or does not) need the gate."""
    return sorted(p.name for p in GOLDEN.iterdir() if p.is_dir() and needs_generic_workload(
        yamlio.load((p / "request.yaml").read_text())) is generic_workload)
