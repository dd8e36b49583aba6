"""The local cluster's DNS: a Service name resolves for a pod's processes only once the Service exists
and a pod it selects has started, checked at each lookup (strict names, localcluster/node/dns.py), and a
clear fallback where that cannot run."""
from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, cast

import pytest
from helpers.objectstore import ObjectBag

from localcluster.cluster import LocalCluster
from localcluster.node import dns as dns_module
from localcluster.node.dns import ClusterDNS, strict_dns_unavailable
from localcluster.types import KubeObject

needs_strict = pytest.mark.skipif(strict_dns_unavailable() is not None,
                                  reason=f"strict DNS cannot run here: {strict_dns_unavailable()}")


def _service(name: str, selector: dict[str, str]) -> KubeObject:
    return cast(KubeObject, {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name},
                             "spec": {"clusterIP": "None", "selector": selector, "ports": [{"port": 9091}]}})


def _pod(name: str, labels: dict[str, str], **spec: Any) -> KubeObject:
    return cast(KubeObject, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels},
                             "spec": {"containers": [{"name": "c", "image": "i"}], **spec}})


@needs_strict
def test_a_service_name_resolves_once_the_service_exists_and_its_pod_runs(tmp_path: Path):
    store = ObjectBag()
    dns = ClusterDNS(store)
    hosts = dns.register("default", "me", "me", tmp_path / "hosts")
    names = lambda: {line.split()[1] for line in hosts.read_text().splitlines() if line.startswith("127.0.0.1 ")}  # noqa: E731
    assert "me" in names() and "late" not in names()
    store.create(_pod("late-0", {"app": "late"}))
    store.create(_service("late", {"app": "late"}))
    assert "late" not in names()  # the Service exists, its pod has no address yet
    store.update_status("v1", "Pod", "default", "late-0", {"phase": "Running"})
    assert {"late", "late.default", "late.default.svc", "late.default.svc.cluster.local"} <= names()
    store.remove("v1", "Pod", "default", "late-0")
    assert "late" not in names()


@needs_strict
def test_a_statefulset_pods_hostname_resolves_under_its_governing_service(tmp_path: Path):
    store = ObjectBag()
    dns = ClusterDNS(store)
    store.create(_service("w", {"app": "w"}))
    store.create(_pod("w-0", {"app": "w"}, hostname="w-0", subdomain="w"))
    store.update_status("v1", "Pod", "default", "w-0", {"phase": "Running"})
    assert "w-0.w.default.svc.cluster.local" in dns.register("default", "m", "m", tmp_path / "hosts").read_text()


