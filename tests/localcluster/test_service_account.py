"""What a pod on the local cluster is given to reach the API server as an in-cluster client: the
`kubernetes` Service's env and the ServiceAccount token volume (no processes, no API server: the
token requester is a stand-in that records what it was asked)."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.objectstore import ObjectBag

from localcluster.node.dns import ClusterDNS
from localcluster.node.podenv import resolve_env
from localcluster.node.podsandbox import PodSandbox, kubernetes_service_env, token_file_env
from localcluster.node.volumes import SERVICE_ACCOUNT_DIR, PathMap, VolumeNotReady, path_map, prepare_volumes
from localcluster.store import StoreError

# The volume the ServiceAccount admission plugin adds to every pod (kube-api-access-*), as stored.
API_ACCESS = {"name": "kube-api-access-x2k9p", "projected": {"defaultMode": 420, "sources": [
    {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
    {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
    {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}},
]}}
CONTAINER = {"name": "mxnet", "image": "i", "volumeMounts": [
    {"name": "kube-api-access-x2k9p", "mountPath": SERVICE_ACCOUNT_DIR, "readOnly": True}]}
POD = {"metadata": {"name": "job-worker-0", "namespace": "ns1", "uid": "u-1"},
       "spec": {"serviceAccountName": "job-progress", "containers": [CONTAINER], "volumes": [API_ACCESS]}}


def test_the_kubernetes_service_env_names_the_local_api_server():
    env = kubernetes_service_env("127.0.0.1", 41234)
    assert env == {
        "KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": "41234",
        "KUBERNETES_SERVICE_PORT_HTTPS": "41234", "KUBERNETES_PORT": "tcp://127.0.0.1:41234",
        "KUBERNETES_PORT_41234_TCP": "tcp://127.0.0.1:41234", "KUBERNETES_PORT_41234_TCP_PROTO": "tcp",
        "KUBERNETES_PORT_41234_TCP_PORT": "41234", "KUBERNETES_PORT_41234_TCP_ADDR": "127.0.0.1",
    }


def test_service_variables_expand_in_declared_values_and_a_declared_entry_overrides_them():
    container = {"env": [{"name": "API", "value": "https://$(KUBERNETES_SERVICE_HOST):$(KUBERNETES_SERVICE_PORT)"},
                         {"name": "KUBERNETES_SERVICE_PORT", "value": "6443"}]}
    env = resolve_env(container, POD, config_map=lambda name: None, runtime={},
                      services=kubernetes_service_env("127.0.0.1", 41234))
    assert env["API"] == "https://127.0.0.1:41234"
    assert env["KUBERNETES_SERVICE_PORT"] == "6443"
    assert env["KUBERNETES_SERVICE_HOST"] == "127.0.0.1"
    assert resolve_env({"env": [{"name": "A", "value": "$(KUBERNETES_SERVICE_HOST)"}]}, POD,
                       config_map=lambda name: None, runtime={}) == {"A": "$(KUBERNETES_SERVICE_HOST)"}


def test_the_token_volume_holds_a_token_requested_for_the_pod_with_the_ca_and_namespace(tmp_path: Path):
    asked: list[tuple[str | None, int]] = []

    def request(audience: str | None, seconds: int) -> str:
        asked.append((audience, seconds))
        return "eyJ.token"

    root_ca = {"data": {"ca.crt": "-----BEGIN CERTIFICATE-----\n"}}
    unsupported = prepare_volumes(tmp_path, POD, lambda ns, name: root_ca if (ns, name) == ("ns1", "kube-root-ca.crt") else None,
                                  request)
    assert unsupported == []
    assert asked == [(None, 3607)]  # the API server's own audience, the admission plugin's lifetime
    volume = tmp_path / "volumes" / "kube-api-access-x2k9p"
    assert (volume / "token").read_text() == "eyJ.token"
    assert (volume / "ca.crt").read_text() == root_ca["data"]["ca.crt"]
    assert (volume / "namespace").read_text() == "ns1"
    assert (volume / "token").stat().st_mode & 0o777 == 0o644  # defaultMode 420


def test_the_token_path_is_mapped_for_the_progress_helper_like_any_mount_path(tmp_path: Path):
    mapping = path_map(tmp_path, POD, CONTAINER)
    volume = tmp_path / "volumes" / "kube-api-access-x2k9p"
    assert mapping.rewrite(f"{SERVICE_ACCOUNT_DIR}/token") == f"{volume}/token"
    assert token_file_env(mapping) == {"MXJOB_PROGRESS_TOKEN_FILE": f"{volume}/token",
                                       "MXJOB_PROGRESS_CA_FILE": f"{volume}/ca.crt"}


def test_without_the_volume_or_a_token_requester_no_token_is_written(tmp_path: Path):
    # automountServiceAccountToken: false: admission adds no volume and no mount.
    assert token_file_env(PathMap({})) == {}
    assert prepare_volumes(tmp_path, POD, lambda ns, name: None, None) == []
    assert not (tmp_path / "volumes" / "kube-api-access-x2k9p" / "token").exists()
    assert (tmp_path / "volumes" / "kube-api-access-x2k9p" / "namespace").read_text() == "ns1"


class RefusingStore(ObjectBag):
    """A store with an API server behind it that refuses every TokenRequest (say, the account is gone)."""

    def endpoint(self) -> tuple[str, int]:
        return "127.0.0.1", 41234

    def request_token(self, namespace: str, service_account: str, **_: object) -> str:
        raise StoreError(404, "NotFound", f'serviceaccounts "{service_account}" not found')


def test_a_refused_token_request_is_a_volume_not_ready_and_the_env_names_the_api_server(tmp_path: Path):
    store = RefusingStore()
    sandbox = PodSandbox(POD, pods_dir=tmp_path, store=store, dns=ClusterDNS(store, strict=False), workdir=tmp_path)
    with pytest.raises(VolumeNotReady, match='failed to fetch token for serviceaccount ns1/job-progress: 404'):
        sandbox.prepare()
    env, declared = sandbox.env(CONTAINER)
    assert env["KUBERNETES_SERVICE_HOST"] == "127.0.0.1" and env["KUBERNETES_SERVICE_PORT"] == "41234"
    assert env["MXJOB_PROGRESS_TOKEN_FILE"] == str(sandbox.state_root / "volumes" / "kube-api-access-x2k9p" / "token")
    assert declared["KUBERNETES_PORT"] == "tcp://127.0.0.1:41234"
