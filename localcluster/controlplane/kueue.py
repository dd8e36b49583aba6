"""A real Kueue (the manager `make kueue` builds, controlplane/kueue/go.mod) as a process against the local
control plane: `localcluster up --kueue`, `run --kueue`, `LocalCluster(kueue=True)`.

Kueue is installed as its own manifests say (config/components of the same module version: CRDs, RBAC,
webhook configurations), with the adaptations one machine needs, each documented in
docs/real-apiserver.md ("A real Kueue"):
- the webhooks: the API server reaches them at `url: https://127.0.0.1:<port>/...` (as envtest does), with
  a CA and serving certificate made here (`caBundle`), not through the `kueue-webhook-service` Service
  (which is left out: nothing routes a Service here) and not with Kueue's internal cert management;
- the manager runs as its ServiceAccount (a token from the TokenRequest API), so the RBAC it ships is what
  it gets, as in a cluster;
- its configuration: the `pod` integration on, a `managedJobsNamespaceSelector` that leaves out
  kube-system and kueue-system, no leader election, every port on loopback, and the on-demand visibility
  server off (it wants certificates under /visibility);
- its metrics server reads a certificate from the fixed path /etc/kueue/metrics/certs
  (cmd/kueue/main.go): the process runs in a private mount namespace where ours is bind-mounted there.
"""

from __future__ import annotations

import base64
import copy
import datetime
import ipaddress
import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from localcluster.controlplane.processes import Component, ControlPlane, ControlPlaneError, bin_dir, die_with_parent, http_ok
from localcluster.ports import PORT_ATTEMPTS, free_port

NAMESPACE = "kueue-system"
SERVICE_ACCOUNT = "kueue-controller-manager"
# The namespaces Kueue never manages (its own manifests' webhook namespaceSelector says the same).
SYSTEM_NAMESPACES = ("kube-system", NAMESPACE)
# Fixed in Kueue v0.17's cmd/kueue/main.go when internal cert management is off.
METRICS_CERT_DIR = Path("/etc/kueue/metrics/certs")
START_TIMEOUT = 90.0
STOP_GRACE_SECONDS = 10.0
API_GROUP = "kueue.x-k8s.io"
# A manifest as kubectl renders it (any kind, not only the ones KubeObject types).
Manifest = dict[str, Any]


def binary() -> Path:
    return bin_dir() / "kueue"


def manifests_dir() -> Path:
    """Where `make kueue` copies config/components of the module version it built (controlplane/build-kueue.sh)."""
    return bin_dir().parent / "kueue"


def missing() -> str | None:
    """Why a real Kueue cannot start here (what to build or do), or None when it can."""
    if not os.access(binary(), os.X_OK) or not (manifests_dir() / "components").is_dir():
        return (f"no Kueue built: {binary()} or {manifests_dir() / 'components'} is missing; `make kueue` builds "
                "the pinned Kueue manager from the Go module proxy (needs Go, about 8 minutes cold; docs/real-apiserver.md)")
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return (f"Kueue reads its metrics certificate from the fixed path {METRICS_CERT_DIR}, which the local cluster "
                "bind-mounts in a private mount namespace: that needs root and `unshare` (util-linux)")
    return None


def version() -> str:
    """The Kueue version `make kueue` built (its manifests' stamp)."""
    try:
        return (manifests_dir() / "VERSION").read_text().strip()
    except OSError:
        return "?"


# --- certificates -------------------------------------------------------------------------------

def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())


