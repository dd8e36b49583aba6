"""Local clusters on the test session's control plane (tests/conftest.py), one after another.

A `LocalCluster(control_plane=...)` installs its CRDs and Node on the plane it is given and stops
without touching what it wrote. The next one must not meet it: kube-scheduler binds every Pod it
can to the Node, whose next kubelet runs every Pod bound there, and the tests' jobs go to `default`
under names that repeat. (The Node stays, with the size the last cluster gave it, until the next
kubelet writes its own.) `clear_local_clusters` removes what earlier clusters left: every job, Job, StatefulSet and
Pod in any namespace (Pods at once: nothing runs them any more), and every other child kind in
`default` but what the cluster itself keeps there (the `kubernetes` Service, the root CA ConfigMap).
"""

from __future__ import annotations

import time
from urllib.parse import urlencode

from localcluster.config import KNOWN_KINDS, PARENT_KINDS
from localcluster.controlplane.apistore import ApiStore, collection_path
from localcluster.controlplane.processes import ControlPlane
from localcluster.store import StoreError

EVERY_NAMESPACE = [("v1", "Pod"), ("batch/v1", "Job"), ("apps/v1", "StatefulSet"),
                   *[(api_version, kind) for (api_version, _), kind in PARENT_KINDS.items()]]
IN_DEFAULT = [(api_version, kind) for (api_version, _), kind in KNOWN_KINDS.items() if (api_version, kind) not in EVERY_NAMESPACE]
KEPT = {("v1", "Service", "default", "kubernetes"), ("v1", "ConfigMap", "default", "kube-root-ca.crt"),
        ("v1", "ServiceAccount", "default", "default")}
NOW = {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0, "propagationPolicy": "Background"}


def _items(api: ApiStore, api_version: str, kind: str, namespace: str | None, deadline: float) -> list[dict]:
    while True:
        try:
            return list(api.request("GET", collection_path(api_version, kind, namespace)).get("items") or [])
        except StoreError as err:
            if err.code == 404:  # a kind whose CRD no cluster has installed yet
                return []
            # 429 "storage is (re)initializing": a CRD just installed, its watch cache not ready yet
            if err.code != 429 or time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def _leftovers(api: ApiStore, deadline: float) -> list[tuple[str, str, str, str, bool]]:
    """(apiVersion, kind, namespace, name, has finalizers) of everything to remove."""
    found = []
    for kinds, namespace in ((EVERY_NAMESPACE, None), (IN_DEFAULT, "default")):
        for api_version, kind in kinds:
            for item in _items(api, api_version, kind, namespace, deadline):
                meta = item["metadata"]
                key = (api_version, kind, meta["namespace"], meta["name"])
                if key not in KEPT and not meta["namespace"].startswith("kube-"):
                    found.append((*key, bool(meta.get("finalizers"))))
    return found


def clear_local_clusters(cp: ControlPlane, timeout: float = 60.0) -> None:
    """Remove what earlier local clusters left on `cp` (see the module's docstring); wait until it is gone."""
    api = ApiStore(cp.kubeconfig, [])
    deadline = time.monotonic() + timeout
    while leftovers := _leftovers(api, deadline):
        if time.monotonic() > deadline:
            raise TimeoutError(f"the shared control plane still holds {leftovers[:5]} after {timeout:g} s")
        for api_version, kind, namespace, name, finalizers in leftovers:
            path = f"{collection_path(api_version, kind, namespace)}/{name}"
            try:
                if finalizers:  # nothing left runs to remove them (a Job's pod tracking, a test's own)
                    current = api.request("GET", path)
                    current["metadata"]["finalizers"] = []
                    api.request("PUT", path, current)
                api.request("DELETE", path + "?" + urlencode({"gracePeriodSeconds": 0}), NOW)
            except StoreError as err:
                if err.code not in (404, 409, 429):  # gone, changed meanwhile, or not ready: the next round sees
                    raise
        time.sleep(0.2)
