"""A real Kubernetes control plane on loopback: etcd, kube-apiserver, kube-controller-manager and kube-scheduler, built
from source by `make controlplane` (controlplane/, docs/real-apiserver.md), started as child processes.

This is the project's envtest: the tests start one per session, and the local cluster can run on it.
Nothing here is the only way to start the binaries: it passes ordinary flags, and writes an ordinary
kubeconfig that kubectl and the `kubernetes` Python client read.

What it sets up, and why:
- etcd on a free loopback port, `--unsafe-no-fsync` (a test cluster, thrown away at the end);
- kube-apiserver on a free loopback port, self-signed serving certificate (`--cert-dir`; the file holds
  the certificate then its CA, so it is also the kubeconfig's `certificate-authority`), a bearer token in
  `system:masters` for the admin, RBAC authorization (so Metacontroller's rights can be checked for
  real), default admission plugins, a service-account signing key;
- kube-controller-manager with the controllers the children need (CONTROLLERS below), the node lifecycle
  controller (it takes the not-ready taint off a Node whose kubelet reports Ready, and puts it back when
  the heartbeat stops), the ClusterRole aggregation every cluster runs (so the built-in admin, edit and
  view roles take in an operator's rules), and nothing that acts on what pods here lack (pod GC, taint
  eviction, endpoints: pods have no real network);
- kube-scheduler, as `system:kube-scheduler` with its own token and kubeconfig (the RBAC the API server's
  bootstrap policy gives that user on every cluster), leader election off: it binds every pod whose
  schedulerName is `default-scheduler` to a Node that fits it, preempts by PriorityClass, and honours
  scheduling gates. The Node is the process kubelet's (localcluster/node/registration.py).

Every process runs in a process group of its own and is stopped with it (SIGTERM, then SIGKILL), on
`stop()`, on leaving the `with` block, at interpreter exit, and, through PR_SET_PDEATHSIG, when the
process that started it dies without cleaning up (a SIGKILLed pytest leaves no etcd behind).
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import functools
import json
import os
import re
import secrets
import shutil
import signal
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from localcluster.config import REPO_ROOT
from localcluster.ports import PORT_ATTEMPTS, free_port, says_port_taken

# Where `make controlplane` puts the binaries; CONTROLPLANE_BIN points elsewhere.
DEFAULT_BIN_DIR = REPO_ROOT / ".controlplane" / "bin"
BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")

# The controllers the children need (Job, StatefulSet), the ones that clean up after them (garbage
# collector, namespace, TTL after finished), and the ones admission relies on (a `default`
# ServiceAccount in every namespace, the root CA ConfigMap the projected token volume names).
CONTROLLERS = (
    "job-controller",
    "statefulset-controller",
    "garbage-collector-controller",
    "namespace-controller",
    "serviceaccount-controller",
    "serviceaccount-token-controller",
    "root-ca-certificate-publisher-controller",
    "ttl-after-finished-controller",
    # Marks a deleted pod that was never bound to a node Failed and lets it go, as on any cluster: no
    # kubelet ever stops it. A pod Kueue still holds at its admission gate keeps Kueue's finalizer
    # until then (an MXJob deleted while queued; docs/ecosystem.md, "Kueue").
    "pod-garbage-collector-controller",
    "clusterrole-aggregation-controller",
    # Takes the not-ready taint TaintNodesByCondition puts on a new Node off once its kubelet reports
    # Ready (else the scheduler places nothing there), and marks the Node when the heartbeat stops.
    "node-lifecycle-controller",
)
SCHEDULER_USER = "system:kube-scheduler"  # the user the bootstrap RBAC binds the system:kube-scheduler role to
SERVICE_CLUSTER_IP_RANGE = "10.0.0.0/24"
START_TIMEOUT = 60.0
STOP_GRACE_SECONDS = 5.0


class KubectlError(subprocess.CalledProcessError):
    """kubectl failed; unlike its base class, the message carries what kubectl printed on stderr."""

    def __str__(self) -> str:
        return f"{' '.join(map(str, self.cmd))} exited with {self.returncode}:\n{self.stderr}"


class ControlPlaneError(RuntimeError):
    """The control plane could not start; the message names the component and its log."""


def bin_dir() -> Path:
    return Path(os.environ.get("CONTROLPLANE_BIN", DEFAULT_BIN_DIR))


def go_version() -> str:
    """The Go version the pinned control plane's go.mod asks for (controlplane/kubernetes/go.mod)."""
    found = re.search(r"^go (\S+)$", (REPO_ROOT / "controlplane" / "kubernetes" / "go.mod").read_text(), re.M)
    return found.group(1) if found else "(see controlplane/kubernetes/go.mod)"


