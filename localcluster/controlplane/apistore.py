"""The store interface (store.py) over a real Kubernetes API server: the local cluster on the real control plane.

The Metacontroller emulation, the process kubelet and the DNS stand-in talk to a store; with this
one they are ordinary API clients, and every rule of an API server is the real one's: validation,
defaulting, resourceVersions and conflicts, graceful Pod deletion, immutable fields, and (in
kube-controller-manager) garbage collection and the Job and StatefulSet controllers.

Reads, as a controller makes them:
- `list` answers from an informer cache (one list-then-watch per kind, across namespaces), so what
  it returns can lag the server by a watch event, as Metacontroller's informers do;
- `get` asks the server (Metacontroller's status write and the kubelet read fresh objects).
Watchers are called from the informer threads, in the server's order for each kind.

Each request names its client in its User-Agent, so the API server's audit log tells them apart:
the informers (`AGENT_INFORMER`), the Metacontroller emulation (`agent(AGENT_EMULATION)`, the
view LocalCluster hands it) and everything else in the process (`AGENT`: the kubelet, the CLI,
a test's own reads).
"""

from __future__ import annotations

import contextlib
import copy
import json
import re
import threading
import time
import traceback
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

import kubernetes
import urllib3

from localcluster.config import KNOWN_KINDS, PARENT_KINDS, RELATED_KINDS
from localcluster.store import ADDED, DELETED, MODIFIED, NewStatus, StoreError, Watcher, json_copy
from localcluster.types import KubeObject

# (apiVersion, kind) -> plural: every parent, child and related kind the stand-in knows (config.py), read
# the other way round, plus Events.
PLURALS: dict[tuple[str, str], str] = {
    **{(api_version, kind): plural for (api_version, plural), kind in {**KNOWN_KINDS, **PARENT_KINDS, **RELATED_KINDS}.items()},
    ("v1", "Event"): "events",
}
AGENT, AGENT_INFORMER, AGENT_EMULATION = "localcluster", "localcluster-informer", "localcluster-metacontroller"
WATCH_TIMEOUT_SECONDS = 240  # the server ends a watch after this; the informer resumes from its resourceVersion
RETRY_SECONDS = 0.5


def collection_path(api_version: str, kind: str, namespace: str | None) -> str:
    plural = PLURALS.get((api_version, kind))
    if plural is None:
        raise StoreError(404, "NotFound", f"the local cluster does not know {kind}.{api_version}")
    base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
    return f"{base}/namespaces/{quote(namespace)}/{plural}" if namespace else f"{base}/{plural}"


def warning_text(header: str) -> str:
    """The text of one `Warning` header (RFC 7234: `299 - "text"`, quotes and backslashes escaped).
    The server writes it in UTF-8, which Python's HTTP client has read as Latin-1."""
    with contextlib.suppress(UnicodeError):
        header = header.encode("latin-1").decode("utf-8")
    match = re.fullmatch(r'\d{3} \S+ "((?:[^"\\]|\\.)*)"(?: .*)?', header.strip())
    return re.sub(r"\\(.)", r"\1", match.group(1)) if match else header


