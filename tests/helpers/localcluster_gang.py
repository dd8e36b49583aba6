"""Local-cluster fixtures for gang scheduling: a controller installed from the guide, a kubelet that refuses a pod, a scheduled pod."""

from __future__ import annotations

from pathlib import Path

from helpers.gang_manifests import readme_kustomizations, write_kustomization
from helpers.manifests import render, the
from localcluster.cluster import LocalCluster
from localcluster.config import ControllerConfig, parse_composite_controller
from localcluster.store import StoreError


def gang_controller(tmp_path: Path, component: str, controller: str = "mxjob-controller") -> ControllerConfig:
    """A CompositeController as the kustomization in docs/gang-scheduling.md with a gang component renders it."""
    install = write_kustomization(tmp_path / "install", readme_kustomizations()[component])
    rendered = the(render(install), "CompositeController", controller)
    return parse_composite_controller(rendered, f"docs/gang-scheduling.md kustomization with {component}")


def refuse_creating(cluster: LocalCluster, pod_name: str) -> list[bool]:
    """Make the API refuse one pod (as a ResourceQuota would) until the returned flag is cleared."""
    refusing = [True]
    create = cluster.store.create

    def quota_create(obj, **options):
        if refusing[0] and obj.get("kind") == "Pod" and obj["metadata"]["name"] == pod_name:
            raise StoreError(403, "Forbidden", f"pods {pod_name!r} is forbidden: exceeded quota")
        return create(obj, **options)

    cluster.store.create = quota_create  # type: ignore[method-assign]
    return refusing


def scheduled(pod: dict) -> dict:
    return next((c for c in pod.get("status", {}).get("conditions", []) if c["type"] == "PodScheduled"), {})
