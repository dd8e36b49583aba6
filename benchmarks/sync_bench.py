"""Times one MXJob sync, pure and over HTTP, against the floor of its JSON, for running jobs of 1 to 2,500 replicas.

Run from the repo root: `python benchmarks/sync_bench.py` (or `make bench`; `--big` adds the largest
admissible job, 2,500 replicas). It prints a markdown table and asserts nothing about time. The
observed children are built the way Metacontroller would see them: the core's own desired children,
as the API server stores them (server defaults, ownerReferences, managedFields, the last-applied
annotation) with a Running status added.

Per size: request and response bytes; the pure core (on the request as the shell decodes it); the
HTTP sync through Flask's test client and through the real gunicorn command on loopback (one
worker); the floor, which is decoding the same request bytes and encoding the same answer with the
stdlib `json` and with orjson in the same run; the ratios of the pure core, of the in-process (test
client) sync and of the gunicorn sync to the orjson floor;
and the peak resident memory (VmHWM) of the gunicorn worker after that size's syncs.
"""

from __future__ import annotations

import argparse
import copy
import gc
import http.client
import json
import os
import pathlib
import platform
import signal
import socket
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import orjson  # noqa: E402

import hooks.kinds  # noqa: E402
from hooks.mxjob.sync import sync_mxjob  # noqa: E402
from hooks.server.app import DEFAULT_MAX_CONTENT_LENGTH, create_app  # noqa: E402
from hooks.server.wire import RequestDecoder  # noqa: E402

LAST_APPLIED = "metacontroller.k8s.io/last-applied-configuration"
JOB_NAME = "imagenet-resnet50"  # a realistic name length: MX_CONFIG grows with it
NAMESPACE = "ml-training"
CREATED = datetime(2026, 3, 1, 9, 0, 0, tzinfo=UTC)
SIZES = (1, 100, 1000)
BIG_SIZES = (2500,)  # the largest admissible job: its expanded MX_CONFIG just fits 128 KiB