class _Informer(threading.Thread):
    """List, then watch one kind across namespaces; keeps a cache and tells the store's watchers."""

    def __init__(self, store: ApiStore, api_version: str, kind: str):
        super().__init__(name=f"informer-{kind}.{api_version}", daemon=True)
        self.store, self.api_version, self.kind = store, api_version, kind
        self.cache: dict[tuple[str, str], KubeObject] = {}
        self.lock = threading.Lock()
        self.synced = threading.Event()
        self.resource_version = ""

    def run(self) -> None:
        client = self.store.new_client(AGENT_INFORMER)
        while not self.store.stopped.is_set():
            try:
                if not self.resource_version:
                    self._relist(client)
                self._watch(client)
            except Exception:  # the server went away or answered oddly: list again after a pause
                if self.store.stopped.is_set():
                    return
                self.resource_version = ""
                time.sleep(RETRY_SECONDS)

    def _relist(self, client: kubernetes.client.ApiClient) -> None:
        answer = self.store.request("GET", collection_path(self.api_version, self.kind, None), client=client)
        fresh = {}
        for item in answer.get("items") or []:
            item.setdefault("apiVersion", self.api_version)
            item.setdefault("kind", self.kind)
            fresh[(item["metadata"].get("namespace", ""), item["metadata"]["name"])] = item
        with self.lock:
            old, self.cache = self.cache, fresh
        self.resource_version = answer["metadata"]["resourceVersion"]
        for key, obj in old.items():
            if key not in fresh:
                self.store.emit(DELETED, obj)
        for key, obj in fresh.items():
            if old.get(key) != obj:
                self.store.emit(MODIFIED if key in old else ADDED, obj)
        self.synced.set()

    def _watch(self, client: kubernetes.client.ApiClient) -> None:
        query = {"watch": "1", "resourceVersion": self.resource_version, "allowWatchBookmarks": "true",
                 "timeoutSeconds": str(WATCH_TIMEOUT_SECONDS)}
        path = collection_path(self.api_version, self.kind, None) + "?" + urlencode(query)
        response = self.store.raw("GET", path, client=client, timeout=WATCH_TIMEOUT_SECONDS + 30)
        self.store.register_stream(response)
        try:
            for line in kubernetes.watch.watch.iter_resp_lines(response):
                if self.store.stopped.is_set():
                    return
                event = json.loads(line)
                kind = event.get("type")
                obj: KubeObject = event.get("object") or KubeObject()
                if kind == "ERROR":
                    self.resource_version = ""  # 410 Gone and friends: list again
                    return
                self.resource_version = obj.get("metadata", {}).get("resourceVersion", self.resource_version)
                if kind == "BOOKMARK":
                    continue
                key = (obj["metadata"].get("namespace", ""), obj["metadata"]["name"])
                with self.lock:
                    if kind == DELETED:
                        self.cache.pop(key, None)
                    else:
                        self.cache[key] = obj
                self.store.emit(kind, obj)
        finally:
            self.store.unregister_stream(response)
            response.release_conn()


