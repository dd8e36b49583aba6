"""Cluster DNS stand-in: which names resolve for a pod's processes, and the per-job ports behind them.

In a cluster each pod has its own IP, so every replica can listen on the same port (9091); here
every process shares 127.0.0.1, so each (Service, port) pair gets its own free local port,
allocated once and kept for the life of the cluster (a restarted pod finds its peers where they
were), and the container's env is rewritten to those ports. Names of different jobs differ
(`<job>-<type>-<index>`), so jobs never share a port and several run at once.

Names, strict (the default where it can run): each pod's processes run in a private mount
namespace (`unshare -m`) with the pod's own hosts file bind-mounted over /etc/hosts. The file
holds the host's entries, the pod's own hostname, and each Service name that would resolve in a
cluster now: the Service exists and a pod it selects is Running (headless: an endpoint with an
IP), plus `<hostname>.<subdomain>` of such pods. It is rewritten in place whenever a Service or a
Pod of the namespace changes, so every lookup sees the cluster as it is then: a process that
starts before its peers' names exist fails to resolve them, as in a cluster. This needs root
(CI runs so); elsewhere the fallback, announced once, rewrites names in env to 127.0.0.1 at
container start, so they resolve from the start (docs/localcluster.md).
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from localcluster.ports import LOOPBACK, free_port
from localcluster.store import ObjectStore
from localcluster.types import KubeObject

# Keys that name a host inside a JSON env value (MX_CONFIG uses "url").
HOST_KEYS = ("url", "host", "hostname", "address")
# `<PREFIX>_PORT` is the port of the host in one of these siblings (DMLC_PS_ROOT_PORT ↔ DMLC_PS_ROOT_URI).
HOST_SUFFIXES = ("_URI", "_HOST", "_ADDR", "_ADDRESS")
# Hosts that are never a Service of the namespace, even where a host is expected.
NOT_CLUSTER_NAMES = frozenset({"localhost", "0.0.0.0", "127.0.0.1"})
_HOST_PORT = re.compile(r"^(?P<host>[a-z0-9]([-a-z0-9.]*[a-z0-9])?)(:(?P<port>\d{1,5}))?$")


HOST_HOSTS = Path("/etc/hosts")


@functools.lru_cache(maxsize=1)
def strict_dns_unavailable() -> str | None:
    """Why per-pod hosts files cannot be used on this machine, or None when they can."""
    if not sys.platform.startswith("linux"):
        return "it needs Linux mount namespaces"
    if os.geteuid() != 0:
        return "it needs root (each pod runs under `unshare -m` with its own hosts file bind-mounted over /etc/hosts)"
    for tool in ("unshare", "mount"):
        if shutil.which(tool) is None:
            return f"`{tool}` (util-linux) is not installed"
    probe = subprocess.run(["unshare", "--mount", "--propagation", "private", "--", "mount", "--bind", "/etc/hosts", "/etc/hosts"],
                           capture_output=True, text=True, check=False)
    if probe.returncode != 0:
        return f"`unshare -m` with a bind mount failed here: {probe.stderr.strip() or probe.returncode}"
    return None


def _fqdns(name: str, namespace: str) -> list[str]:
    return [name, f"{name}.{namespace}", f"{name}.{namespace}.svc", f"{name}.{namespace}.svc.cluster.local"]


def _selects(selector: dict[str, str], pod: KubeObject) -> bool:
    labels = pod.get("metadata", {}).get("labels") or {}
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def _has_address(pod: KubeObject) -> bool:
    """A pod with an IP in a cluster: started (Running) and not being deleted."""
    return pod.get("status", {}).get("phase") == "Running" and not pod["metadata"].get("deletionTimestamp")


class ClusterDNS:
    """Resolves `<service>` and `<hostname>.<subdomain>` (each with `.<namespace>[.svc[.cluster.local]]`) to
    loopback and remaps their ports."""

    def __init__(self, store: ObjectStore, *, strict: bool = True):
        self.store = store
        self.fallback_reason = strict_dns_unavailable() if strict else None
        self.strict = strict and self.fallback_reason is None
        self._ports: dict[tuple[str, str, int], int] = {}
        # (namespace, pod) -> (hosts file, the names of the pod itself)
        self._files: dict[tuple[str, str], tuple[Path, str]] = {}
        self._lock = threading.Lock()
        # Held from reading the cluster to writing the hosts files (register, refresh): see refresh.
        self._write_lock = threading.Lock()
        self._base = HOST_HOSTS.read_text() if self.strict else ""
        if self.strict:
            store.watch(self._on_event)

    # --- names (strict) ------------------------------------------------------------------------------

    def resolvable(self, namespace: str) -> list[str]:
        """The cluster names of a namespace that resolve now, sorted."""
        pods = [p for p in self.store.list_shared("v1", "Pod", namespace) if _has_address(p)]
        names: set[str] = set()
        for service in self.store.list_shared("v1", "Service", namespace):
            name = service["metadata"]["name"]
            selector = service.get("spec", {}).get("selector") or {}
            if any(_selects(selector, pod) for pod in pods):
                names.update(_fqdns(name, namespace))
            for pod in pods:
                spec = pod.get("spec", {})
                if spec.get("subdomain") == name and spec.get("hostname") and _selects(selector, pod):
                    names.update(_fqdns(f"{spec['hostname']}.{name}", namespace))
        return sorted(names)

    def hosts_text(self, namespace: str, hostname: str) -> str:
        """A pod's hosts file: the host's entries, its own names, and the cluster names that resolve now.

        `hostname` is every name of the pod itself, space-separated (see `register`)."""
        lines = [self._base.rstrip("\n"), "# localcluster: this pod, and the cluster names that resolve now",
                 f"{LOOPBACK} {hostname}"]
        lines += [f"{LOOPBACK} {name}" for name in self.resolvable(namespace)]
        return "\n".join(lines) + "\n"

    def register(self, namespace: str, pod: str, hostname: str, path: Path, subdomain: str | None = None) -> Path:
        """Give a pod its hosts file (kept up to date until `unregister`).

        With a subdomain its own fully qualified name comes first, as the kubelet writes it
        (`<hostname>.<subdomain>.<namespace>.svc.cluster.local`): it resolves before the Service exists."""
        if subdomain:
            hostname = f"{hostname}.{subdomain}.{namespace}.svc.cluster.local {hostname}"
        with self._lock:
            self._files[(namespace, pod)] = (path, hostname)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch()
        with self._write_lock:
            self._write(path, self.hosts_text(namespace, hostname))
        return path

    def unregister(self, namespace: str, pod: str) -> None:
        with self._lock:
            self._files.pop((namespace, pod), None)

    def wrap(self, argv: list[str], hosts: Path) -> list[str]:
        """The command that runs `argv` with `hosts` as its /etc/hosts (a private mount namespace)."""
        return ["unshare", "--mount", "--propagation", "private", "--",
                "/bin/sh", "-c", 'mount --bind "$0" /etc/hosts && exec "$@"', str(hosts), *argv]

    def _on_event(self, event: str, obj: KubeObject) -> None:
        if obj.get("apiVersion") == "v1" and obj.get("kind") in ("Service", "Pod"):
            self.refresh(obj.get("metadata", {}).get("namespace", "default"))

    def refresh(self, namespace: str) -> None:
        """Rewrite the hosts files of a namespace's pods (in place: a bind mount follows the inode).

        A change is told on the thread that made it (a pod's kubelet thread, Metacontroller's, one
        informer per kind), so refreshes overlap. Each reads the cluster as it is when it runs; under
        one lock from that read to the last write, the refresh that reads last also writes last, so
        the files end as the cluster is. Without it a refresh that had read before a change could
        write after the refresh for that change, and the name it missed stayed out of the file until
        some later change: the rare ps-lite start-up stall (docs/localcluster.md)."""
        with self._write_lock:
            with self._lock:
                files = [(path, hostname) for (ns, _), (path, hostname) in self._files.items() if ns == namespace]
            for path, hostname in files:
                self._write(path, self.hosts_text(namespace, hostname))

    @staticmethod
    def _write(path: Path, text: str) -> None:
        try:
            with path.open("r+") as out:
                if out.read() == text:
                    return
                out.seek(0)
                out.write(text)
                out.truncate()
        except FileNotFoundError:
            pass  # the pod's directory is gone: it has ended

    # --- ports ---------------------------------------------------------------------------------------

    def local_port(self, namespace: str, service: str, port: int) -> int:
        """The loopback port standing in for `service:port`."""
        with self._lock:
            key = (namespace, service, port)
            if key not in self._ports:
                taken = set(self._ports.values())
                candidate = free_port()
                while candidate in taken:
                    candidate = free_port()
                self._ports[key] = candidate
            return self._ports[key]

    def port_table(self) -> dict[tuple[str, str, int], int]:
        """Every mapping so far: (namespace, service, port) → local port."""
        with self._lock:
            return dict(self._ports)

    def rewrite_env(self, namespace: str, env: dict[str, str], subdomain: str | None = None) -> dict[str, str]:
        """The env with every Service port remapped; names too (to loopback) unless names are strict.
        `subdomain`: the starting pod's own (its peers' names may be `<hostname>.<subdomain>`)."""
        services = {svc["metadata"]["name"] for svc in self.store.list_shared("v1", "Service", namespace)}
        resolver = _Resolver(self, namespace, services, keep_names=self.strict, subdomain=subdomain)
        out = {name: resolver.value(value, host_context=name.endswith(HOST_SUFFIXES)) for name, value in env.items()}
        for name, value in env.items():
            if not name.endswith("_PORT") or not value.isdigit():
                continue
            prefix = name[: -len("_PORT")]
            for suffix in HOST_SUFFIXES:
                service = resolver.service_of(env.get(prefix + suffix, ""), assume=True)
                if service is not None:
                    out[name] = str(self.local_port(namespace, service, int(value)))
                    break
        return out


class _Resolver:
    """Rewrites one env value, given the Services of the namespace.

    Metacontroller creates Pods before their Services, so a container often starts before the
    Service its env names exists. Where a value is a host by its place (a `*_URI`/`*_HOST` variable,
    `host:port`, a JSON `url`), a cluster-local name (one label, or `<label>.<namespace>[.svc[.cluster.local]]`)
    counts as that Service whether it exists yet or not: its port is mapped now, and strict names
    decide at each lookup whether it resolves. Elsewhere only existing Services count (a bare
    `worker` is a role, not a host)."""

    def __init__(self, dns: ClusterDNS, namespace: str, services: set[str], *, keep_names: bool,
                 subdomain: str | None = None):
        self.dns, self.namespace, self.services, self.keep_names = dns, namespace, services, keep_names
        self.subdomains = services | ({subdomain} if subdomain else set())

    def service_of(self, host: str, *, assume: bool = False) -> str | None:
        """The Service a host name refers to (one that may not exist yet when `assume`), or None; for a
        pod's name under a headless Service, `<hostname>.<subdomain>` (each pod has its own ports)."""
        suffixes = ("", f".{self.namespace}", f".{self.namespace}.svc", f".{self.namespace}.svc.cluster.local")
        for service in self.services:
            if host in (service + suffix for suffix in suffixes):
                return service
        if not _HOST_PORT.match(host) or host in NOT_CLUSTER_NAMES:
            return None
        # Longest suffix first, so `<service>.<namespace>` is read as a Service, not as a pod's name.
        for suffix in sorted(suffixes, key=len, reverse=True):
            if not host.endswith(suffix):
                continue
            rest = host[: len(host) - len(suffix)]
            labels = rest.split(".")
            if len(labels) == 1 and rest and assume:
                return rest
            # A pod's own name under a headless Service (`<hostname>.<subdomain>`, as a
            # StatefulSet's or an MXJob's per-job layout gives): one endpoint, so its own ports.
            # Bare, it must name a known subdomain (`example.com` is not a pod); the Service may
            # not exist yet, but the starting pod's own subdomain is its peers' too.
            if len(labels) == 2 and all(labels) and ((assume and suffix) or labels[1] in self.subdomains):
                return rest
        return None

    def value(self, value: str, *, host_context: bool = False) -> str:
        """One env value: a host, `host:port`, or JSON holding hosts."""
        stripped = value.strip()
        if stripped[:1] in ("{", "["):
            try:
                parsed = json.loads(stripped)
            except ValueError:
                return value
            return json.dumps(self._json(parsed), separators=(",", ":"))
        return self._scalar(value, assume=host_context)

    def _scalar(self, value: str, *, assume: bool = False) -> str:
        match = _HOST_PORT.match(value)
        if not match:
            return value
        service = self.service_of(match["host"], assume=assume or bool(match["port"]))
        if service is None:
            return value
        host = match["host"] if self.keep_names else LOOPBACK
        if match["port"]:
            return f"{host}:{self.dns.local_port(self.namespace, service, int(match['port']))}"
        return host

    def _json(self, node: Any) -> Any:
        if isinstance(node, list):
            return [self._json(item) for item in node]
        if isinstance(node, str):
            return self._scalar(node)
        if not isinstance(node, dict):
            return node
        out = {key: self._scalar(item, assume=True) if key in HOST_KEYS and isinstance(item, str) else self._json(item)
               for key, item in node.items()}
        port = node.get("port")
        for host_key in HOST_KEYS:
            host = node.get(host_key)
            service = self.service_of(host, assume=True) if isinstance(host, str) else None
            if service is not None and isinstance(port, int) and not isinstance(port, bool):
                out["port"] = self.dns.local_port(self.namespace, service, port)
                break
        return out