def write_certificates(directory: Path, days: int = 365) -> bytes:
    """A CA and a serving certificate for 127.0.0.1 and localhost it signed, as `tls.crt`/`tls.key` (the names
    controller-runtime's webhook server reads) and `ca.crt` in `directory`; the CA's PEM, for `caBundle`."""
    directory.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)
    start, end = now - datetime.timedelta(minutes=5), now + datetime.timedelta(days=days)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localcluster-kueue-ca")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(start).not_valid_after(end)
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
                                       key_encipherment=False, data_encipherment=False, key_agreement=False,
                                       encipher_only=False, decipher_only=False), critical=True)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localcluster-kueue-webhook")]))
            .issuer_name(ca_name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(start).not_valid_after(end)
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                                                        x509.DNSName("localhost")]), critical=False)
            .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .sign(ca_key, hashes.SHA256()))
    ca_pem = ca.public_bytes(serialization.Encoding.PEM)
    (directory / "ca.crt").write_bytes(ca_pem)
    (directory / "tls.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (directory / "tls.key").write_bytes(_pem_key(key))
    return ca_pem


# --- manifests ----------------------------------------------------------------------------------

def render_manifests(cp: ControlPlane, workdir: Path, components: Path | None = None) -> list[Manifest]:
    """Kueue's CRDs, RBAC and webhook configurations as its config/default kustomization names and places them
    (namespace kueue-system, prefix `kueue-`), rendered by `kubectl kustomize` from the built version's
    config/components; its Deployment, cert Secret and visibility APIService are left out (the manager runs
    here as a process)."""
    components = components or manifests_dir() / "components"
    kustomize_dir = workdir / "kustomize"
    kustomize_dir.mkdir(parents=True, exist_ok=True)
    relative = os.path.relpath(components, kustomize_dir)  # kustomize refuses an absolute path to a base
    (kustomize_dir / "kustomization.yaml").write_text(json.dumps({
        "namespace": NAMESPACE, "namePrefix": "kueue-",
        "resources": [f"{relative}/{part}" for part in ("crd", "rbac", "webhook")],
    }, indent=2))
    rendered = cp.kubectl("kustomize", str(kustomize_dir), timeout=120).stdout
    # 1.7 MB of YAML: libyaml reads it in a second where the pure-Python loader takes five.
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return [doc for doc in yaml.load_all(rendered, Loader=loader) if doc]


def _url_config(client_config: dict[str, Any], base_url: str, ca_bundle: str) -> dict[str, Any]:
    """A webhook clientConfig that names the Service's path at `base_url`."""
    path = (client_config.get("service") or {}).get("path", "/")
    return {"url": base_url.rstrip("/") + path, "caBundle": ca_bundle}


def adapt_manifests(objects: Iterable[Manifest], base_url: str, ca_pem: bytes) -> list[Manifest]:
    """The objects with every webhook (admission and CRD conversion) pointed at `base_url` on loopback with our
    CA, and the webhook Service left out (docs/real-apiserver.md, "A real Kueue")."""
    ca_bundle = base64.b64encode(ca_pem).decode()
    adapted: list[Manifest] = []
    for original in objects:
        obj = copy.deepcopy(original)
        kind = obj.get("kind")
        if kind == "Service":
            continue
        if kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
            for webhook in obj.get("webhooks") or []:
                webhook["clientConfig"] = _url_config(webhook.get("clientConfig") or {}, base_url, ca_bundle)
        if kind == "CustomResourceDefinition":
            conversion = obj.get("spec", {}).get("conversion") or {}
            if conversion.get("strategy") == "Webhook":
                webhook = conversion["webhook"]
                webhook["clientConfig"] = _url_config(webhook.get("clientConfig") or {}, base_url, ca_bundle)
        adapted.append(obj)
    return adapted


def configuration(*, webhook_port: int, health_port: int, metrics_port: int, cert_dir: Path) -> dict[str, Any]:
    """The manager's configuration (config.kueue.x-k8s.io/v1beta2), for one machine."""
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2", "kind": "Configuration",
        "namespace": NAMESPACE,
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
        "metrics": {"bindAddress": f"127.0.0.1:{metrics_port}"},
        "webhook": {"host": "127.0.0.1", "port": webhook_port, "certDir": str(cert_dir)},
        # One manager: nothing to elect.
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "managedJobsNamespaceSelector": {"matchExpressions": [
            {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": list(SYSTEM_NAMESPACES)}]},
        # Plain pods: the route Kueue documents for kinds it has no integration for (MXJob since v0.11).
        # batch/job too, though nothing here queues a Job (a ChainerJob's master Job carries no queue
        # label; its pod joins the job's pod group): Kueue v0.17.0's Job webhook, installed whatever
        # the frameworks say, panics when that integration is off and so refuses every Job
        # (kubernetes-sigs/kueue#10328, fixed in v0.17.1; docs/ecosystem.md, "Kueue").
        "integrations": {"frameworks": ["pod", "batch/job"]},
        # The on-demand visibility API server wants its certificates under /visibility and an APIService.
        "featureGates": {"VisibilityOnDemand": False},
    }


def kubeconfig_for_token(cp: ControlPlane, token: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Config", "current-context": "kueue",
        "clusters": [{"name": "local", "cluster": {"server": cp.server, "certificate-authority": str(cp.ca_file)}}],
        "users": [{"name": SERVICE_ACCOUNT, "user": {"token": token}}],
        "contexts": [{"name": "kueue", "context": {"cluster": "local", "user": SERVICE_ACCOUNT}}],
    }


def mount_wrapper(cert_dir: Path, argv: list[str]) -> list[str]:
    """`argv` in a private mount namespace where `cert_dir` is bind-mounted on METRICS_CERT_DIR."""
    return ["unshare", "--mount", "--propagation", "private", "--",
            "/bin/sh", "-c", f'mount --bind "$0" {METRICS_CERT_DIR} && exec "$@"', str(cert_dir), *argv]


# A ResourceFlavor that says nothing: the quick way to check the webhooks answer (a dry run, nothing stored).
_PROBE = {"apiVersion": f"{API_GROUP}/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": "localcluster-webhook-probe"}}


class Kueue:
    """The Kueue manager on `cp`, its files (certificates, configuration, kubeconfig) in `workdir` and its log
    beside the control plane's (`<control plane dir>/kueue.log`). `start()` installs it and returns once the
    API server gets answers from its webhooks; `stop()` ends the process."""

    def __init__(self, cp: ControlPlane, workdir: Path | None = None):
        self.cp = cp
        self.workdir = workdir or cp.root / "kueue"
        self.component: Component | None = None
        self.webhook_port = 0
        self.startup_seconds = 0.0

    @property
    def log(self) -> Path:
        return self.cp.root / "kueue.log"

    def start(self) -> None:
        problem = missing()
        if problem:
            raise ControlPlaneError(problem)
        begin = time.monotonic()
        cert_dir = self.workdir / "certs"
        ca_pem = write_certificates(cert_dir)
        self.cp.kubectl("create", "namespace", NAMESPACE, check=False)  # there already on a second start
        for attempt in range(1, PORT_ATTEMPTS + 1):
            try:
                self._start_on(free_port(), cert_dir, ca_pem)
                break
            except ControlPlaneError:
                # A port picked for it was taken before it bound it (localcluster.ports): on new ones.
                if attempt == PORT_ATTEMPTS or self.component is None or not self.component.lost_its_port():
                    raise
        self._wait(self._webhooks_answer, "its webhooks to answer the API server")
        self.startup_seconds = time.monotonic() - begin

    def _start_on(self, webhook_port: int, cert_dir: Path, ca_pem: bytes) -> None:
        """Install its manifests with webhooks on `webhook_port`, start it, wait for its readiness probe."""
        self.webhook_port = webhook_port
        objects = adapt_manifests(render_manifests(self.cp, self.workdir), f"https://127.0.0.1:{self.webhook_port}", ca_pem)
        self.cp.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", timeout=120,
                        input=json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}))
        self.cp.wait_established(*(o["metadata"]["name"] for o in objects if o["kind"] == "CustomResourceDefinition"))
        token = self.cp.kubectl("create", "token", SERVICE_ACCOUNT, "-n", NAMESPACE, "--duration=8760h").stdout.strip()
        kubeconfig = self.workdir / "kueue.kubeconfig"
        kubeconfig.write_text(json.dumps(kubeconfig_for_token(self.cp, token), indent=2))
        health_port = free_port()
        config = self.workdir / "config.yaml"
        config.write_text(json.dumps(configuration(webhook_port=self.webhook_port, health_port=health_port,
                                                   metrics_port=free_port(), cert_dir=cert_dir), indent=2))
        METRICS_CERT_DIR.mkdir(parents=True, exist_ok=True)  # only the mount point; the host's copy stays empty
        self._spawn(mount_wrapper(cert_dir, [str(binary()), f"--config={config}"]), kubeconfig)
        self._wait(lambda: http_ok(f"http://127.0.0.1:{health_port}/readyz"), "its readiness probe")

    def _spawn(self, argv: list[str], kubeconfig: Path) -> None:
        with self.log.open("wb") as out:
            process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                       cwd=self.workdir, env={**os.environ, "KUBECONFIG": str(kubeconfig)},
                                       preexec_fn=die_with_parent)
        self.component = Component("kueue", process, self.log)

    def _webhooks_answer(self) -> bool:
        result = self.cp.kubectl("create", "--dry-run=server", "-o", "name", "-f", "-", input=json.dumps(_PROBE), check=False)
        return result.returncode == 0

    def _wait(self, ready: Callable[[], bool], what: str, timeout: float = START_TIMEOUT) -> None:
        assert self.component is not None
        self.component.wait_ready(ready, f"ready ({what})", timeout, interval=0.2)

    def stop(self) -> None:
        if self.component is not None:
            self.component.stop()
            self.component = None
