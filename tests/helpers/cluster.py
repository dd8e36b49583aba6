"""What only the tests ask of the local cluster: lookups of the shipped manifests and of the
emulation's events. Kept here, not in localcluster/, so the local cluster holds only what it runs."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from localcluster.cli.postmortem import FAILED_LOG_LINES, failed_containers
from localcluster.cluster import LocalCluster, condition, finished
from localcluster.config import MANIFEST_DIR, ControllerConfig, find_composite_controllers, load_controller_configs
from localcluster.metacontroller import Event, MetacontrollerStandIn
from localcluster.types import KubeObject


def find_composite_controller(directory: Path = MANIFEST_DIR) -> tuple[dict[str, Any], str] | None:
    """The first CompositeController in `directory`, and its file (None when there is none)."""
    found = find_composite_controllers(directory)
    return found[0] if found else None


def load_controller_config(directory: Path = MANIFEST_DIR, parent_kind: str = "MXJob") -> ControllerConfig:
    """The shipped CompositeController of one parent kind (the first one found when that kind has none)."""
    configs = load_controller_configs(directory)
    return next((config for config in configs if config.parent_kind == parent_kind), configs[0])


def events_for(controller: MetacontrollerStandIn, name: str) -> list[Event]:
    """The emulation's events about one parent, oldest first."""
    return [e for e in list(controller.events) if e.parent == name]


def why_it_ended(cluster: LocalCluster, job: KubeObject | None, namespace: str = "default") -> str:
    """For an assertion's message: the job's Failed condition and the last lines of every container
    that exited non-zero, so a failure on a CI machine says what happened without a rerun."""
    name = (job or {}).get("metadata", {}).get("name", "")
    failed = condition(job, "Failed") or {}
    lines = [f"job {name or '?'} {finished(job)}: {failed.get('message', 'no Failed condition')}"]
    if name:
        for found in failed_containers(cluster, name, namespace):
            tail = found.log.read_text(errors="replace").splitlines()[-FAILED_LOG_LINES:]
            lines += [f"--- {found.pod}/{found.container} exited {found.code} at {found.at}:", *tail]
    return "\n".join(lines)