@needs_strict
def test_a_running_process_sees_a_late_name_at_its_next_lookup(tmp_path: Path):
    store = ObjectBag()
    dns = ClusterDNS(store)
    hosts = dns.register("default", "me", "me", tmp_path / "hosts")
    probe = ("import socket, time\n"
             "for _ in range(200):\n"
             "    try:\n"
             "        print('resolved', socket.gethostbyname('late-svc'), flush=True); break\n"
             "    except OSError:\n"
             "        print('unknown', flush=True); time.sleep(0.05)\n")
    process = subprocess.Popen(dns.wrap([sys.executable, "-c", probe], hosts), stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        assert process.stdout.readline().strip() == "unknown"  # started before the name exists
        store.create(_service("late-svc", {"app": "late"}))
        store.create(_pod("late-0", {"app": "late"}))
        store.update_status("v1", "Pod", "default", "late-0", {"phase": "Running"})
        out, _ = process.communicate(timeout=20)
    finally:
        process.kill()
    assert out.strip().splitlines()[-1] == "resolved 127.0.0.1"
    assert "late-svc" not in Path("/etc/hosts").read_text()  # the host's own file is untouched


def _names(hosts: Path) -> set[str]:
    return {line.split()[1] for line in hosts.read_text().splitlines() if line.startswith("127.0.0.1 ")}


def test_a_refresh_that_read_the_cluster_before_a_change_never_writes_after_the_refresh_for_it(monkeypatch, tmp_path: Path):
    """Changes are told on the thread that made them (a pod's kubelet thread, Metacontroller's, one informer
    per kind), so two refreshes of one hosts file overlap. Forced here: one reads the cluster before the
    scheduler's Service exists and is held; the Service is created meanwhile. Had the held one written
    last, the file would lack the name for good (nothing changes again): the ps-lite start-up stall, a
    server that never found its scheduler."""
    monkeypatch.setattr(dns_module, "strict_dns_unavailable", lambda: None)  # files only: no mount namespace here
    store = ObjectBag()
    dns = ClusterDNS(store)
    hosts = dns.register("default", "server-0", "server-0", tmp_path / "hosts")
    store.create(_pod("scheduler-0", {"app": "s"}))
    store.update_status("v1", "Pod", "default", "scheduler-0", {"phase": "Running"})
    has_read, release = threading.Event(), threading.Event()
    resolvable = dns.resolvable

    def held_after_reading(namespace: str) -> list[str]:
        names = resolvable(namespace)
        if threading.current_thread().name == "early":
            has_read.set()
            release.wait(10)
        return names

    monkeypatch.setattr(dns, "resolvable", held_after_reading)
    early = threading.Thread(target=dns.refresh, args=("default",), name="early")
    early.start()
    assert has_read.wait(10)
    # The Service's watcher refreshes on this thread; without the fix it writes the name at once, with it
    # it waits for the early refresh (hence a bounded join, then the release).
    late = threading.Thread(target=store.create, args=(_service("scheduler-0", {"app": "s"}),), name="late")
    late.start()
    late.join(1.0)
    release.set()
    early.join(10)
    late.join(10)
    assert not early.is_alive() and not late.is_alive()
    assert "scheduler-0" in _names(hosts)


def test_strict_names_keep_the_name_and_remap_the_port():
    store = ObjectBag()
    store.create(_service("job-scheduler-0", {"a": "b"}))
    dns = ClusterDNS(store, strict=False)
    dns.strict = True  # the env rule alone; no hosts file is involved
    env = dns.rewrite_env("default", {"DMLC_PS_ROOT_URI": "job-scheduler-0", "DMLC_PS_ROOT_PORT": "9091",
                                      "MX_CONFIG": '{"url": "job-scheduler-0:9091"}'})
    port = dns.local_port("default", "job-scheduler-0", 9091)
    assert env["DMLC_PS_ROOT_URI"] == "job-scheduler-0" and env["DMLC_PS_ROOT_PORT"] == str(port)
    assert env["MX_CONFIG"] == f'{{"url":"job-scheduler-0:{port}"}}'


@pytest.mark.apiserver
def test_where_strict_names_cannot_run_the_cluster_says_so_and_rewrites_names(monkeypatch, tmp_path, capsys, cluster_plane):
    monkeypatch.setattr(dns_module, "strict_dns_unavailable", lambda: "it needs root (test)")
    with LocalCluster(tmp_path / "state", control_plane=cluster_plane) as cluster:
        assert not cluster.dns.strict
    err = capsys.readouterr().err
    assert "it needs root (test)" in err and "rewritten to 127.0.0.1" in err



def test_a_peer_named_before_its_service_exists_gets_its_port_mapped_and_a_role_stays_a_role():
    """Metacontroller creates Pods before their Services: the env is read while the name is still unknown."""
    dns = ClusterDNS(ObjectBag(), strict=False)
    env = dns.rewrite_env("default", {"DMLC_PS_ROOT_URI": "job-scheduler-0", "DMLC_PS_ROOT_PORT": "9091",
                                      "DMLC_ROLE": "worker", "OTHER_HOST": "example.com", "MX_CONFIG": '{"url": "job-server-0"}'})
    assert env["DMLC_PS_ROOT_URI"] == "127.0.0.1"
    assert env["DMLC_PS_ROOT_PORT"] == str(dns.local_port("default", "job-scheduler-0", 9091))
    assert env["DMLC_ROLE"] == "worker" and env["OTHER_HOST"] == "example.com"
    assert env["MX_CONFIG"] == '{"url":"127.0.0.1"}'


@needs_strict
def test_a_pod_under_a_job_service_resolves_in_every_form_a_pod_would_look_up(tmp_path: Path):
    """An MXJob's per-job layout: one headless Service selects every pod, each pod sets hostname and
    subdomain. A process looks up `<pod>.<job>` (its search path adds `<ns>.svc.cluster.local`) or a
    longer form; each resolves once the Service exists and that pod runs, and only for pods that set
    both fields."""
    store = ObjectBag()
    dns = ClusterDNS(store)
    hosts = dns.register("default", "mx-worker-0", "mx-worker-0", tmp_path / "hosts", subdomain="mx")
    names = lambda: {n for line in hosts.read_text().splitlines() if line.startswith("127.0.0.1 ")  # noqa: E731
                     for n in line.split()[1:]}
    # Its own fully qualified name resolves from the start, as the kubelet's hosts file has it.
    assert {"mx-worker-0", "mx-worker-0.mx.default.svc.cluster.local"} <= names()
    store.create(_pod("mx-scheduler-0", {"job": "mx"}, hostname="mx-scheduler-0", subdomain="mx"))
    store.create(_pod("stray", {"job": "mx"}))  # selected, but without a hostname: no name of its own
    store.update_status("v1", "Pod", "default", "mx-scheduler-0", {"phase": "Running"})
    store.update_status("v1", "Pod", "default", "stray", {"phase": "Running"})
    assert "mx-scheduler-0.mx" not in names()  # the pod runs; its Service does not exist yet
    store.create(_service("mx", {"job": "mx"}))
    forms = {"mx-scheduler-0.mx", "mx-scheduler-0.mx.default", "mx-scheduler-0.mx.default.svc",
             "mx-scheduler-0.mx.default.svc.cluster.local"}
    assert forms <= names()
    assert not any(n.startswith("stray") for n in names())
    probe = "import socket, sys; print(socket.gethostbyname(sys.argv[1]))"
    for form in ("mx-scheduler-0.mx", "mx-scheduler-0.mx.default.svc"):
        out = subprocess.run(dns.wrap([sys.executable, "-c", probe, form], hosts), capture_output=True, text=True,
                             check=True, timeout=30)
        assert out.stdout.strip() == "127.0.0.1"
    store.update_status("v1", "Pod", "default", "mx-scheduler-0", {"phase": "Failed"})
    assert not forms & names()


def test_each_pod_under_a_job_service_gets_its_own_ports_whatever_form_names_it():
    """Every process shares 127.0.0.1, so two pods under one Service must not share a port; the same
    pod named in a longer form is the same endpoint. Read before the Service exists (Metacontroller
    writes Pods first): the starting pod's own subdomain says `<pod>.<job>` is a peer, not a domain."""
    dns = ClusterDNS(ObjectBag(), strict=False)
    dns.strict = True  # the env rule alone; no hosts file is involved
    mx_config = json.dumps({"cluster": {"scheduler": [{"port": 9091, "url": "mx-scheduler-0.mx"}],
                                        "worker": [{"port": 9091, "url": "mx-worker-0.mx"},
                                                   {"port": 9091, "url": "mx-worker-1.mx.default.svc"}]}})
    env = dns.rewrite_env("default", {"DMLC_PS_ROOT_URI": "mx-scheduler-0.mx", "DMLC_PS_ROOT_PORT": "9091",
                                      "MX_CONFIG": mx_config, "OTHER_HOST": "example.com"}, subdomain="mx")
    scheduler = dns.local_port("default", "mx-scheduler-0.mx", 9091)
    assert env["DMLC_PS_ROOT_URI"] == "mx-scheduler-0.mx" and env["DMLC_PS_ROOT_PORT"] == str(scheduler)
    cluster = json.loads(env["MX_CONFIG"])["cluster"]
    ports = [cluster["scheduler"][0]["port"], cluster["worker"][0]["port"], cluster["worker"][1]["port"]]
    assert ports[0] == scheduler and len(set(ports)) == 3 and 9091 not in ports
    assert ports[2] == dns.local_port("default", "mx-worker-1.mx", 9091)
    assert env["OTHER_HOST"] == "example.com"
    # Without the subdomain (a pod of another job) a bare two-label name is not taken for a peer.
    other = dns.rewrite_env("default", {"PEER_HOST": "mx-worker-0.mx", "PEER_PORT": "9091"})
    assert other == {"PEER_HOST": "mx-worker-0.mx", "PEER_PORT": "9091"}
