"""How the local cluster adapts Kueue's own manifests to one machine (localcluster/controlplane/kueue.py): no Kueue runs
here; test_kueue.py runs the real one."""

from __future__ import annotations

import base64
import ipaddress
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509

from localcluster.controlplane.kueue import adapt_manifests, configuration, mount_wrapper, write_certificates

BASE = "https://127.0.0.1:9443"


def service_config(path: str) -> dict[str, Any]:
    return {"service": {"name": "kueue-webhook-service", "namespace": "kueue-system", "path": path}}


def crd(name: str, strategy: str | None) -> dict[str, Any]:
    spec: dict[str, Any] = {"group": "kueue.x-k8s.io"}
    if strategy == "Webhook":
        spec["conversion"] = {"strategy": "Webhook",
                              "webhook": {"clientConfig": service_config("/convert"), "conversionReviewVersions": ["v1"]}}
    return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition", "metadata": {"name": name}, "spec": spec}


MANIFESTS = [
    {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "kueue-webhook-service", "namespace": "kueue-system"}},
    {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
     "metadata": {"name": "kueue-mutating-webhook-configuration"},
     "webhooks": [{"name": "mpod.kb.io", "clientConfig": service_config("/mutate--v1-pod"), "failurePolicy": "Fail"}]},
    {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
     "metadata": {"name": "kueue-validating-webhook-configuration"},
     "webhooks": [{"name": "vpod.kb.io", "clientConfig": service_config("/validate--v1-pod")},
                  {"name": "vworkload.kb.io", "clientConfig": service_config("/validate-kueue-x-k8s-io-v1beta2-workload")}]},
    crd("workloads.kueue.x-k8s.io", "Webhook"),
    crd("resourceflavors.kueue.x-k8s.io", None),
    {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "kueue-manager-role"}, "rules": []},
]


def test_the_webhook_service_is_left_out_and_nothing_else() -> None:
    kinds = [obj["kind"] for obj in adapt_manifests(MANIFESTS, BASE, b"CA")]
    assert kinds == [obj["kind"] for obj in MANIFESTS[1:]]


@pytest.mark.parametrize(("kind", "index", "url"), [
    ("MutatingWebhookConfiguration", 0, f"{BASE}/mutate--v1-pod"),
    ("ValidatingWebhookConfiguration", 0, f"{BASE}/validate--v1-pod"),
    ("ValidatingWebhookConfiguration", 1, f"{BASE}/validate-kueue-x-k8s-io-v1beta2-workload"),
], ids=["mutating-pod", "validating-pod", "validating-workload"])
def test_each_admission_webhook_is_called_at_its_path_on_loopback_with_our_ca(kind: str, index: int, url: str) -> None:
    adapted = next(obj for obj in adapt_manifests(MANIFESTS, BASE, b"CA PEM") if obj["kind"] == kind)
    webhook = adapted["webhooks"][index]
    assert webhook["clientConfig"] == {"url": url, "caBundle": base64.b64encode(b"CA PEM").decode()}


def test_a_conversion_webhook_is_called_on_loopback_and_a_crd_without_one_is_unchanged() -> None:
    adapted = {obj["metadata"]["name"]: obj for obj in adapt_manifests(MANIFESTS, BASE, b"CA")}
    conversion = adapted["workloads.kueue.x-k8s.io"]["spec"]["conversion"]
    assert conversion["webhook"]["clientConfig"]["url"] == f"{BASE}/convert"
    assert conversion["webhook"]["conversionReviewVersions"] == ["v1"]
    assert adapted["resourceflavors.kueue.x-k8s.io"] == MANIFESTS[4]


def test_the_input_is_not_changed() -> None:
    before = repr(MANIFESTS)
    adapt_manifests(MANIFESTS, BASE, b"CA")
    assert repr(MANIFESTS) == before


def test_the_configuration_enables_plain_pods_outside_the_system_namespaces_on_loopback(tmp_path: Path) -> None:
    config = configuration(webhook_port=1, health_port=2, metrics_port=3, cert_dir=tmp_path)
    assert config["integrations"] == {"frameworks": ["pod", "batch/job"]}
    assert config["managedJobsNamespaceSelector"]["matchExpressions"] == [
        {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system", "kueue-system"]}]
    assert config["internalCertManagement"] == {"enable": False}
    assert config["webhook"] == {"host": "127.0.0.1", "port": 1, "certDir": str(tmp_path)}
    assert config["health"]["healthProbeBindAddress"] == "127.0.0.1:2"
    assert config["metrics"]["bindAddress"] == "127.0.0.1:3"


def test_the_serving_certificate_is_for_loopback_and_signed_by_the_ca_given_as_bundle(tmp_path: Path) -> None:
    ca_pem = write_certificates(tmp_path)
    ca = x509.load_pem_x509_certificate(ca_pem)
    cert = x509.load_pem_x509_certificate((tmp_path / "tls.crt").read_bytes())
    cert.verify_directly_issued_by(ca)
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert ipaddress.ip_address("127.0.0.1") in names.get_values_for_type(x509.IPAddress)
    assert (tmp_path / "tls.key").read_bytes().startswith(b"-----BEGIN PRIVATE KEY-----")


def test_the_manager_runs_with_our_certificate_on_the_fixed_metrics_path(tmp_path: Path) -> None:
    argv = mount_wrapper(tmp_path, ["/bin/kueue", "--config=c.yaml"])
    assert argv[:4] == ["unshare", "--mount", "--propagation", "private"]
    assert "mount --bind \"$0\" /etc/kueue/metrics/certs && exec \"$@\"" in argv
    assert argv[-3:] == [str(tmp_path), "/bin/kueue", "--config=c.yaml"]
