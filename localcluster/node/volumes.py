"""Pod volumes on disk and the mapping of container paths onto them (there are no mount namespaces here).

A pod's emptyDir, configMap and projected volumes are directories under its state dir (the
projected `kube-api-access-*` volume with the ServiceAccount token the kubelet requests). A container's
`volumeMounts` cannot be bind-mounted (every process shares this machine's filesystem), so each
mountPath is rewritten to its directory wherever the local cluster hands the container a path: in
`command`, `args`, `workingDir` and env values, and in the text of the files a configMap volume
writes (scripts that name other mounted paths). A program that builds a mounted path itself, from
pieces the rewrite cannot see, will not find it.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from localcluster.types import KubeObject

DEFAULT_MODE = 0o644  # a configMap volume's defaultMode
SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"  # where admission mounts kube-api-access-*
DEFAULT_TOKEN_SECONDS = 3600  # a serviceAccountToken projection's default expirationSeconds

# (audience or None for the API server's, expirationSeconds) → a token bound to this pod, or None
# when the kubelet cannot ask for one.
TokenRequester = Callable[[str | None, int], str | None]


class VolumeNotReady(Exception):
    """A volume cannot be set up yet: the pod waits (ContainerCreating) and the kubelet tries again."""


class MissingConfigMap(VolumeNotReady):
    """A configMap volume names a ConfigMap that does not exist (yet): the pod waits, as in Kubernetes."""


class TokenUnavailable(VolumeNotReady):
    """The API server refused or did not answer the TokenRequest for a projected volume's token."""


class PathMap:
    """mountPath → directory for one container; rewrites every occurrence of a mountPath in a string."""

    def __init__(self, mounts: dict[str, Path]):
        self.mounts = {path.rstrip("/") or "/": directory for path, directory in mounts.items()}
        # Longest first, so /a/b wins over /a; a mountPath matches only as a whole path prefix.
        ordered = sorted(self.mounts, key=len, reverse=True)
        self._pattern = re.compile("|".join(f"{re.escape(p)}(?=/|$|[^A-Za-z0-9_.-])" for p in ordered)) if ordered else None

    def rewrite(self, value: str) -> str:
        if self._pattern is None:
            return value
        return self._pattern.sub(lambda m: str(self.mounts[m.group(0)]), value)

    def as_dict(self) -> dict[str, str]:
        return {path: str(directory) for path, directory in self.mounts.items()}


def volume_dirs(pod_dir: Path, pod: KubeObject) -> dict[str, Path]:
    """Volume name → its directory under the pod's state dir."""
    return {vol["name"]: pod_dir / "volumes" / vol["name"] for vol in pod.get("spec", {}).get("volumes", [])}


def path_map(pod_dir: Path, pod: KubeObject, container: dict[str, Any]) -> PathMap:
    """The mountPath mapping of one container (mounts of volumes the local cluster does not emulate are left out)."""
    dirs = volume_dirs(pod_dir, pod)
    return PathMap({m["mountPath"]: dirs[m["name"]] for m in container.get("volumeMounts", []) if m.get("name") in dirs})


def prepare_volumes(pod_dir: Path, pod: KubeObject, get_configmap: Any,
                    request_token: TokenRequester | None = None) -> list[str]:
    """Create every emptyDir and write every configMap volume; the names of volume types not emulated.

    `get_configmap(namespace, name)` returns the ConfigMap or None; `request_token` asks the API
    server for a projected volume's ServiceAccount token. Raises MissingConfigMap when a
    non-optional ConfigMap is missing (nothing is left half-written for it).
    """
    namespace = pod["metadata"]["namespace"]
    unsupported: list[str] = []
    dirs = volume_dirs(pod_dir, pod)
    for vol in pod.get("spec", {}).get("volumes", []):
        target = dirs[vol["name"]]
        if "emptyDir" in vol:
            target.mkdir(parents=True, exist_ok=True)
        elif "configMap" in vol:
            source = vol["configMap"]
            cm = get_configmap(namespace, source.get("name", ""))
            if cm is None and not source.get("optional"):
                raise MissingConfigMap(f'configmap "{source.get("name")}" not found (volume {vol["name"]})')
            shutil.rmtree(target, ignore_errors=True)
            target.mkdir(parents=True, exist_ok=True)
            data = (cm or {}).get("data", {}) or {}
            items = source.get("items") or [{"key": key, "path": key} for key in sorted(data)]
            for item in items:
                if item["key"] not in data:
                    continue
                path = target / item["path"]
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(data[item["key"]])
                os.chmod(path, item.get("mode", source.get("defaultMode", DEFAULT_MODE)))
        elif "projected" in vol:
            _write_projected(target, namespace, vol["projected"], get_configmap, request_token)
        else:
            unsupported.append(vol["name"])
    return unsupported


def _write_projected(target: Path, namespace: str, source: dict[str, Any], get_configmap: Any,
                     request_token: TokenRequester | None) -> None:
    """A projected volume, as the ServiceAccount admission plugin adds to every pod on a real API server
    (`kube-api-access-*`): its configMap and downwardAPI namespace items, and the ServiceAccount token
    the kubelet asks for by the TokenRequest API (bound to the pod), so in-cluster clients authenticate
    as the pod's ServiceAccount. Without a `request_token` (a store with no API server) no token is written."""
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True, exist_ok=True)
    for projection in source.get("sources") or []:
        files: dict[str, str] = {}
        if "configMap" in projection:
            data = (get_configmap(namespace, projection["configMap"].get("name", "")) or {}).get("data", {}) or {}
            items = projection["configMap"].get("items") or [{"key": key, "path": key} for key in sorted(data)]
            files = {item["path"]: data[item["key"]] for item in items if item["key"] in data}
        elif "downwardAPI" in projection:
            files = {item["path"]: namespace for item in projection["downwardAPI"].get("items") or []
                     if item.get("fieldRef", {}).get("fieldPath") == "metadata.namespace"}
        elif "serviceAccountToken" in projection and request_token is not None:
            wanted = projection["serviceAccountToken"]
            token = request_token(wanted.get("audience") or None,
                                  int(wanted.get("expirationSeconds") or DEFAULT_TOKEN_SECONDS))
            files = {wanted.get("path", "token"): token} if token is not None else {}
        for relative, text in files.items():
            path = target / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            os.chmod(path, source.get("defaultMode", DEFAULT_MODE))


def rewrite_configmap_files(pod_dir: Path, pod: KubeObject, mapping: PathMap) -> None:
    """Rewrite mounted paths inside the text files of the pod's configMap volumes (scripts naming other mounts)."""
    dirs = volume_dirs(pod_dir, pod)
    for vol in pod.get("spec", {}).get("volumes", []):
        if "configMap" not in vol:
            continue
        for path in sorted(dirs[vol["name"]].rglob("*")):
            if not path.is_file():
                continue
            try:
                text = path.read_text()
            except UnicodeDecodeError:
                continue
            new = mapping.rewrite(text)
            if new != text:
                mode = path.stat().st_mode
                path.write_text(new)
                os.chmod(path, mode)