def missing_binaries(directory: Path | None = None) -> list[str]:
    directory = directory or bin_dir()
    return [name for name in BINARIES if not os.access(directory / name, os.X_OK)]


def die_with_parent() -> None:
    """Runs in the child between fork and exec: SIGKILL it when the thread that started it dies."""
    os.setsid()
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


@dataclass
class Component:
    name: str
    process: subprocess.Popen[bytes]
    log: Path

    def wait_ready(self, ready: Callable[[], bool], what: str, timeout: float, *,
                   error: type[Exception] = ControlPlaneError, interval: float = 0.1) -> None:
        """Poll `ready` until it holds; `error`, quoting the log's end, if the process exits first or
        `timeout` seconds pass (every process the local cluster starts is awaited this way)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise error(f"{self.name} exited with {self.process.returncode} while starting; "
                            f"end of {self.log}:\n{self.tail()}")
            if ready():
                return
            time.sleep(interval)
        raise error(f"{self.name}: not {what} within {timeout:.0f} s; end of {self.log}:\n{self.tail()}")

    def lost_its_port(self) -> bool:
        """Whether it exited because a port picked for it was taken before it bound it (localcluster.ports)."""
        return self.process.poll() is not None and says_port_taken(self.tail(50))

    def tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self) -> None:
        if self.process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(STOP_GRACE_SECONDS)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()


@dataclass
class ControlPlane:
    """etcd + kube-apiserver + kube-controller-manager in `workdir` (a new temporary directory by default).

    `with ControlPlane() as cp:` starts and stops it; `cp.kubeconfig` is the admin kubeconfig,
    `cp.kubectl(...)` runs kubectl against it, `cp.startup_seconds` says how long each part took.
    """

    binaries: Path = field(default_factory=bin_dir)
    workdir: Path | None = None
    controllers: tuple[str, ...] = CONTROLLERS
    extra_apiserver_flags: tuple[str, ...] = ()
    # Kubernetes feature gates (`Name=true`) for the API server and the scheduler alike: a gated API
    # and the scheduler plugin that reads it are turned on together, or the plugin waits for nothing.
    feature_gates: tuple[str, ...] = ()
    hold_controllers: bool = False
    scheduler: bool = True
    # Log every read (GET, LIST, WATCH) of an object to `audit_log`, with who made it: what tells one
    # client's reads from another's, which `request_counts` (no user or agent there) cannot.
    audit_reads: bool = False
    components: list[Component] = field(default_factory=list)
    startup_seconds: dict[str, float] = field(default_factory=dict)
    token: str = ""
    port: int = 0
    _own_workdir: bool = False

    # -- paths ------------------------------------------------------------------------------------
    @property
    def root(self) -> Path:
        assert self.workdir is not None, "start() first"
        return self.workdir

    @property
    def kubeconfig(self) -> Path:
        return self.root / "admin.kubeconfig"

    @property
    def scheduler_kubeconfig(self) -> Path:
        return self.root / "scheduler.kubeconfig"

    @property
    def audit_log(self) -> Path:
        return self.root / "audit.log"

    @property
    def ca_file(self) -> Path:
        return self.root / "pki" / "apiserver.crt"

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    # -- life -------------------------------------------------------------------------------------
    def __enter__(self) -> ControlPlane:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        missing = missing_binaries(self.binaries)
        if missing:
            raise ControlPlaneError(
                f"no real control plane built: {', '.join(missing)} missing in {self.binaries}; `make controlplane` "
                f"builds it (needs Go {go_version()} or newer on PATH, see docs/real-apiserver.md)"
            )
        if self.workdir is None:
            self.workdir = Path(tempfile.mkdtemp(prefix="controlplane-"))
            self._own_workdir = True
        (self.root / "pki").mkdir(parents=True, exist_ok=True)
        atexit.register(self.stop)
        try:
            self._start_all()
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        for component in reversed(self.components):
            component.stop()
        self.components.clear()
        if self._own_workdir and self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)
            self._own_workdir = False
        atexit.unregister(self.stop)

    def _start_all(self) -> None:
        begin = time.monotonic()
        self.token = secrets.token_hex(16)
        sa_key = self.root / "pki" / "service-account.key"
        sa_key.write_bytes(_rsa_key_pem())
        scheduler_token = secrets.token_hex(16)
        (self.root / "tokens.csv").write_text(f"{self.token},admin,admin,system:masters\n"
                                              f"{scheduler_token},{SCHEDULER_USER},{SCHEDULER_USER}\n")

        def etcd(ports: list[int]) -> list[str]:
            client, peer = ports
            return ["--name=default", f"--data-dir={self.root / 'etcd'}",
                    f"--listen-client-urls=http://127.0.0.1:{client}", f"--advertise-client-urls=http://127.0.0.1:{client}",
                    f"--listen-peer-urls=http://127.0.0.1:{peer}",
                    f"--initial-advertise-peer-urls=http://127.0.0.1:{peer}",
                    f"--initial-cluster=default=http://127.0.0.1:{peer}",
                    "--unsafe-no-fsync=true", "--log-level=warn"]

        etcd_port, _ = self._start_on_free_ports("etcd", 2, etcd, lambda ports: http_ok(f"http://127.0.0.1:{ports[0]}/health"))
        etcd_url = f"http://127.0.0.1:{etcd_port}"
        self.startup_seconds["etcd"] = time.monotonic() - begin

        def apiserver(ports: list[int]) -> list[str]:
            self.port = ports[0]  # self.server (the issuer below) and readiness read it
            return self._apiserver_args(etcd_url, sa_key)

        self._start_on_free_ports("kube-apiserver", 1, apiserver, lambda _: self._api_ok("/readyz"))
        self.startup_seconds["kube-apiserver"] = time.monotonic() - begin - self.startup_seconds["etcd"]
        self._write_kubeconfig(self.kubeconfig, "admin", self.token)
        self._write_kubeconfig(self.scheduler_kubeconfig, SCHEDULER_USER, scheduler_token)

        if not self.hold_controllers:
            self.start_controllers()
        self.startup_seconds["total"] = time.monotonic() - begin

    def _apiserver_args(self, etcd_url: str, sa_key: Path) -> list[str]:
        return [
            f"--etcd-servers={etcd_url}",
            f"--cert-dir={self.root / 'pki'}", "--bind-address=127.0.0.1", f"--secure-port={self.port}",
            # A loopback bind address makes the server look for the host's default-route IP otherwise.
            "--advertise-address=127.0.0.1",
            # The endpoint reconciler would write 127.0.0.1 into the `kubernetes` Endpoints, which validation refuses.
            "--endpoint-reconciler-type=none",
            f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
            f"--service-account-issuer={self.server}",
            f"--service-account-key-file={sa_key}", f"--service-account-signing-key-file={sa_key}",
            f"--token-auth-file={self.root / 'tokens.csv'}",
            "--authorization-mode=RBAC",
            "--allow-privileged=true",
            # Reach a node's kubelet (pods/log, exec) at its InternalIP, not at its host name.
            "--kubelet-preferred-address-types=InternalIP",
            *self._gates(),
            *self._audit_flags(),
            *self.extra_apiserver_flags,
        ]

    def _audit_flags(self) -> list[str]:
        if not self.audit_reads:
            return []
        policy = self.root / "audit-policy.json"
        # Metadata (who, verb, resource; no bodies) for reads of API objects; nothing else. A watch is
        # logged when it starts and when it ends (ResponseStarted, ResponseComplete).
        policy.write_text(json.dumps({
            "apiVersion": "audit.k8s.io/v1", "kind": "Policy", "omitStages": ["RequestReceived"],
            "rules": [{"level": "None", "nonResourceURLs": ["*"]},
                      {"level": "Metadata", "verbs": ["get", "list", "watch"]},
                      {"level": "None"}]}))
        return [f"--audit-policy-file={policy}", f"--audit-log-path={self.audit_log}"]

    def _gates(self) -> list[str]:
        return [f"--feature-gates={','.join(self.feature_gates)}"] if self.feature_gates else []

    def start_controllers(self) -> None:
        """Start kube-controller-manager and kube-scheduler (start() does, unless `hold_controllers`: install
        CRDs first, so the garbage collector knows their kinds from the start instead of after its next 30 s
        discovery). Both start before either is waited for: they come up side by side."""
        mark = time.monotonic()

        def scheduler(ports: list[int]) -> list[str]:
            # Its /readyz (always allowed, no client certificate needed) says when its informers have synced.
            return [f"--kubeconfig={self.scheduler_kubeconfig}", "--leader-elect=false", "--bind-address=127.0.0.1",
                    f"--secure-port={ports[0]}", f"--cert-dir={self.root / 'pki' / 'kube-scheduler'}", *self._gates()]

        def scheduler_ready(ports: list[int]) -> bool:
            return http_ok(f"https://127.0.0.1:{ports[0]}/readyz", context=_unverified_context())

        scheduler_ports = [free_port()]
        if self.scheduler:
            self._spawn("kube-scheduler", scheduler(scheduler_ports))
        sa_key = self.root / "pki" / "service-account.key"
        self._spawn("kube-controller-manager", [
            f"--kubeconfig={self.kubeconfig}",
            f"--controllers={','.join(self.controllers)}",
            f"--service-account-private-key-file={sa_key}", f"--root-ca-file={self.ca_file}",
            "--leader-elect=false", "--secure-port=0",
            f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
        ])
        if "serviceaccount-controller" in self.controllers:
            # The controller manager is working once the serviceaccount controller has made `default`.
            self._wait("kube-controller-manager", lambda: self._api_ok("/api/v1/namespaces/default/serviceaccounts/default"))
        self.startup_seconds["kube-controller-manager"] = time.monotonic() - mark
        if self.scheduler:
            self._start_on_free_ports("kube-scheduler", 1, scheduler, scheduler_ready, started=scheduler_ports)
            self.startup_seconds["kube-scheduler"] = time.monotonic() - mark

    def _spawn(self, name: str, args: list[str]) -> None:
        log = self.root / f"{name}.log"
        with log.open("wb") as out:
            process = subprocess.Popen(
                [str(self.binaries / name), *args], stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                cwd=self.root, preexec_fn=die_with_parent,
            )
        self.components.append(Component(name, process, log))

    def _start_on_free_ports(self, name: str, count: int, args: Callable[[list[int]], list[str]],
                             ready: Callable[[list[int]], bool], *, started: list[int] | None = None) -> list[int]:
        """Start `name` with `args(ports)` on `count` ports picked free and wait until `ready(ports)`;
        again on new ports when it exited because one was taken meanwhile (localcluster.ports).
        `started`: the ports of a start already spawned, to wait for first."""
        ports = started
        for attempt in range(1, PORT_ATTEMPTS + 1):
            if ports is None:
                ports = [free_port() for _ in range(count)]
                self._spawn(name, args(ports))
            component = self._component(name)  # the one start of it not given up
            try:
                component.wait_ready(functools.partial(ready, ports), "ready", START_TIMEOUT)
                return ports
            except ControlPlaneError:
                if attempt == PORT_ATTEMPTS or not component.lost_its_port():
                    raise
            self.components.remove(component)
            ports = None
        raise AssertionError("unreachable")

    def _component(self, name: str) -> Component:
        return next(c for c in self.components if c.name == name)

    def _wait(self, name: str, ready: Callable[[], bool], timeout: float = START_TIMEOUT) -> None:
        self._component(name).wait_ready(ready, "ready", timeout)

    # -- clients ----------------------------------------------------------------------------------
    def _ssl_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.ca_file))

    def _api_ok(self, path: str) -> bool:
        if not self.ca_file.exists():
            return False
        try:
            context = self._ssl_context()
        except ssl.SSLError:  # kube-apiserver is still writing its self-signed certificate: not ready yet
            return False
        return http_ok(f"{self.server}{path}", token=self.token, context=context)

    def get(self, path: str) -> dict[str, Any]:
        """GET a path of the API as admin, decoded."""
        request = urllib.request.Request(f"{self.server}{path}", headers={"Authorization": f"Bearer {self.token}"})
        with urllib.request.urlopen(request, context=self._ssl_context(), timeout=10) as response:
            answer: dict[str, Any] = json.loads(response.read())
            return answer

    def kubectl(self, *args: str, input: str | None = None, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        """Run kubectl against this control plane: the one built beside it, at the server's version
        (KUBECTL names another)."""
        kubectl = os.environ.get("KUBECTL") or str(self.binaries / "kubectl")
        result = subprocess.run(
            [kubectl, f"--kubeconfig={self.kubeconfig}", *args],
            input=input, capture_output=True, text=True, timeout=timeout,
        )
        if check and result.returncode != 0:
            raise KubectlError(result.returncode, result.args, result.stdout, result.stderr)
        return result

    def wait_established(self, *crd_names: str, timeout: float = 60) -> None:
        """Wait until each CRD (by name) is Established. `kubectl wait` alone fails at once on a CRD the
        server has stored but not yet given any condition (a big schema widens that moment)."""
        deadline = time.monotonic() + timeout
        for name in crd_names:
            path = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}"
            while not self.get(path).get("status", {}).get("conditions"):
                if time.monotonic() > deadline:
                    raise ControlPlaneError(f"CRD {name} has no conditions after {timeout:.0f} s")
                time.sleep(0.05)
        self.kubectl("wait", "--for=condition=Established", f"--timeout={timeout:.0f}s", *(f"crd/{n}" for n in crd_names))

    def _write_kubeconfig(self, path: Path, user: str, token: str) -> None:
        config = {
            "apiVersion": "v1", "kind": "Config", "current-context": "local",
            "clusters": [{"name": "local", "cluster": {"server": self.server, "certificate-authority": str(self.ca_file)}}],
            "users": [{"name": user, "user": {"token": token}}],
            "contexts": [{"name": "local", "context": {"cluster": "local", "user": user}}],
        }
        path.write_text(json.dumps(config, indent=2))

    def request_counts(self) -> dict[tuple[str, str, str], int]:
        """Requests the API server has served since it started, by (verb, resource, subresource), from
        its own `apiserver_request_total` metric: what the tests and benchmarks count writes with."""
        request = urllib.request.Request(f"{self.server}/metrics", headers={"Authorization": f"Bearer {self.token}"})
        with urllib.request.urlopen(request, context=self._ssl_context(), timeout=10) as response:
            text = response.read().decode()
        counts: dict[tuple[str, str, str], int] = {}
        for line in text.splitlines():
            if not line.startswith("apiserver_request_total{"):
                continue
            labels_text, _, value = line[len("apiserver_request_total{"):].rpartition("} ")
            labels = dict(re.findall(r'(\w+)="([^"]*)"', labels_text))
            key = (labels.get("verb", ""), labels.get("resource", ""), labels.get("subresource", ""))
            counts[key] = counts.get(key, 0) + int(float(value))
        return counts

    def logs(self) -> Iterator[tuple[str, str]]:
        for component in self.components:
            yield component.name, component.tail()


def prepare_cluster(cp: ControlPlane) -> None:
    """What the local cluster needs on a fresh control plane: the project's CRDs (crd/) and the third-party
    CRDs its children and CompositeControllers use (localcluster/thirdparty). The Node is the kubelet's to
    register (node/registration.py)."""
    from localcluster.thirdparty import third_party_crds

    crds = third_party_crds()
    cp.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-",
               input=json.dumps({"apiVersion": "v1", "kind": "List", "items": crds}))
    cp.kubectl("apply", "--server-side", "--force-conflicts", "-k", str(REPO_ROOT / "crd"))
    cp.wait_established(*(crd["metadata"]["name"] for crd in crds), "mxjobs.kubeflow.org", "chainerjobs.kubeflow.org")


def ensure_namespace(cp: ControlPlane, namespace: str) -> None:
    """Create a namespace if it is missing, and wait for its `default` ServiceAccount (pods need it)."""
    if cp.kubectl("get", "namespace", namespace, check=False).returncode != 0:
        cp.kubectl("create", "namespace", namespace, check=False)
    cp.kubectl("wait", "--for=create", "serviceaccount/default", "-n", namespace, "--timeout=30s")


def http_ok(url: str, *, token: str = "", context: ssl.SSLContext | None = None) -> bool:
    """Whether `url` answers 200 (a readiness probe: any error is not ready)."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), context=context, timeout=2) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError, ssl.SSLError):
        return False


def _unverified_context() -> ssl.SSLContext:
    """For a component's own health endpoint on loopback: it serves a certificate it made itself at start."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


def _rsa_key_pem() -> bytes:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL, serialization.NoEncryption())
