"""`localcluster up` and `down`: a Kubernetes cluster on this machine that plain kubectl talks to.

`up` starts the real control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler),
the hooks server, one Metacontroller stand-in per shipped CompositeController (or, with
`--metacontroller PATH`, that Metacontroller binary; with `none`, nothing in that role), the
process kubelet with its Node (this machine's CPUs and memory, or `--cpus`, `--memory`, `--gpus`)
and the gang stand-in; installs the CRDs, the CompositeControllers with their hook URLs pointed at
the local hooks server, and Metacontroller's RBAC; writes a kubeconfig; then stays in the
foreground until Ctrl-C, SIGTERM or `localcluster down`. Every job kubectl creates runs as it
would in a cluster; pod logs go to `<state dir>/<namespace>/<job>/<pod>.log`.
"""

from __future__ import annotations

import argparse
import fcntl
import os
import signal
import time
from pathlib import Path
from typing import TextIO

from localcluster.cluster import LocalCluster
from localcluster.controlplane.kueue import Kueue
from localcluster.controlplane.kueue import version as kueue_version
from localcluster.controlplane.processes import ControlPlane
from localcluster.metacontroller.binary import install_controllers
from localcluster.node.registration import NODE_NAME
from localcluster.store import StoreError

UP_LOCK = "up.lock"
KUBECONFIG = "kubeconfig"
EXIT_OK, EXIT_CANNOT_START, EXIT_NOT_RUNNING = 0, 6, 1


def up(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    state_dir = Path(args.state_dir).resolve()
    state_dir.mkdir(parents=True, exist_ok=True)
    lock = (state_dir / UP_LOCK).open("a+")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock.seek(0)
        print(f"error: a cluster is already up from {state_dir} (pid {lock.read().strip() or '?'}); "
              "`localcluster down` stops it", file=err)
        return EXIT_CANNOT_START
    lock.seek(0)
    lock.truncate()
    lock.write(str(os.getpid()))
    lock.flush()
    stop = {"signum": 0}

    def on_signal(signum: int, _frame: object) -> None:
        stop["signum"] = signum

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        cluster = LocalCluster(state_dir, control_plane_dir=state_dir / "cluster",
                               hooks_log=state_dir / "hooks-server.log", gpus=args.gpus, cpus=args.cpus, memory=args.memory,
                               metacontroller=args.metacontroller,
                               kueue=getattr(args, "kueue", False))
    except ValueError as error:
        print(f"error: {error}", file=err)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        lock.close()
        return EXIT_CANNOT_START
    try:
        started = time.monotonic()
        try:
            cluster.start()
            assert cluster.control_plane is not None and cluster.hooks is not None
            if cluster.metacontroller_binary is None:  # a binary's cluster installed them before starting it
                install_controllers(cluster.control_plane, cluster.configs, cluster.hooks.url)
        except (RuntimeError, OSError, ValueError, StoreError) as error:
            print(f"error: the local cluster could not start: {error}", file=err)
            return EXIT_CANNOT_START
        kubeconfig = state_dir / KUBECONFIG
        kubeconfig.write_text(cluster.control_plane.kubeconfig.read_text())
        role = {"emulation": "Metacontroller: the project's emulation",
                "none": f"Metacontroller: none started; run yours against this kubeconfig (its hooks are at {cluster.hooks.url})",
                }.get(args.metacontroller, f"Metacontroller: {args.metacontroller}, as ServiceAccount metacontroller/metacontroller "
                                           f"(log {cluster.metacontroller_binary.log if cluster.metacontroller_binary else '?'})")
        print(f"local cluster up in {time.monotonic() - started:.1f} s: Kubernetes {_server_version(cluster.control_plane)}, "
              f"API server {cluster.control_plane.server}", file=out)
        print(role, file=out)
        print(f"hooks server: {cluster.hooks.url} (log {cluster.hooks.log_path})", file=out)
        size = cluster.node_size
        print(f"node {NODE_NAME}: cpu {size.cpu}, memory {size.memory}" + (f", nvidia.com/gpu {size.gpus}" if size.gpus else "")
              + " (kube-scheduler fits pods' requests into it)", file=out)
        print(f"pods run here as processes; their logs: {state_dir}/<namespace>/<job>/<pod>.log "
              "(localcluster logs <job> <pod>)", file=out)
        print(f"kubectl: {cluster.control_plane.binaries / 'kubectl'} (any kubectl works)", file=out)
        if cluster.kueue is not None:
            print(kueue_notice(cluster.kueue), file=out)
        print(f"\nexport KUBECONFIG={kubeconfig}\n", file=out)
        print("Ctrl-C or `localcluster down` stops everything.", file=out, flush=True)
        while not stop["signum"]:
            time.sleep(0.2)
        print(f"{signal.Signals(stop['signum']).name}: stopping every process…", file=err, flush=True)
        return EXIT_OK
    finally:
        cluster.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        lock.close()


def kueue_notice(kueue: Kueue) -> str:
    """What `up --kueue` says about Kueue: where it runs, and how to give it a quota to queue against."""
    return (f"Kueue {kueue_version()} (started in {kueue.startup_seconds:.1f} s): webhooks at "
            f"https://127.0.0.1:{kueue.webhook_port} (log {kueue.log}); it queues pods "
            "labelled kueue.x-k8s.io/queue-name in every namespace but kube-system and kueue-system.\n"
            "  Nothing is admitted until there is a quota: a ResourceFlavor, a ClusterQueue and a LocalQueue, e.g.\n"
            "    kubectl apply -f examples/kueue/queues.yaml        (1 CPU, 2Gi; LocalQueue user-queue in default)\n"
            "    kubectl create -f examples/kueue/plain-pods.yaml   (two pods that do not fit together)\n"
            "    kubectl get pods,workloads,clusterqueues           (docs/localcluster.md, 'Kueue')")


def _server_version(cp: ControlPlane) -> str:
    try:
        return str(cp.get("/version").get("gitVersion", "?"))
    except OSError:
        return "?"


def down(args: argparse.Namespace, out: TextIO, err: TextIO, *, timeout: float = 60.0) -> int:
    """Stop the cluster `up` runs from this state dir (SIGTERM to it, then wait until it has stopped)."""
    path = Path(args.state_dir).resolve() / UP_LOCK
    if not path.exists():
        print(f"no cluster is up from {path.parent}", file=err)
        return EXIT_NOT_RUNNING
    with path.open("a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            pid = int(handle.read().strip() or 0)
        else:
            print(f"no cluster is up from {path.parent}", file=err)
            return EXIT_NOT_RUNNING
    if pid <= 0:
        print(f"error: {path} names no process", file=err)
        return EXIT_NOT_RUNNING
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    with path.open("a+") as handle:
        while time.monotonic() < deadline:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                print(f"stopped the cluster of {path.parent} (pid {pid})", file=out)
                return EXIT_OK
            except BlockingIOError:
                time.sleep(0.2)
    print(f"error: pid {pid} still holds {path} after {timeout:g} s", file=err)
    return EXIT_CANNOT_START
