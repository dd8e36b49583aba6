"""Calling a hook over HTTP, as Metacontroller's `pkg/hooks` does.

A hook is a POST of the request as JSON; only an HTTP 200 whose body is a JSON object is an
answer. Anything else (a refused connection, a timeout, another status, a body that is not a JSON
object) is a failed sync, retried with backoff.
"""

from __future__ import annotations

import http.client
import json
import time
from typing import Any
from urllib.parse import urlsplit

from localcluster.store import ObjectStore
from localcluster.types import KubeObject

from .errors import SyncError

# The suffixes cluster DNS accepts after `<service>.<namespace>` (cluster domain cluster.local).
SERVICE_DNS_SUFFIXES = (".svc.cluster.local", ".svc", "")


def post(url: str, request: Any, *, timeout: float, hook: str, timings: list[float] | None = None) -> dict[str, Any]:
    """POST `request` to `url` and return the answer; SyncError naming `hook` when there is none.
    `timings` gets how long the exchange took, answered or not (what Metacontroller's hook timeout
    counts, not the encoding around it)."""
    parts = urlsplit(url)
    body = json.dumps(request).encode()
    conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port or 80, timeout=timeout)
    start = time.monotonic()
    try:
        conn.request("POST", parts.path or "/", body=body, headers={"Content-Type": "application/json"})
        response = conn.getresponse()
        payload = response.read()
    except (OSError, http.client.HTTPException) as err:
        raise SyncError(f"{hook} hook call failed: {err.__class__.__name__}: {err}") from err
    finally:
        conn.close()
        if timings is not None:
            timings.append(time.monotonic() - start)
    if response.status != 200:
        snippet = payload[:300].decode(errors="replace")
        raise SyncError(f"{hook} hook answered HTTP {response.status}: {snippet}")
    try:
        answer = json.loads(payload)
    except ValueError as err:
        raise SyncError(f"{hook} hook answer is not JSON: {err}") from err
    if not isinstance(answer, dict):
        raise SyncError(f"{hook} hook answer is a JSON {type(answer).__name__}, not an object")
    return answer


def resolve_service(store: ObjectStore, host: str) -> KubeObject | None:
    """The Service a host name resolves to in cluster DNS (`<service>.<namespace>[.svc[.cluster.local]]`),
    or None when it names none that exists."""
    for suffix in SERVICE_DNS_SUFFIXES:
        if host.endswith(suffix):
            name, dot, namespace = host[: len(host) - len(suffix)].partition(".")
            if dot and name and namespace and "." not in namespace:
                return store.get("v1", "Service", namespace, name)
    return None


def endpoint(store: ObjectStore, url: str, local_base: str) -> str:
    """Where a call to the hook `url` goes on this machine: its path on `local_base` (the hooks server
    standing in for the Service's endpoints), once its host resolves as cluster DNS resolves it for
    Metacontroller; a host naming no Service, or a port it does not serve, is a SyncError, as in a cluster."""
    named = urlsplit(url)
    port = named.port or (443 if named.scheme == "https" else 80)
    service = resolve_service(store, named.hostname or "")
    if service is None:
        # What Metacontroller's HTTP client reports for a name cluster DNS does not know.
        raise SyncError(f'Post "{url}": dial tcp: lookup {named.hostname}: no such host')
    if port not in [p.get("port") for p in service.get("spec", {}).get("ports", [])]:
        raise SyncError(f'Post "{url}": dial tcp {named.hostname}:{port}: connect: connection refused')
    return local_base + (named.path or "/")
