"""Cluster DNS stand-in: rewrites Service names in a container's env to loopback, with per-job ports.

There is no DNS server. In a cluster each pod has its own IP, so every replica can listen on the
same port (9091); here every process shares 127.0.0.1, so each (Service, port) pair gets its own
free local port, allocated once and kept for the life of the cluster (a restarted pod finds its
peers where they were). Names of different jobs differ (`<job>-<type>-<index>`), so jobs never
share a port and several run at once.
"""

from __future__ import annotations

import json
import re
import socket
import threading
from collections.abc import Callable
from typing import Any

LOOPBACK = "127.0.0.1"
# Keys that name a host inside a JSON env value (MX_CONFIG uses "url").
HOST_KEYS = ("url", "host", "hostname", "address")
# `<PREFIX>_PORT` is the port of the host in one of these siblings (DMLC_PS_ROOT_PORT ↔ DMLC_PS_ROOT_URI).
HOST_SUFFIXES = ("_URI", "_HOST", "_ADDR", "_ADDRESS")
_HOST_PORT = re.compile(r"^(?P<host>[a-z0-9]([-a-z0-9.]*[a-z0-9])?)(:(?P<port>\d{1,5}))?$")


def free_port() -> int:
    """A TCP port free on loopback right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        return sock.getsockname()[1]


class ClusterDNS:
    """Resolves `<service>[.<namespace>[.svc[.cluster.local]]]` to loopback and remaps its ports."""

    def __init__(self, service_names: Callable[[str], set[str]]):
        self._service_names = service_names
        self._ports: dict[tuple[str, str, int], int] = {}
        self._lock = threading.Lock()

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

    def rewrite_env(self, namespace: str, env: dict[str, str]) -> dict[str, str]:
        """The env with every Service reference pointed at loopback and its remapped port."""
        services = self._service_names(namespace)
        resolver = _Resolver(self, namespace, services)
        out = {name: resolver.value(value) for name, value in env.items()}
        for name, value in env.items():
            if not name.endswith("_PORT") or not value.isdigit():
                continue
            prefix = name[: -len("_PORT")]
            for suffix in HOST_SUFFIXES:
                service = resolver.service_of(env.get(prefix + suffix, ""))
                if service is not None:
                    out[name] = str(self.local_port(namespace, service, int(value)))
                    break
        return out


class _Resolver:
    """Rewrites one env value, given the Services of the namespace."""

    def __init__(self, dns: ClusterDNS, namespace: str, services: set[str]):
        self.dns, self.namespace, self.services = dns, namespace, services

    def service_of(self, host: str) -> str | None:
        """The Service a host name refers to, or None."""
        suffixes = ("", f".{self.namespace}", f".{self.namespace}.svc", f".{self.namespace}.svc.cluster.local")
        for service in self.services:
            if host in (service + suffix for suffix in suffixes):
                return service
        return None

    def value(self, value: str) -> str:
        """One env value: a host, `host:port`, or JSON holding hosts."""
        stripped = value.strip()
        if stripped[:1] in ("{", "["):
            try:
                parsed = json.loads(stripped)
            except ValueError:
                return value
            return json.dumps(self._json(parsed), separators=(",", ":"))
        return self._scalar(value)

    def _scalar(self, value: str) -> str:
        match = _HOST_PORT.match(value)
        if not match:
            return value
        service = self.service_of(match["host"])
        if service is None:
            return value
        if match["port"]:
            return f"{LOOPBACK}:{self.dns.local_port(self.namespace, service, int(match['port']))}"
        return LOOPBACK

    def _json(self, node: Any) -> Any:
        if isinstance(node, list):
            return [self._json(item) for item in node]
        if isinstance(node, str):
            return self._scalar(node)
        if not isinstance(node, dict):
            return node
        out = {key: self._json(item) for key, item in node.items()}
        port = node.get("port")
        for host_key in HOST_KEYS:
            host = node.get(host_key)
            service = self.service_of(host) if isinstance(host, str) else None
            if service is not None and isinstance(port, int) and not isinstance(port, bool):
                out["port"] = self.dns.local_port(self.namespace, service, port)
                break
        return out