def stamp(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def uid_of(*parts: str) -> str:
    """A stable uid, so runs are comparable."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, "/".join(parts)))


def replica_counts(replicas: int) -> dict[str, int]:
    """1 replica: a lone Worker; otherwise 1 Scheduler, a tenth Servers, the rest Workers."""
    if replicas == 1:
        return {"Worker": 1}
    servers = max(1, replicas // 10)
    return {"Scheduler": 1, "Server": servers, "Worker": replicas - 1 - servers}


def mxjob(replicas: int) -> dict[str, Any]:
    """The MXJob as the API server returns it: with metadata the server fills in."""
    template = {
        "metadata": {"labels": {"team": "vision"}, "annotations": {"sidecar.istio.io/inject": "false"}},
        "spec": {
            "containers": [{
                "name": "mxnet",
                "image": "registry.example.com/ml/mxnet-resnet:1.9.1-cu112",
                "command": ["python", "/workspace/train_imagenet.py"],
                "args": ["--network", "resnet", "--num-layers", "50", "--kv-store", "dist_sync",
                         "--batch-size", "256", "--data-train", "/data/imagenet/train.rec"],
                "env": [{"name": "PYTHONUNBUFFERED", "value": "1"}, {"name": "MXNET_CPU_WORKER_NTHREADS", "value": "4"}],
                "resources": {"requests": {"cpu": "4", "memory": "16Gi"}, "limits": {"cpu": "4", "memory": "16Gi"}},
                "volumeMounts": [{"name": "data", "mountPath": "/data", "readOnly": True}],
            }],
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "imagenet", "readOnly": True}}],
        },
    }
    specs = {rtype: {"replicas": count, "restartPolicy": "Never", "template": copy.deepcopy(template)}
             for rtype, count in replica_counts(replicas).items()}
    spec = {"jobMode": "MXTrain", "runPolicy": {"cleanPodPolicy": "Running", "backoffLimit": 3}, "mxReplicaSpecs": specs}
    metadata = {
        "name": JOB_NAME, "namespace": NAMESPACE, "uid": uid_of("mxjob", str(replicas)),
        "generation": 1, "resourceVersion": "48213977", "creationTimestamp": stamp(CREATED),
        "annotations": {"kubectl.kubernetes.io/last-applied-configuration": json.dumps(
            {"apiVersion": "kubeflow.org/v1", "kind": "MXJob",
             "metadata": {"name": JOB_NAME, "namespace": NAMESPACE}, "spec": spec}, separators=(",", ":"))},
    }
    metadata["managedFields"] = [managed("kubectl-client-side-apply", {"metadata": metadata, "spec": spec})]
    return {"apiVersion": "kubeflow.org/v1", "kind": "MXJob", "metadata": metadata, "spec": spec}


def fields_v1(value: Any) -> dict[str, Any]:
    """The managedFields fieldsV1 tree of an object (field names only, never values)."""
    if isinstance(value, dict):
        return {f"f:{key}": fields_v1(item) for key, item in value.items()}
    if isinstance(value, list) and value and all(isinstance(i, dict) and "name" in i for i in value):
        return {f'k:{{"name":"{i["name"]}"}}': {".": {}, **fields_v1(i)} for i in value}
    if isinstance(value, list) and value and all(isinstance(i, dict) and "containerPort" in i for i in value):
        return {f'k:{{"containerPort":{i["containerPort"]},"protocol":"TCP"}}': {".": {}, **fields_v1(i)}
                for i in value}
    return {}


def managed(manager: str, obj: dict[str, Any], subresource: str | None = None) -> dict[str, Any]:
    entry = {"manager": manager, "operation": "Update", "apiVersion": "v1", "time": stamp(CREATED),
             "fieldsType": "FieldsV1", "fieldsV1": fields_v1(obj)}
    if subresource:
        entry["subresource"] = subresource
    return entry


def owner(parent: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"apiVersion": "kubeflow.org/v1", "kind": "MXJob", "name": parent["metadata"]["name"],
             "uid": parent["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}]


def observed_pod(desired: dict[str, Any], parent: dict[str, Any], number: int) -> dict[str, Any]:
    """A desired Pod as the API server and kubelet make it: defaulted, scheduled, Running."""
    applied = copy.deepcopy(desired)
    applied["metadata"]["labels"]["controller-uid"] = parent["metadata"]["uid"]
    applied["metadata"]["ownerReferences"] = owner(parent)
    pod = copy.deepcopy(applied)
    meta = pod["metadata"]
    name = meta["name"]
    meta.update(uid=uid_of("pod", name), resourceVersion=str(48214000 + number), creationTimestamp=stamp(CREATED))
    meta.setdefault("annotations", {})[LAST_APPLIED] = json.dumps(applied, separators=(",", ":"))
    spec = pod["spec"]
    for container in spec["containers"]:
        container.update(imagePullPolicy="IfNotPresent", terminationMessagePath="/dev/termination-log",
                         terminationMessagePolicy="File")
        for port in container.get("ports", []):
            port.setdefault("protocol", "TCP")
        container.setdefault("volumeMounts", []).append(
            {"name": "kube-api-access-x7k2p", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
             "readOnly": True})
    spec["volumes"].append({"name": "kube-api-access-x7k2p", "projected": {"defaultMode": 420, "sources": [
        {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
        {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
        {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1",
                                                                      "fieldPath": "metadata.namespace"}}]}}]}})
    spec.update(
        dnsPolicy="ClusterFirst", enableServiceLinks=True, nodeName=f"gpu-node-{number % 400:03d}",
        preemptionPolicy="PreemptLowerPriority", priority=0, schedulerName="default-scheduler",
        securityContext={}, serviceAccount="default", serviceAccountName="default",
        terminationGracePeriodSeconds=30,
        tolerations=[{"key": f"node.kubernetes.io/{t}", "operator": "Exists", "effect": "NoExecute",
                      "tolerationSeconds": 300} for t in ("not-ready", "unreachable")],
    )
    started = stamp(CREATED + timedelta(seconds=20))
    ip = f"10.{number // 65536 % 256}.{number // 256 % 256}.{number % 256}"
    pod["status"] = {
        "phase": "Running", "qosClass": "Guaranteed", "startTime": stamp(CREATED + timedelta(seconds=2)),
        "hostIP": "192.168.7.21", "hostIPs": [{"ip": "192.168.7.21"}], "podIP": ip, "podIPs": [{"ip": ip}],
        "conditions": [{"type": t, "status": "True", "lastProbeTime": None, "lastTransitionTime": started}
                       for t in ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady",
                                 "PodScheduled")],
        "containerStatuses": [{
            "name": c["name"], "image": c["image"], "imageID": f"{c['image']}@sha256:{'3f' * 32}",
            "containerID": f"containerd://{uid_of('c', name).replace('-', '')}{'0' * 32}",
            "ready": True, "started": True, "restartCount": 0, "lastState": {},
            "state": {"running": {"startedAt": started}},
        } for c in spec["containers"]],
    }
    meta["managedFields"] = [managed("metacontroller", applied),
                             managed("kubelet", {"status": pod["status"]}, subresource="status")]
    return pod


def observed_service(desired: dict[str, Any], parent: dict[str, Any], number: int) -> dict[str, Any]:
    """A desired headless Service as the API server stores it."""
    applied = copy.deepcopy(desired)
    applied["metadata"]["labels"]["controller-uid"] = parent["metadata"]["uid"]
    applied["metadata"]["ownerReferences"] = owner(parent)
    service = copy.deepcopy(applied)
    meta = service["metadata"]
    meta.update(uid=uid_of("svc", meta["name"]), resourceVersion=str(48224000 + number),
                creationTimestamp=stamp(CREATED))
    meta.setdefault("annotations", {})[LAST_APPLIED] = json.dumps(applied, separators=(",", ":"))
    meta["managedFields"] = [managed("metacontroller", applied)]
    service["spec"].update(clusterIPs=["None"], internalTrafficPolicy="Cluster", ipFamilies=["IPv4"],
                           ipFamilyPolicy="SingleStack", sessionAffinity="None", type="ClusterIP")
    service["status"] = {"loadBalancer": {}}
    return service


def observed_config_map(desired: dict[str, Any], parent: dict[str, Any]) -> dict[str, Any]:
    """The job's cluster ConfigMap as the API server stores it."""
    applied = copy.deepcopy(desired)
    applied["metadata"]["labels"]["controller-uid"] = parent["metadata"]["uid"]
    applied["metadata"]["ownerReferences"] = owner(parent)
    config_map = copy.deepcopy(applied)
    meta = config_map["metadata"]
    meta.update(uid=uid_of("cm", meta["name"]), resourceVersion="48213990", creationTimestamp=stamp(CREATED))
    meta.setdefault("annotations", {})[LAST_APPLIED] = json.dumps(applied, separators=(",", ":"))
    meta["managedFields"] = [managed("metacontroller", applied)]
    return config_map


def sync_request(parent: dict[str, Any], pods: dict, services: dict, config_maps: dict) -> dict[str, Any]:
    return {
        "controller": {"apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": "CompositeController",
                       "metadata": {"name": "mxjob-controller", "uid": uid_of("cc")}},
        "parent": parent,
        "children": {"Pod.v1": pods, "Service.v1": services, "ConfigMap.v1": config_maps},
        "related": {},
        "finalizing": False,
    }


def steady_state_request(replicas: int, now: datetime) -> dict[str, Any]:
    """The sync request of a running job whose every pod is Running, built from the core's answers."""
    parent = mxjob(replicas)
    first = sync_mxjob(sync_request(parent, {}, {}, {}), now=now)
    pods, services, config_maps = {}, {}, {}
    for number, child in enumerate(first["children"]):
        name = child["metadata"]["name"]
        if child["kind"] == "Pod":
            pods[name] = observed_pod(child, parent, number)
        elif child["kind"] == "Service":
            services[name] = observed_service(child, parent, number)
        else:
            config_maps[name] = observed_config_map(child, parent)
    parent["status"] = first["status"]
    second = sync_mxjob(sync_request(parent, pods, services, config_maps), now=now)
    parent["status"] = second["status"]
    request = sync_request(parent, pods, services, config_maps)
    third = sync_mxjob(request, now=now)
    if len(pods) != replicas or len(third["children"]) != 2 * replicas + 1 or third["status"] != parent["status"]:
        raise SystemExit(f"{replicas} replicas: the request is not the steady state of a running job")
    return request


def median_seconds(run: Callable[[], Any], *, min_runs: int, budget: float, max_runs: int = 50) -> float:
    """Median wall time of `run`: at least min_runs, more while the time budget lasts."""
    times: list[float] = []
    spent = time.perf_counter()
    while len(times) < min_runs or (len(times) < max_runs and time.perf_counter() - spent < budget):
        gc.collect()
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def without_gc(run: Callable[[], Any]) -> Callable[[], Any]:
    """`run` with the cyclic collector off, as the server answers a sync."""
    def call() -> Any:
        gc.disable()
        try:
            return run()
        finally:
            gc.enable()
    return call


class Gunicorn:
    """The real server command on a loopback port, one worker, with no request-size limit."""

    def __init__(self) -> None:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = sock.getsockname()[1]
        env = {k: v for k, v in os.environ.items() if k not in {"PROMETHEUS_MULTIPROC_DIR", "PORT", "WEB_CONCURRENCY"}}
        self.proc = subprocess.Popen(
            [str(pathlib.Path(sys.executable).with_name("gunicorn")), "--config", "python:hooks.server.gunicorn_conf",
             "--bind", f"127.0.0.1:{self.port}", "--workers", "1", "--timeout", "600",
             "hooks.server.app:create_app({'MAX_CONTENT_LENGTH': None})"],
            cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + 30
        while True:
            try:
                if self.post(b"{}", path="/healthz", method="GET")[0] == 200:
                    return
            except OSError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    self.stop()
                    raise SystemExit("gunicorn did not start") from None
                time.sleep(0.1)

    def post(self, body: bytes, path: str = "/sync", method: str = "POST") -> tuple[int, bytes]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=600)
        try:
            conn.request(method, path, body=body if method == "POST" else None,
                         headers={"Content-Type": "application/json"})
            response = conn.getresponse()
            return response.status, response.read()
        finally:
            conn.close()

    def worker_peak_rss(self) -> int:
        """VmHWM of the one worker process, in bytes (its peak resident memory so far)."""
        children = pathlib.Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children").read_text().split()
        for line in pathlib.Path(f"/proc/{children[0]}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
        raise SystemExit("no VmHWM for the gunicorn worker")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)


def measure(replicas: int, *, budget: float, server: Gunicorn | None) -> dict[str, Any]:
    """Sizes, median times and the worker's peak memory for one job size."""
    now = CREATED + timedelta(hours=1)
    request = steady_state_request(replicas, now)
    body = json.dumps(request, separators=(",", ":")).encode()
    del request
    row: dict[str, Any] = {"replicas": replicas, "request_bytes": len(body)}
    min_runs = 3 if replicas >= 1000 else 10

    decoded = RequestDecoder(hooks.kinds.OBSERVED_FIELDS["MXJob"]).decode(body)
    row["pure_s"] = median_seconds(without_gc(lambda: sync_mxjob(decoded, now=now)), min_runs=min_runs, budget=budget)
    answer = sync_mxjob(decoded, now=now)

    client = create_app({"MAX_CONTENT_LENGTH": None}).test_client()
    response = client.post("/sync", data=body, content_type="application/json")
    if response.status_code != 200:
        raise SystemExit(f"{replicas} replicas: HTTP {response.status_code}: {response.data[:200]!r}")
    row["response_bytes"] = len(response.data)
    del response
    row["http_s"] = median_seconds(
        lambda: client.post("/sync", data=body, content_type="application/json").data,
        min_runs=min_runs, budget=budget)

    # The floor: the same request bytes decoded and the same answer encoded, nothing else. The
    # libraries are called as anyone would call them (the cyclic collector on); the orjson floor
    # is also given with the collector off, as the server runs a sync.
    row["stdlib_floor_s"] = median_seconds(
        lambda: (json.loads(body), json.dumps(answer, separators=(",", ":"))),
        min_runs=min_runs, budget=budget)
    row["orjson_floor_s"] = median_seconds(lambda: (orjson.loads(body), orjson.dumps(answer)),
                                           min_runs=min_runs, budget=budget)
    row["orjson_floor_nogc_s"] = median_seconds(without_gc(lambda: (orjson.loads(body), orjson.dumps(answer))),
                                                min_runs=min_runs, budget=budget)
    if server is not None:
        status, _ = server.post(body)
        if status != 200:
            raise SystemExit(f"{replicas} replicas: gunicorn answered {status}")
        row["gunicorn_s"] = median_seconds(lambda: server.post(body), min_runs=min_runs, budget=budget)
        row["worker_peak_rss"] = server.worker_peak_rss()
    return row


def table(rows: list[dict[str, Any]], with_gunicorn: bool) -> str:
    head = ["replicas", "request (MB)", "response (MB)", "pure core (ms)", "HTTP test client (ms)"]
    if with_gunicorn:
        head.append("HTTP gunicorn (ms)")
    head += ["floor stdlib json (ms)", "floor orjson (ms)", "floor orjson, GC off (ms)",
             "ratio pure / orjson floor", "ratio test client / orjson floor"]
    if with_gunicorn:
        head += ["ratio gunicorn / orjson floor", "ratio to floor with GC off", "worker peak RSS (MB)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---:" for _ in head) + "|"]
    for row in rows:
        cells = [f"{row['replicas']:,}", f"{row['request_bytes'] / 1e6:,.2f}", f"{row['response_bytes'] / 1e6:,.2f}",
                 f"{row['pure_s'] * 1000:,.1f}", f"{row['http_s'] * 1000:,.1f}"]
        if with_gunicorn:
            cells.append(f"{row['gunicorn_s'] * 1000:,.1f}")
        cells += [f"{row['stdlib_floor_s'] * 1000:,.1f}", f"{row['orjson_floor_s'] * 1000:,.1f}",
                  f"{row['orjson_floor_nogc_s'] * 1000:,.1f}", f"{row['pure_s'] / row['orjson_floor_s']:.2f}x",
                  f"{row['http_s'] / row['orjson_floor_s']:.2f}x"]
        if with_gunicorn:
            cells += [f"{row['gunicorn_s'] / row['orjson_floor_s']:.2f}x",
                      f"{row['gunicorn_s'] / row['orjson_floor_nogc_s']:.2f}x",
                      f"{row['worker_peak_rss'] / 1e6:,.0f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicas", type=int, nargs="+", default=None, help="job sizes to measure (ascending)")
    parser.add_argument("--big", action="store_true", help="also measure the largest admissible job (2,500 replicas)")
    parser.add_argument("--budget", type=float, default=3.0, help="seconds of repeats per measurement")
    parser.add_argument("--no-gunicorn", action="store_true", help="skip the real server (and the memory column)")
    args = parser.parse_args()
    sizes = args.replicas or list(SIZES) + (list(BIG_SIZES) if args.big else [])

    server = None if args.no_gunicorn else Gunicorn()
    rows = []
    try:
        for replicas in sorted(sizes):
            rows.append(measure(replicas, budget=args.budget, server=server))
            print(f"measured {replicas} replicas", file=sys.stderr, flush=True)
    finally:
        if server is not None:
            server.stop()

    print(f"{platform.python_implementation()} {platform.python_version()}, {os.cpu_count()} CPUs, "
          f"{datetime.now(UTC):%Y-%m-%d}; MB = 10^6 bytes; medians of repeated runs; worker peak RSS is the "
          f"worker's VmHWM after the syncs of that size and every smaller one.\n")
    print(table(rows, server is not None))
    too_large = [r["replicas"] for r in rows if r["request_bytes"] > DEFAULT_MAX_CONTENT_LENGTH]
    if too_large:
        print(f"\nRequests above the default MAX_CONTENT_LENGTH ({DEFAULT_MAX_CONTENT_LENGTH:,} bytes), "
              f"which the server would answer 413: replicas {', '.join(map(str, too_large))}.")


if __name__ == "__main__":
    main()