class ApiStore:
    """The Store interface over a real API server, for the kinds in PLURALS that `kinds` names."""

    def __init__(self, kubeconfig: Path | str, kinds: Iterable[tuple[str, str]]):
        self.kubeconfig = str(kubeconfig)
        self.client = self.new_client()
        self.stopped = threading.Event()
        self._watchers: list[Watcher] = []
        self._informers = {kind: _Informer(self, *kind) for kind in dict.fromkeys(kinds)}
        self._streams: set[Any] = set()
        self._streams_lock = threading.Lock()

    def new_client(self, agent: str = AGENT) -> kubernetes.client.ApiClient:
        client = kubernetes.config.new_client_from_config(config_file=self.kubeconfig)
        client.user_agent = agent
        return client

    def agent(self, name: str) -> ApiStore:
        """This store (its informers, caches and watchers) with requests of its own sent as `name`."""
        view = copy.copy(self)
        view.client = self.new_client(name)
        return view

    # --- life ------------------------------------------------------------------------------------

    def start(self, timeout: float = 30.0) -> None:
        """Start every informer and wait until each has listed once."""
        for informer in self._informers.values():
            informer.start()
        deadline = time.monotonic() + timeout
        for informer in self._informers.values():
            if not informer.synced.wait(max(0.0, deadline - time.monotonic())):
                raise StoreError(503, "Timeout", f"the {informer.kind} informer did not list within {timeout:g} s")

    def stop(self) -> None:
        self.stopped.set()
        with self._streams_lock:
            streams = list(self._streams)
        for response in streams:
            with contextlib.suppress(Exception):
                response.shutdown()  # unblocks an informer waiting for the next watch event

    def register_stream(self, response: Any) -> None:
        with self._streams_lock:
            self._streams.add(response)

    def unregister_stream(self, response: Any) -> None:
        with self._streams_lock:
            self._streams.discard(response)

    # --- watch -----------------------------------------------------------------------------------

    def watch(self, watcher: Watcher) -> None:
        self._watchers.append(watcher)

    def emit(self, event: str, obj: KubeObject) -> None:
        for watcher in list(self._watchers):
            try:
                watcher(event, json_copy(obj))
            except Exception:  # a broken watcher must not stop the informer
                traceback.print_exc()

    # --- HTTP ------------------------------------------------------------------------------------

    def raw(self, method: str, path: str, *, body: Any = None, client: kubernetes.client.ApiClient | None = None,
            timeout: float = 30.0) -> urllib3.HTTPResponse:
        client = client or self.client
        config = client.configuration
        headers = {"Accept": "application/json", "Content-Type": "application/json", "User-Agent": client.user_agent}
        client.update_params_for_auth(headers, [], ["BearerToken"])  # the token from the kubeconfig, if it has one
        # The kubernetes client has no type hints; its pool manager is urllib3's, whose request() returns this.
        response: urllib3.HTTPResponse = client.rest_client.pool_manager.request(
            method, config.host + path, body=None if body is None else json.dumps(body), headers=headers,
            preload_content=False, timeout=urllib3.Timeout(connect=10, read=timeout), retries=False,
        )
        return response

    def request(self, method: str, path: str, body: Any = None, *, client: kubernetes.client.ApiClient | None = None,
                warn: Callable[[str], None] | None = None) -> Any:
        """One API call; StoreError with the server's code and reason when it refuses. The server's
        warnings go to `warn`, each as kubectl prints it (`Warning: unknown field "spec.x"`)."""
        try:
            response = self.raw(method, path, body=body, client=client)
            data = response.read()
            response.release_conn()
        except (urllib3.exceptions.HTTPError, OSError) as err:
            raise StoreError(503, "ServiceUnavailable", f"{method} {path}: {err}") from err
        if warn is not None:
            for header in response.headers.getlist("Warning"):
                warn(f"Warning: {warning_text(header)}")
        answer = json.loads(data) if data else {}
        if response.status >= 400:
            raise StoreError(response.status, answer.get("reason", "Unknown"), answer.get("message", data.decode(errors="replace")))
        return answer

    def _object(self, method: str, path: str, body: Any = None) -> KubeObject:
        """A call whose answer is the object itself (a GET, POST or PUT of one object)."""
        obj: KubeObject = self.request(method, path, body)
        return obj

    def _object_path(self, api_version: str, kind: str, namespace: str, name: str, sub: str = "") -> str:
        return f"{collection_path(api_version, kind, namespace)}/{quote(name)}" + (f"/{sub}" if sub else "")

    # --- reads -----------------------------------------------------------------------------------

    def get(self, api_version: str, kind: str, namespace: str, name: str) -> KubeObject | None:
        try:
            obj = self._object("GET", self._object_path(api_version, kind, namespace, name))
        except StoreError as err:
            if err.code == 404:
                return None
            raise
        return obj

    def list_shared(self, api_version: str | None = None, kind: str | None = None,
                    namespace: str | None = None) -> list[KubeObject]:
        """The cached objects themselves, not copies, in creation order: read them, never change them
        (copy what you keep or change). A cached object is only ever replaced, never changed in place."""
        found: list[KubeObject] = []
        for (av, k), informer in self._informers.items():
            if (api_version is not None and av != api_version) or (kind is not None and k != kind):
                continue
            with informer.lock:
                found += [obj for (ns, _), obj in informer.cache.items() if namespace is None or ns == namespace]
        return sorted(found, key=lambda o: (o["metadata"].get("creationTimestamp", ""), int(o["metadata"].get("resourceVersion") or 0)))

    def list(self, api_version: str | None = None, kind: str | None = None, namespace: str | None = None) -> list[KubeObject]:
        """Copies from the informer caches, in creation order."""
        return [json_copy(obj) for obj in self.list_shared(api_version, kind, namespace)]

    # --- writes ----------------------------------------------------------------------------------

    def create(self, obj: KubeObject, *, field_validation: str = "", warn: Callable[[str], None] | None = None) -> KubeObject:
        """POST one object. `field_validation` (Strict, Warn, Ignore: the server's default when empty)
        is how the server meets a field the schema does not know; its warnings go to `warn`."""
        meta = obj.get("metadata", {})
        namespace = meta.get("namespace", "default")
        body = copy.deepcopy(obj)
        body.setdefault("metadata", {})["namespace"] = namespace
        path = collection_path(obj["apiVersion"], obj["kind"], namespace)
        if field_validation:
            path += "?" + urlencode({"fieldValidation": field_validation})
        created: KubeObject = self.request("POST", path, body, warn=warn)
        return created

    def update(self, obj: KubeObject) -> KubeObject:
        meta = obj["metadata"]
        namespace = meta.get("namespace", "default")
        body = copy.deepcopy(obj)
        if not meta.get("resourceVersion"):
            current = self.get(obj["apiVersion"], obj["kind"], namespace, meta["name"])
            if current is None:
                raise StoreError(404, "NotFound", f"{obj['kind']} {meta['name']!r} not found")
            body["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
        return self._object("PUT", self._object_path(obj["apiVersion"], obj["kind"], namespace, meta["name"]), body)

    def update_status(self, api_version: str, kind: str, namespace: str, name: str, status: NewStatus, *,
                      current: KubeObject | None = None, attempts: int = 10, uid: str | None = None) -> bool:
        """Replace .status through the status subresource over `current` (the object as just read; read
        here when not given), read again and retried on conflict up to `attempts` times in all; True if it changed. A callable `status`
        makes the new status from the one read, on every attempt. With `uid`, an object of that name but
        another uid is taken as gone (404): a kubelet never writes one Pod's status onto its successor."""
        for attempt in range(attempts):
            if attempt or current is None:
                current = self.get(api_version, kind, namespace, name)
            if current is None or (uid is not None and current["metadata"].get("uid") != uid):
                raise StoreError(404, "NotFound", f"{kind} {name!r} not found")
            new = status(current.get("status") or {}) if callable(status) else status
            if current.get("status") == new:
                return False
            body = {**current, "status": copy.deepcopy(new)}
            try:
                self.request("PUT", self._object_path(api_version, kind, namespace, name, "status"), body)
                return True
            except StoreError as err:
                if err.code != 409:
                    raise
        raise StoreError(409, "Conflict", f"{kind} {name!r}: the status write kept conflicting")

    def delete(self, api_version: str, kind: str, namespace: str, name: str, *, uid: str | None = None) -> None:
        """DELETE in the background (as Metacontroller deletes children); a bound Pod then terminates gracefully."""
        options: dict[str, Any] = {"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": "Background"}
        if uid:
            options["preconditions"] = {"uid": uid}
        self.request("DELETE", self._object_path(api_version, kind, namespace, name), options)

    def remove(self, api_version: str, kind: str, namespace: str, name: str, *, uid: str | None = None) -> None:
        """The kubelet's last step: the containers are gone, so the Pod object goes now (grace 0). With
        `uid`, only that Pod: a new Pod of the same name, created meanwhile, is left alone."""
        options: dict[str, Any] = {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0}
        if uid:
            options["preconditions"] = {"uid": uid}
        with contextlib.suppress(StoreError):
            self.request("DELETE", self._object_path(api_version, kind, namespace, name), options)

    def endpoint(self) -> tuple[str, int]:
        """The API server's host and port, as a pod's KUBERNETES_SERVICE_HOST and _PORT name it."""
        parsed = urlsplit(self.client.configuration.host)
        return parsed.hostname or "", parsed.port or 443

    def request_token(self, namespace: str, service_account: str, *, pod_name: str, pod_uid: str,
                      audience: str | None, expiration_seconds: int) -> str:
        """A ServiceAccount token by the TokenRequest API, bound to the pod, as the kubelet asks for
        a projected volume's token; no audience means the API server's own."""
        spec: dict[str, Any] = {"expirationSeconds": expiration_seconds,
                                "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": pod_name, "uid": pod_uid}}
        if audience:
            spec["audiences"] = [audience]
        path = f"/api/v1/namespaces/{quote(namespace)}/serviceaccounts/{quote(service_account)}/token"
        answer = self.request("POST", path, {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec})
        return str(answer["status"]["token"])

    def bind(self, namespace: str, name: str, node: str) -> None:
        """The scheduler's binding (pods/binding): sets spec.nodeName and PodScheduled=True."""
        body = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": name, "namespace": namespace},
                "target": {"apiVersion": "v1", "kind": "Node", "name": node}}
        self.request("POST", self._object_path("v1", "Pod", namespace, name, "binding"), body)
