"""A pod's sandbox on this machine: what its containers' processes see instead of their own namespaces.

Owns: the pod's state dir (`<pods_dir>/<ns>/<name>/<uid>/`: volumes, `bin/`, `etc-hosts`), the
volumes made ready (volumes.py) and the mountPath mapping of each container, the `hostname` and
`kubectl` stand-ins on its PATH (and the copy a kubectl image's init container would make), the
registration of its hostname and hosts file with the DNS stand-in (dns.py), each container's process
env (a host allowlist, the `kubernetes` Service variables naming the local kube-apiserver, the
declared env as podenv.py resolves it, the DNS rewrite, loopback-only settings), the ServiceAccount
token it asks the API server for (TokenRequest, bound to the pod), its argv and working directory
with `$(NAME)` expanded and mountPaths rewritten, and the exec registrations
(`exec-<container>.json`) the kubectl stand-in reads. Starting and stopping the processes is
podprocess.py's.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from localcluster.config import REPO_ROOT
from localcluster.node.dns import ClusterDNS
from localcluster.node.podenv import expand, resolve_env
from localcluster.node.registration import NODE_NAME
from localcluster.node.volumes import (
    SERVICE_ACCOUNT_DIR,
    PathMap,
    TokenRequester,
    TokenUnavailable,
    path_map,
    prepare_volumes,
    rewrite_configmap_files,
)
from localcluster.ports import LOOPBACK
from localcluster.store import ObjectStore, StoreError
from localcluster.types import Container, KubeObject

# ps-lite picks its own address from these; the only interface here is loopback. ps-lite's one
# use of DMLC_USE_KUBERNETES is to make the scheduler bind 0.0.0.0 (in a cluster its Service name
# does not resolve to its own address); locally that would leave loopback, so it is turned off.
LOOPBACK_ENV = {"DMLC_NODE_HOST": LOOPBACK, "DMLC_INTERFACE": "lo"}
LOOPBACK_OVERRIDES = {"DMLC_USE_KUBERNETES": "0"}
# OpenMPI 5's hierarchical collectives (HAN) hang in Allreduce when the "hosts" of a hostfile are
# pods that all share this one machine (verified with 5.0.11); the other collectives work. A
# default only: a container that sets OMPI_MCA_coll itself keeps its value.
LOCAL_DEFAULT_ENV = {"OMPI_MCA_coll": "^han"}
HOST_ENV_ALLOWLIST = ("HOME", "LANG", "LC_ALL", "TZ", "TMPDIR", "USER", "LOGNAME", "TERM")
# What the kubelet knows of a running pod, for fieldRef: every address is loopback here.
RUNTIME_FIELDS = {"status.podIP": LOOPBACK, "status.hostIP": LOOPBACK, "status.podIPs": LOOPBACK,
                  "status.hostIPs": LOOPBACK, "spec.nodeName": NODE_NAME}


def kubernetes_service_env(host: str, port: int) -> dict[str, str]:
    """The `kubernetes` Service's variables as the kubelet writes them (pkg/kubelet/envvars), for an
    API server at host:port: here the Service port is the server's own port, not 443."""
    prefix = f"KUBERNETES_PORT_{port}_TCP"
    return {"KUBERNETES_SERVICE_HOST": host, "KUBERNETES_SERVICE_PORT": str(port),
            "KUBERNETES_SERVICE_PORT_HTTPS": str(port), "KUBERNETES_PORT": f"tcp://{host}:{port}",
            prefix: f"tcp://{host}:{port}", f"{prefix}_PROTO": "tcp", f"{prefix}_PORT": str(port),
            f"{prefix}_ADDR": host}


def token_file_env(mapping: PathMap) -> dict[str, str]:
    """Where the progress helper finds the ServiceAccount token and CA when the container mounts them:
    it builds /var/run/secrets/... itself, which the mountPath rewrite cannot see (volumes.py)."""
    directory = mapping.mounts.get(SERVICE_ACCOUNT_DIR)
    if directory is None:
        return {}
    return {"MXJOB_PROGRESS_TOKEN_FILE": str(directory / "token"), "MXJOB_PROGRESS_CA_FILE": str(directory / "ca.crt")}


def write_script(path: Path, text: str) -> None:
    """An executable shell script."""
    path.write_text(text)
    os.chmod(path, 0o755)


