"""A real Metacontroller binary run against the local cluster (`up --metacontroller PATH`, `run --metacontroller PATH`).

The project cannot build Metacontroller (its Go module path is not one the module proxy serves), so
a user who has a binary (built from its v4.17.2 tag: docs/localcluster.md) hands it over, and the
local cluster runs it as it runs kube-apiserver: a child process in a process group of its own, its
log beside the control plane's, stopped with the rest.

It runs as Metacontroller's ServiceAccount (metacontroller/metacontroller, as its production
install names it) with exactly the rights a narrowed install gives it: the project's
metacontroller/rbac.yaml plus what Metacontroller needs for itself (SELF_RULES, the table in
docs/operations.md). So a right missing from either shows here as an error in its log, not as
something an admin token hid.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from localcluster.config import MANIFEST_DIR, ControllerConfig
from localcluster.controlplane.processes import Component, ControlPlane, die_with_parent, http_ok
from localcluster.ports import PORT_ATTEMPTS, free_port

NAMESPACE = SERVICE_ACCOUNT = "metacontroller"
SELF_ROLE = "metacontroller-self"
# What Metacontroller needs for itself where its role is narrowed (docs/operations.md, "RBAC if
# Metacontroller's role is narrowed"); metacontroller/rbac.yaml grants the rest.
SELF_RULES = [
    {"apiGroups": ["metacontroller.k8s.io"], "resources": ["compositecontrollers"], "verbs": ["get", "list", "watch"]},
    {"apiGroups": ["metacontroller.k8s.io"], "resources": ["decoratorcontrollers"], "verbs": ["list", "watch"]},
    {"apiGroups": ["metacontroller.k8s.io"], "resources": ["controllerrevisions"], "verbs": ["list", "watch"]},
    {"apiGroups": ["apiextensions.k8s.io"], "resources": ["customresourcedefinitions"], "verbs": ["get", "list", "watch"]},
    {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "patch"]},
    {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["list", "watch"]},
]
READY_TIMEOUT = 60.0
# Long enough for any run or `up` session; the API server signs it with its own key.
TOKEN_DURATION = "720h"


class MetacontrollerBinaryError(RuntimeError):
    """The binary is missing, cannot run, or did not become healthy; the message says which and why."""


def check_binary(path: str | Path) -> Path:
    """The path as an executable file, or an error that says how to get one."""
    binary = Path(path).expanduser()
    if not binary.is_file() or not os.access(binary, os.X_OK):
        raise MetacontrollerBinaryError(
            f"{path}: no executable file there. Build one from Metacontroller's v4.17.2 tag "
            "(git clone -b v4.17.2 https://github.com/metacontroller/metacontroller; cd metacontroller; "
            "CGO_ENABLED=0 go build -o metacontroller ./pkg/cmd/metacontroller), or use --metacontroller emulation")
    return binary.resolve()


def self_rbac() -> list[dict[str, Any]]:
    """The namespace, ServiceAccount and self-rights a Metacontroller install creates."""
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": SELF_ROLE},
            "rules": SELF_RULES}
    binding = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": SELF_ROLE},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": SELF_ROLE},
               "subjects": [{"kind": "ServiceAccount", "name": SERVICE_ACCOUNT, "namespace": NAMESPACE}]}
    return [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
            {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": SERVICE_ACCOUNT, "namespace": NAMESPACE}},
            role, binding]


def controller_manifest(config: ControllerConfig, hooks_url: str) -> dict[str, Any]:
    """The shipped CompositeController with its sync (and customize) hook pointed at the local hooks server
    (a full `url` in place of the in-cluster Service reference)."""
    manifest = copy.deepcopy(config.raw)
    hooks = manifest["spec"]["hooks"]
    for hook, path in (("sync", config.hook_path), ("customize", config.customize_path)):
        if path is not None:
            webhook = hooks[hook]["webhook"]
            webhook.pop("service", None)
            webhook.pop("path", None)
            webhook["url"] = hooks_url.rstrip("/") + path
    return manifest


def service_hooks(configs: list[ControllerConfig]) -> tuple[list[str], int]:
    """The host names the CompositeControllers' hook URLs name (`<service>.<namespace>`, as Metacontroller
    builds a URL from `webhook.service`), and their one port; a ValueError when they name several ports."""
    urls = [url for config in configs for url in (config.hook_url, config.customize_url) if url]
    parts = [urlsplit(url) for url in urls]
    ports = {part.port or 80 for part in parts}
    if len(ports) != 1:
        raise ValueError(f"the CompositeControllers' hooks name {len(ports)} ports ({sorted(ports)}); the local cluster "
                         "serves them on one")
    return sorted({part.hostname or "" for part in parts}), ports.pop()


def install_controllers_as_shipped(cp: ControlPlane, configs: list[ControllerConfig]) -> None:
    """The CompositeControllers as they are (hooks named by Service) and metacontroller/rbac.yaml."""
    cp.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-",
               input=json.dumps({"apiVersion": "v1", "kind": "List", "items": [config.raw for config in configs]}))
    cp.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(MANIFEST_DIR / "rbac.yaml"))


def install_controllers(cp: ControlPlane, configs: list[ControllerConfig], hooks_url: str) -> None:
    """The CompositeControllers (hook URLs local) and the RBAC Metacontroller runs with (metacontroller/rbac.yaml)."""
    items = [controller_manifest(config, hooks_url) for config in configs]
    cp.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-",
               input=json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
    cp.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(MANIFEST_DIR / "rbac.yaml"))


@dataclass
class MetacontrollerBinary:
    """One Metacontroller process against a control plane; `start` after the CompositeControllers and
    metacontroller/rbac.yaml are installed (LocalCluster does both)."""

    binary: Path
    workdir: Path
    client_qps: float = 5.0
    client_burst: int = 10
    # How often it re-reads discovery: 2 s, so a CRD installed after it started is picked up at once
    # (its default, 30 s, is for a cluster whose CRDs are all there long before).
    discovery_interval: str = "2s"
    # A hosts file to run it with (bind-mounted over /etc/hosts in a mount namespace of its own), so
    # the Service names its hooks are called by resolve here: LocalCluster(service_dns=True).
    hosts: Path | None = None
    component: Component | None = field(default=None, init=False)
    health_port: int = field(default=0, init=False)

    @property
    def log(self) -> Path:
        return self.workdir / "metacontroller.log"

    def start(self, cp: ControlPlane) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        cp.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-",
                   input=json.dumps({"apiVersion": "v1", "kind": "List", "items": self_rbac()}))
        token = cp.kubectl("create", "token", SERVICE_ACCOUNT, "-n", NAMESPACE, f"--duration={TOKEN_DURATION}").stdout.strip()
        kubeconfig = self.workdir / "metacontroller.kubeconfig"
        kubeconfig.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "metacontroller",
            "clusters": [{"name": "local", "cluster": {"server": cp.server, "certificate-authority": str(cp.ca_file)}}],
            "users": [{"name": SERVICE_ACCOUNT, "user": {"token": token}}],
            "contexts": [{"name": "metacontroller", "context": {"cluster": "local", "user": SERVICE_ACCOUNT}}],
        }, indent=2))
        for attempt in range(1, PORT_ATTEMPTS + 1):
            self._spawn(kubeconfig, free_port())
            try:
                self._wait_healthy()
                return
            except MetacontrollerBinaryError:
                # Its health port was taken before it bound it (localcluster.ports): on a new one.
                if attempt == PORT_ATTEMPTS or self.component is None or not self.component.lost_its_port():
                    raise

    def _spawn(self, kubeconfig: Path, health_port: int) -> None:
        self.health_port = health_port
        args = [str(self.binary), f"--kubeconfig={kubeconfig}", f"--discovery-interval={self.discovery_interval}",
                f"--client-go-qps={self.client_qps:g}", f"--client-go-burst={self.client_burst}",
                "--metrics-address=0", f"--health-probe-bind-address=127.0.0.1:{self.health_port}",
                "--zap-time-encoding=iso8601"]
        if self.hosts is not None:
            args = ["unshare", "--mount", "--propagation", "private", "--",
                    "/bin/sh", "-c", 'mount --bind "$0" /etc/hosts && exec "$@"', str(self.hosts), *args]
        with self.log.open("wb") as out:
            try:
                process = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                           cwd=self.workdir, preexec_fn=die_with_parent)
            except OSError as err:
                raise MetacontrollerBinaryError(f"{self.binary} could not start: {err}") from err
        self.component = Component("metacontroller", process, self.log)

    def _wait_healthy(self) -> None:
        assert self.component is not None
        self.component.wait_ready(lambda: http_ok(f"http://127.0.0.1:{self.health_port}/readyz"), "ready",
                                  READY_TIMEOUT, error=MetacontrollerBinaryError)

    def errors(self) -> list[str]:
        """Its log's entries at level error and above (a sync that failed, a right it lacked), each as
        `time logger: message: error`, without the stack trace."""
        found = []
        for line in self.log.read_text(errors="replace").splitlines() if self.log.exists() else []:
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if isinstance(entry, dict) and entry.get("level") in ("error", "dpanic", "panic", "fatal"):
                found.append(f"{entry.get('ts')} {entry.get('logger', '')}: {entry.get('msg')}: {entry.get('error', '')}")
        return found

    def running(self) -> bool:
        return self.component is not None and self.component.process.poll() is None

    def stop(self) -> None:
        if self.component is not None:
            self.component.stop()
