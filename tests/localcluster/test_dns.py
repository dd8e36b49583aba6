"""The local cluster's DNS: a Service name resolves for a pod's processes only once the Service exists
and a pod it selects has started, checked at each lookup (strict names, localcluster/dns.py), and a
clear fallback where that cannot run."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any, cast

import pytest

from localcluster import dns as dns_module
from localcluster.cluster import LocalCluster
from localcluster.dns import ClusterDNS, strict_dns_unavailable
from localcluster.store import Store
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
    store = Store()
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
    store = Store()
    dns = ClusterDNS(store)
    store.create(_service("w", {"app": "w"}))
    store.create(_pod("w-0", {"app": "w"}, hostname="w-0", subdomain="w"))
    store.update_status("v1", "Pod", "default", "w-0", {"phase": "Running"})
    assert "w-0.w.default.svc.cluster.local" in dns.register("default", "m", "m", tmp_path / "hosts").read_text()


@needs_strict
def test_a_running_process_sees_a_late_name_at_its_next_lookup(tmp_path: Path):
    store = Store()
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


def test_strict_names_keep_the_name_and_remap_the_port():
    store = Store()
    store.create(_service("job-scheduler-0", {"a": "b"}))
    dns = ClusterDNS(store, strict=False)
    dns.strict = True  # the env rule alone; no hosts file is involved
    env = dns.rewrite_env("default", {"DMLC_PS_ROOT_URI": "job-scheduler-0", "DMLC_PS_ROOT_PORT": "9091",
                                      "MX_CONFIG": '{"url": "job-scheduler-0:9091"}'})
    port = dns.local_port("default", "job-scheduler-0", 9091)
    assert env["DMLC_PS_ROOT_URI"] == "job-scheduler-0" and env["DMLC_PS_ROOT_PORT"] == str(port)
    assert env["MX_CONFIG"] == f'{{"url":"job-scheduler-0:{port}"}}'


def test_where_strict_names_cannot_run_the_cluster_says_so_and_rewrites_names(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(dns_module, "strict_dns_unavailable", lambda: "it needs root (test)")
    cluster = LocalCluster(tmp_path / "state")  # not started: no process
    assert not cluster.dns.strict
    err = capsys.readouterr().err
    assert "it needs root (test)" in err and "rewritten to 127.0.0.1" in err



def test_a_peer_named_before_its_service_exists_gets_its_port_mapped_and_a_role_stays_a_role():
    """Metacontroller creates Pods before their Services: the env is read while the name is still unknown."""
    dns = ClusterDNS(Store(), strict=False)
    env = dns.rewrite_env("default", {"DMLC_PS_ROOT_URI": "job-scheduler-0", "DMLC_PS_ROOT_PORT": "9091",
                                      "DMLC_ROLE": "worker", "OTHER_HOST": "example.com", "MX_CONFIG": '{"url": "job-server-0"}'})
    assert env["DMLC_PS_ROOT_URI"] == "127.0.0.1"
    assert env["DMLC_PS_ROOT_PORT"] == str(dns.local_port("default", "job-scheduler-0", 9091))
    assert env["DMLC_ROLE"] == "worker" and env["OTHER_HOST"] == "example.com"
    assert env["MX_CONFIG"] == '{"url":"127.0.0.1"}'