class PodSandbox:
    """One pod's state dir, stand-ins, DNS registration and the env and paths of its containers."""

    def __init__(self, pod: KubeObject, *, pods_dir: Path, store: ObjectStore, dns: ClusterDNS, workdir: Path):
        meta = pod["metadata"]
        self.pod, self.store, self.dns, self.workdir, self.pods_dir = pod, store, dns, workdir, pods_dir
        self.namespace, self.name, self.uid = meta["namespace"], meta["name"], meta["uid"]
        self.spec = pod.get("spec", {})
        self.pod_dir = pods_dir / self.namespace / self.name
        self.state_root = self.pod_dir / self.uid  # this pod's volumes and bin/; a recreated pod gets its own
        self.hostname = self.spec.get("hostname") or self.name
        self.hosts_file = self.state_root / "etc-hosts"  # its /etc/hosts when names are strict (dns.py)
        self.maps = {c["name"]: path_map(self.state_root, pod, c)
                     for c in self.spec.get("initContainers", []) + self.spec.get("containers", [])}

    def prepare(self) -> list[str]:
        """Volumes, stand-in binaries and the DNS registration; the names of volumes not emulated.

        Raises volumes.MissingConfigMap while a configMap volume's ConfigMap is missing, and
        volumes.TokenUnavailable while the API server refuses the pod's ServiceAccount token.
        """
        unsupported = prepare_volumes(self.state_root, self.pod,
                                      lambda namespace, name: self.store.get("v1", "ConfigMap", namespace, name),
                                      self._token_requester())
        union: dict[str, Path] = {}
        for mapping in self.maps.values():
            union = {**{p: Path(d) for p, d in mapping.as_dict().items()}, **union}
        rewrite_configmap_files(self.state_root, self.pod, PathMap(union))
        bin_dir = self.state_root / "bin"
        bin_dir.mkdir(parents=True, exist_ok=True)
        write_script(bin_dir / "hostname", f"#!/bin/sh\necho {shlex.quote(self.hostname)}\n")
        write_script(bin_dir / "kubectl", self._kubectl_wrapper())
        if self.dns.strict:
            self.dns.register(self.namespace, self.name, self.hostname, self.hosts_file, self.spec.get("subdomain"))
        return unsupported

    def unregister(self) -> None:
        """The pod is gone: its name no longer resolves, and its containers' temporary folders go."""
        self.dns.unregister(self.namespace, self.name)
        for name in self.maps:
            shutil.rmtree(self.tmp_dir(name), ignore_errors=True)

    def tmp_dir(self, container: str) -> Path:
        """The container's own temporary folder, its TMPDIR: a container's /tmp is its own in a cluster,
        and fresh at each start. Shared, a folder a killed process left (OpenMPI's `ompi.<pid>` session
        folder) makes a later process that gets the same pid fail ("The PMIx server's listener thread
        failed to start"). Short, under the host's TMPDIR: some tools put sockets in it."""
        return Path(tempfile.gettempdir()) / f"lc-{self.uid[:13]}-{container}"

    def fresh_tmp(self, container: str) -> None:
        """Empty the container's TMPDIR for a new start (what its last run left goes, as with a new container)."""
        folder = self.tmp_dir(container)
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)  # whatever could not be removed stays

    def env(self, container: Container) -> tuple[dict[str, str], dict[str, str]]:
        """The process env (host allowlist, the container's env expanded and DNS-rewritten, loopback
        settings), and the container's declared env alone, which is all `$(NAME)` sees (as the kubelet's).

        Raises podenv.EnvError when the env cannot be resolved (a missing ConfigMap).
        """
        host = {name: os.environ[name] for name in HOST_ENV_ALLOWLIST if name in os.environ}
        host["PATH"] = os.pathsep.join([str(self.state_root / "bin"), str(Path(sys.executable).parent),
                                        os.environ.get("PATH", os.defpath)])
        host["HOSTNAME"] = self.hostname
        host["TMPDIR"] = str(self.tmp_dir(container["name"]))  # a TMPDIR the container sets wins
        # The kubelet expands $(NAME) with the declared entries only: a host or image variable
        # such as $(HOME) stays as written in a cluster, so it does here too.
        declared = resolve_env(container, self.pod, runtime=RUNTIME_FIELDS, services=self.service_env(),
                               config_map=lambda name: self.store.get("v1", "ConfigMap", self.namespace, name))
        rewritten = self.dns.rewrite_env(self.namespace, declared, self.spec.get("subdomain"))
        if not self.dns.strict:
            # Names rewritten to loopback: a scheduler told to bind 0.0.0.0 would leave loopback for nothing.
            for name, value in LOOPBACK_OVERRIDES.items():
                if name in rewritten:
                    rewritten[name] = value
        mapping = self.maps[container["name"]]
        rewritten = {name: mapping.rewrite(value) for name, value in rewritten.items()}
        defaults = {**LOCAL_DEFAULT_ENV, **token_file_env(mapping)}
        return {**defaults, **host, **rewritten, **LOOPBACK_ENV}, rewritten

    def service_env(self) -> dict[str, str]:
        """What the kubelet sets in every container for the `kubernetes` Service, pointing at the
        local kube-apiserver (no env with a store that has no API server behind it)."""
        endpoint = getattr(self.store, "endpoint", None)
        if endpoint is None:
            return {}
        host, port = endpoint()
        return kubernetes_service_env(host, port)

    def _token_requester(self) -> TokenRequester | None:
        """How a projected volume gets this pod's ServiceAccount token (None with no API server)."""
        request = getattr(self.store, "request_token", None)
        if request is None:
            return None
        account = self.spec.get("serviceAccountName") or "default"

        def token(audience: str | None, seconds: int) -> str:
            try:
                return str(request(self.namespace, account, pod_name=self.name, pod_uid=self.uid,
                                   audience=audience, expiration_seconds=seconds))
            except StoreError as err:  # the kubelet retries the mount, the pod waits in ContainerCreating
                raise TokenUnavailable(f"failed to fetch token for serviceaccount {self.namespace}/{account}: {err}") from err
        return token

    def command(self, container: Container, declared: dict[str, str]) -> tuple[list[str], Path]:
        """argv (`command` + `args`, `$(NAME)` expanded, mountPaths rewritten) and the working directory."""
        mapping = self.maps[container["name"]]
        argv = [mapping.rewrite(expand(part, declared)) for part in container.get("command", []) + container.get("args", [])]
        workdir = Path(mapping.rewrite(container.get("workingDir", "")) or self.workdir)
        if not workdir.is_absolute():
            workdir = self.workdir / workdir
        return argv, workdir

    def wrapper(self) -> Callable[[list[str]], list[str]] | None:
        """The DNS namespace wrapper for a command when names are strict (dns.py), else None."""
        if not self.dns.strict:
            return None
        return lambda argv: self.dns.wrap(argv, self.hosts_file)

    def deliver_kubectl(self, container: Container) -> list[str]:
        """What a kubectl image's init container would do: put kubectl into the emptyDirs it mounts; their mountPaths."""
        targets = []
        emptydirs = {v["name"] for v in self.spec.get("volumes", []) if "emptyDir" in v}
        for mount in container.get("volumeMounts", []):
            if mount.get("name") in emptydirs:
                write_script(self.state_root / "volumes" / mount["name"] / "kubectl", self._kubectl_wrapper())
                targets.append(mount["mountPath"])
        return targets

    def _kubectl_wrapper(self) -> str:
        python, repo = shlex.quote(sys.executable), shlex.quote(str(REPO_ROOT))
        pods, namespace = shlex.quote(str(self.pods_dir)), shlex.quote(self.namespace)
        return (f"#!/bin/sh\n# kubectl stand-in of the local cluster: only `kubectl exec` (localcluster/node/kubectl.py)\n"
                f"PYTHONPATH={repo} exec {python} -m localcluster.node.kubectl --pods-dir {pods} --namespace-default {namespace} \"$@\"\n")

    def publish(self, container: str, *, first: bool, env: dict[str, str], workdir: Path) -> None:
        """Tell the kubectl stand-in how to exec into this running container."""
        info = {"uid": self.uid, "container": container, "first": first,
                "env": env, "cwd": str(workdir), "mounts": self.maps[container].as_dict()}
        path = self.pod_dir / f"exec-{container}.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(info))
        tmp.replace(path)

    def unpublish(self, container: str) -> None:
        """The container stopped: no new execs, and the processes exec'd into it die with it."""
        path = self.pod_dir / f"exec-{container}.json"
        try:
            if json.loads(path.read_text()).get("uid") == self.uid:
                path.unlink()
        except (OSError, ValueError):
            pass
        registry = self.pod_dir / f"exec-{container}.pids"
        for marker in sorted(registry.glob("*")) if registry.is_dir() else []:
            try:
                if marker.read_text() == self.uid:
                    os.killpg(int(marker.name), signal.SIGKILL)
            except (OSError, ValueError):
                pass
            marker.unlink(missing_ok=True)

