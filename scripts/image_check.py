"""`make image-check`: both images built from their Dockerfiles unchanged, and the hooks image run the way
metacontroller/hooks/deployment.yaml runs it.

No container registry is reachable where this runs, so the official base image is replaced by a stand-in of
the same name: Debian bookworm from debootstrap with Debian's Python 3.11.2 in a venv at /usr/local (so
`python` and `pip` are on PATH and install into /usr/local/lib/python3.11/site-packages, as in the official
image). Images are built by buildah (overlay storage, vfs where overlay does not mount; chroot isolation)
and run by podman with runc, all from Debian's packages, with storage under .image-check/ (docs/images.md says why each choice).

Checked, each failure naming what broke: the installed Python packages equal constraints.txt's pins; the
hooks image holds only its requirements, constraints and the tracked hooks package (no build-time CA
bundle); running as the Deployment says (uid/gid, read-only root, every capability dropped, no privilege
escalation, the memory and CPU limits, the env, an emptyDir at /tmp), the probes answer within their
timeouts, /metrics sums every worker, a sync on every route equals the in-process answer for the same body,
nothing outside /tmp is written, and SIGTERM exits 0 within the grace period; the digits image trains.
Last, deliberate breaks (a .dockerignore that drops hooks/, a metrics directory outside /tmp, no /tmp
volume) must each make the check fail, so it is shown to be able to.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import http.client
import json
import os
import re
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

WORK = ROOT / ".image-check"
DEPLOYMENT = ROOT / "metacontroller" / "hooks" / "deployment.yaml"
BASE_IMAGE = "docker.io/library/python:3.11.13-slim-bookworm"  # what both Dockerfiles name, fully qualified
HOOKS_IMAGE = "localhost/mxjob-hooks:image-check"
DIGITS_IMAGE = "localhost/digits-example:image-check"
TOOLS = {"buildah": "buildah", "podman": "podman", "debootstrap": "debootstrap", "runc": "runc"}
# The Debian packages of the tools; netavark, aardvark-dns and iptables give podman its bridge network
# (Recommends that --no-install-recommends would leave out).
PACKAGES = ["buildah", "podman", "debootstrap", "runc", "netavark", "aardvark-dns", "iptables"]
DEBIAN_MIRROR = "http://deb.debian.org/debian"
# Only what the stand-in needs: Python with venv (pip comes from Debian's wheel) and the CA store the
# official image has too.
BASE_PACKAGES = ["python3-venv", "ca-certificates"]
BASE_CONFIG = [
    "ENV PATH=/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin",
    "ENV LANG=C.UTF-8",
    'CMD ["python3"]',
]
# The host's CA bundle, mounted over the image's own for the build only: PyPI may be reached through a
# proxy that the host trusts and the image does not. A mount is never part of a layer.
HOST_CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
HOST_EXTRA_CAS = Path("/usr/local/share/ca-certificates")
# Written by podman itself for every container (its mount points), not by the server.
RUNTIME_WRITES = {"/etc", "/etc/hosts", "/etc/hostname", "/etc/resolv.conf", "/run", "/run/.containerenv", "/tmp"}
# Bodies for the in-process comparison: one golden request per kind (their "now" is the golden clock only).
SYNC_BODIES = {"MXJob": "tests/golden/first-sync-dist-cpu/request.yaml",
               "ChainerJob": "tests/golden/chainerjob-master-running/request.yaml"}
# pip's own tools come with the base image (the official one has them too), not from a requirements file.
BASE_PYTHON_PACKAGES = {"pip", "setuptools", "wheel"}


class CheckFailed(Exception):
    """A check found the image, its build or its run wrong; the message says what and where."""


@dataclass
class Report:
    """What the check measured, printed at the end (docs/images.md quotes a run)."""

    seconds: dict[str, float] = field(default_factory=dict)
    sizes: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    @contextlib.contextmanager
    def timed(self, step: str) -> Iterator[None]:
        started = time.monotonic()
        print(f"== {step}", flush=True)
        try:
            yield
        finally:
            self.seconds[step] = time.monotonic() - started

    def text(self) -> str:
        lines = ["image-check measured:"]
        lines += [f"  {step:<44} {secs:7.1f} s" for step, secs in self.seconds.items()]
        lines += [f"  size of {name:<36} {size / 1e6:7.0f} MB" for name, size in self.sizes.items()]
        lines += [f"  {note}" for note in self.notes]
        return "\n".join(lines)


# --- pure rules (tested in tests/install/test_image_check.py) -----------------------------------------------

def quantity_bytes(quantity: str) -> int:
    """A Kubernetes memory quantity (1Gi, 512Mi, 64M, 1000) in bytes."""
    match = re.fullmatch(r"(\d+)(Ki|Mi|Gi|Ti|k|M|G|T)?", quantity)
    if not match:
        raise CheckFailed(f"cannot read the memory quantity {quantity!r}")
    units = {None: 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12,
             "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}
    return int(match.group(1)) * units[match.group(2)]


def cpu_cores(quantity: str) -> str:
    """A Kubernetes CPU quantity ("1", "500m") as podman's --cpus."""
    return str(int(quantity[:-1]) / 1000) if quantity.endswith("m") else quantity


def hooks_container(deployment: dict) -> tuple[dict, dict]:
    """(pod spec, the one container) of the hooks Deployment."""
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    return pod, container


def security_args(pod_sc: dict, sc: dict) -> list[str]:
    """podman run flags for the container's securityContext (the pod's where the container says nothing)."""
    uid = sc.get("runAsUser", pod_sc.get("runAsUser"))
    gid = sc.get("runAsGroup", pod_sc.get("runAsGroup"))
    args = []
    if uid is not None:
        args += ["--user", f"{uid}:{gid}" if gid is not None else str(uid)]
    if sc.get("readOnlyRootFilesystem"):
        # podman would otherwise add tmpfs mounts of its own on /tmp, /var/tmp and /run.
        args += ["--read-only", "--read-only-tmpfs=false"]
    for cap in sc.get("capabilities", {}).get("drop", []):
        args += ["--cap-drop", cap]
    for cap in sc.get("capabilities", {}).get("add", []):
        args += ["--cap-add", cap]
    if sc.get("allowPrivilegeEscalation") is False:
        args += ["--security-opt", "no-new-privileges"]
    seccomp = sc.get("seccompProfile", pod_sc.get("seccompProfile", {})).get("type")
    if seccomp not in (None, "RuntimeDefault"):
        raise CheckFailed(f"seccompProfile {seccomp} is not reproduced here (podman applies its RuntimeDefault)")
    return args


def run_args(deployment: dict, *, volumes: dict[str, Path], port: int) -> list[str]:
    """podman run flags for the hooks container exactly as the Deployment describes it.

    `volumes` maps each emptyDir volume name to the host directory standing in for it. Whatever the
    Deployment says that this cannot reproduce is an error, not silently dropped.
    """
    pod, container = hooks_container(deployment)
    args = security_args(pod.get("securityContext", {}), container.get("securityContext", {}))
    limits = container.get("resources", {}).get("limits", {})
    if "memory" in limits:
        args += ["--memory", str(quantity_bytes(str(limits["memory"])))]
    if "cpu" in limits:
        args += ["--cpus", cpu_cores(str(limits["cpu"]))]
    for var in container.get("env", []):
        if "value" not in var:
            raise CheckFailed(f"env {var['name']}: only literal values are reproduced here")
        args += ["--env", f"{var['name']}={var['value']}"]
    declared = {volume["name"]: volume for volume in pod.get("volumes", [])}
    for mount in container.get("volumeMounts", []):
        volume = declared.get(mount["name"])
        if volume is None or "emptyDir" not in volume:
            raise CheckFailed(f"volumeMount {mount['name']}: only emptyDir volumes are reproduced here")
        mode = "ro" if mount.get("readOnly") else "rw"
        args += ["--volume", f"{volumes[mount['name']]}:{mount['mountPath']}:{mode}"]
    (http_port,) = [p["containerPort"] for p in container["ports"] if p.get("name") == "http"]
    args += ["--publish", f"127.0.0.1:{port}:{http_port}"]
    args += ["--stop-timeout", str(pod.get("terminationGracePeriodSeconds", 30))]
    return args


def empty_dir_limits(deployment: dict) -> dict[str, int | None]:
    """Each emptyDir volume's sizeLimit in bytes (None: no limit)."""
    pod, _ = hooks_container(deployment)
    return {v["name"]: quantity_bytes(str(v["emptyDir"]["sizeLimit"])) if v["emptyDir"].get("sizeLimit") else None
            for v in pod.get("volumes", []) if "emptyDir" in v}


def read_pins(text: str) -> dict[str, str]:
    """name (normalized) -> version of every `name==version` line of a requirements or constraints file."""
    pins = {}
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if "==" in line:
            name, version = line.split("==", 1)
            pins[normalize(name)] = version.strip()
    return pins


def normalize(name: str) -> str:
    """A distribution name as pip compares it (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def version_drift(installed: dict[str, str], constraints: dict[str, str], requirements: dict[str, str]) -> list[str]:
    """Why the installed packages differ from the pins (empty when they match)."""
    problems = []
    for name, version in sorted(installed.items()):
        if name in BASE_PYTHON_PACKAGES:
            continue
        if name not in constraints:
            problems.append(f"{name} {version} is installed but not pinned in constraints.txt")
        elif constraints[name] != version:
            problems.append(f"{name} {version} is installed, constraints.txt pins {constraints[name]}")
    problems += [f"{name} (required, pinned {version}) is not installed"
                 for name, version in sorted(requirements.items()) if name not in installed]
    return problems


def unexpected_writes(diff_lines: list[str]) -> list[str]:
    """Paths of `podman diff` that neither podman's own mount points nor /tmp explain."""
    paths = [line.split(None, 1)[1] for line in diff_lines if line.strip()]
    return [path for path in paths if path not in RUNTIME_WRITES and not path.startswith("/tmp/")]


# --- the shell: tools, engine, builds ---------------------------------------------------------------

def run(cmd: list[str], *, env: dict[str, str] | None = None, check: bool = True, timeout: float = 1800,
        log: Path | None = None, quiet: bool = False) -> subprocess.CompletedProcess[str]:
    if not quiet:
        print("$ " + " ".join(cmd), flush=True)
    result = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    if log is not None:
        log.write_text(result.stdout + result.stderr)
    if check and result.returncode != 0:
        lines = (result.stdout + result.stderr).strip().splitlines()
        reason = next((line for line in reversed(lines) if line.startswith("Error")), "")
        raise CheckFailed(f"`{' '.join(cmd[:3])} ...` exited {result.returncode}: {reason}\n" + "\n".join(lines[-15:]))
    return result


def install_tools() -> None:
    missing = [tool for tool in TOOLS.values() if shutil.which(tool) is None]
    if not missing:
        return
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise CheckFailed(f"missing {', '.join(missing)}, and only root with apt-get can install them here "
                          f"(apt-get install {' '.join(PACKAGES)}); or run `make test IMAGE_CHECK=skip`")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    run(["apt-get", "update", "-qq"], env=env)
    run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", *PACKAGES], env=env)


def hard_limit(which: int, *, cap: int = 65536) -> int:
    """This process's hard limit (at most `cap`): what a container can be given here."""
    hard = resource.getrlimit(which)[1]
    return cap if hard == resource.RLIM_INFINITY else min(hard, cap)


def overlay_mounts() -> bool:
    """Whether the kernel mounts an overlay filesystem here (a sandbox may forbid it)."""
    probe = Path(tempfile.mkdtemp(prefix="overlay-probe-", dir=WORK))
    try:
        lower, upper, work, merged = (probe / name for name in ("lower", "upper", "work", "merged"))
        for folder in (lower, upper, work, merged):
            folder.mkdir()
        options = f"lowerdir={lower},upperdir={upper},workdir={work}"
        mounted = subprocess.run(["mount", "-t", "overlay", "overlay", "-o", options, str(merged)],
                                 capture_output=True).returncode == 0
        if mounted:
            subprocess.run(["umount", str(merged)], check=True)
        return mounted
    finally:
        shutil.rmtree(probe, ignore_errors=True)


def storage_driver() -> str:
    """overlay where it mounts: a layer holds only its own changes. vfs copies every layer whole (the digits
    build alone then wrote about 4 GB and filled a CI machine's disk), so it is the fallback only."""
    return "overlay" if overlay_mounts() else "vfs"


def required_free_bytes(driver: str) -> int:
    """Free disk the whole check needs under WORK with this driver (measured peaks, docs/images.md, plus room)."""
    return (3 if driver == "overlay" else 8) * 1024**3


def check_free_disk(driver: str) -> None:
    free, need = shutil.disk_usage(WORK).free, required_free_bytes(driver)
    if free < need:
        raise CheckFailed(f"{free / 1024**3:.1f} GiB free on the disk of {WORK}, and the check needs about "
                          f"{need / 1024**3:.0f} GiB with {driver} storage: free some disk (`make clean` in old "
                          "checkouts), or run `make test IMAGE_CHECK=skip`")


def engine_env(driver: str) -> dict[str, str]:
    """Environment for buildah and podman: storage and settings of this check's own, under WORK.
    Each driver has its own graph root, since a store cannot change driver once made. The run root (which
    layers are mounted, and how often) is begun afresh: the mounts of an earlier run ended with its namespace."""
    shutil.rmtree(WORK / f"run-{driver}", ignore_errors=True)
    storage, config = WORK / "storage.conf", WORK / "containers.conf"
    storage.write_text(f'[storage]\ndriver = "{driver}"\nrunroot = "{WORK}/run-{driver}"\n'
                       f'graphroot = "{WORK}/storage-{driver}"\n')
    # The sandbox's hard limits are below podman's default ulimits (which it would then fail to set);
    # crun refuses a hybrid cgroup setup, runc does not.
    # The process limit is low on purpose: buildah's chroot isolation could not raise it to 65536 under a
    # hard limit of 32768 here, and gunicorn runs a handful of processes.
    nofile, nproc = hard_limit(resource.RLIMIT_NOFILE), hard_limit(resource.RLIMIT_NPROC, cap=4096)
    config.write_text(
        "[containers]\n"
        f'default_ulimits = ["nofile={nofile}:{nofile}", "nproc={nproc}:{nproc}"]\n'
        "[engine]\n"
        'runtime = "runc"\ncgroup_manager = "cgroupfs"\nevents_logger = "file"\n'
    )
    return {**os.environ, "CONTAINERS_STORAGE_CONF": str(storage), "CONTAINERS_CONF": str(config)}


def image_exists(env: dict[str, str], image: str) -> bool:
    return run(["podman", "image", "exists", image], env=env, check=False, quiet=True).returncode == 0


def build_stand_in_base(env: dict[str, str]) -> None:
    """The stand-in for python:3.11.13-slim-bookworm, from Debian's packages (reused while its recipe holds)."""
    stamp = WORK / "base.recipe"
    recipe = json.dumps([DEBIAN_MIRROR, BASE_PACKAGES, BASE_CONFIG])
    if image_exists(env, BASE_IMAGE) and stamp.exists() and stamp.read_text() == recipe:
        print(f"reusing the stand-in {BASE_IMAGE} (recipe unchanged; `make clean` removes it)")
        return
    rootfs = WORK / "rootfs"
    shutil.rmtree(rootfs, ignore_errors=True)
    run(["nice", "-n", "10", "debootstrap", "--variant=minbase", f"--include={','.join(BASE_PACKAGES)}",
         "bookworm", str(rootfs), DEBIAN_MIRROR], log=WORK / "debootstrap.log")
    run(["chroot", str(rootfs), "python3", "-m", "venv", "/usr/local"])
    for cache in ("var/cache/apt/archives", "var/lib/apt/lists"):
        for path in (rootfs / cache).glob("*"):
            if path.is_file():
                path.unlink()
    changes = [arg for line in BASE_CONFIG for arg in ("--change", line)]
    tar = subprocess.Popen(["tar", "-C", str(rootfs), "-cf", "-", "."], stdout=subprocess.PIPE)
    imported = subprocess.run(["podman", "import", *changes, "-", BASE_IMAGE], stdin=tar.stdout, env=env,
                              capture_output=True, text=True)
    tar.wait()
    if imported.returncode != 0 or tar.returncode != 0:
        raise CheckFailed(f"importing the stand-in base failed: {imported.stderr}")
    shutil.rmtree(rootfs)
    stamp.write_text(recipe)


def build(env: dict[str, str], *, dockerfile: str, tag: str, context: Path = ROOT) -> None:
    """buildah build of a Dockerfile, unchanged, from the repository root (so .dockerignore applies)."""
    volume = [f"--volume={HOST_CA_BUNDLE}:/etc/ssl/certs/ca-certificates.crt:ro"] if HOST_CA_BUNDLE.exists() else []
    run(["nice", "-n", "10", "buildah", "build", "--isolation", "chroot", "--pull=never", "--layers", *volume,
         "-f", str(context / dockerfile), "-t", tag, str(context)], env=env,
        log=WORK / f"build-{tag.split('/')[-1].replace(':', '-')}.log")


@contextlib.contextmanager
def mounted(env: dict[str, str], image: str) -> Iterator[Path]:
    """The image's root filesystem, read from the host (no container, which vfs would make a whole copy for)."""
    path = Path(run(["podman", "image", "mount", image], env=env, quiet=True).stdout.strip())
    try:
        yield path
    finally:
        run(["podman", "image", "unmount", image], env=env, check=False, quiet=True)


def installed_packages(rootfs: Path) -> dict[str, str]:
    """name -> version of every distribution in the image's site-packages (what `pip list` shows)."""
    found = {}
    for metadata in rootfs.glob("usr/local/lib/python3.11/site-packages/*.dist-info/METADATA"):
        headers = dict(re.findall(r"^(Name|Version): (.+)$", metadata.read_text(errors="replace").split("\n\n", 1)[0], re.M))
        found[normalize(headers["Name"])] = headers["Version"].strip()
    return found


def check_versions(env: dict[str, str], image: str, requirements: str) -> None:
    with mounted(env, image) as rootfs:
        installed = installed_packages(rootfs)
    if not installed:
        raise CheckFailed(f"{image}: no Python package found in /usr/local/lib/python3.11/site-packages")
    problems = version_drift(installed, read_pins((ROOT / "constraints.txt").read_text()),
                             read_pins((ROOT / requirements).read_text()))
    if problems:
        raise CheckFailed(f"{image}: the installed packages drift from the pins:\n  " + "\n  ".join(problems))


def passwd_problem(passwd: str, user: str) -> str | None:
    """Why an image's USER ("uid" or "uid:gid") has no usable /etc/passwd entry; None when it has one."""
    uid = user.split(":", 1)[0]
    if not uid.isdigit():
        return f"USER {user!r} is not numeric (the kubelet checks runAsNonRoot by number)"
    if not any(line.split(":")[2:3] == [uid] for line in passwd.splitlines() if line and not line.startswith("#")):
        return f"uid {uid} has no /etc/passwd entry (tools that look the user up, such as pip, warn or fail)"
    return None


def check_user_entry(env: dict[str, str], image: str) -> None:
    user = run(["podman", "image", "inspect", "--format", "{{.Config.User}}", image], env=env, quiet=True).stdout.strip()
    with mounted(env, image) as rootfs:
        problem = passwd_problem((rootfs / "etc" / "passwd").read_text(), user)
    if problem:
        raise CheckFailed(f"{image}: {problem}")


def pem_blocks(text: str) -> set[str]:
    return set(re.findall(r"-----BEGIN CERTIFICATE-----.*?-----END CERTIFICATE-----", text, re.S))


def check_hooks_contents(env: dict[str, str]) -> None:
    """/app holds the requirements, the constraints and the tracked hooks package (with bytecode), nothing else."""
    tracked = subprocess.run(["git", "ls-files", "hooks"], cwd=ROOT, capture_output=True, text=True, check=True)
    expected = {f"/app/{path}" for path in tracked.stdout.split()} | {"/app/requirements.txt", "/app/constraints.txt"}
    extra_cas = set().union(*(pem_blocks(p.read_text()) for p in HOST_EXTRA_CAS.glob("*.crt"))) if HOST_EXTRA_CAS.is_dir() else set()
    with mounted(env, HOOKS_IMAGE) as rootfs:
        files = {"/" + str(path.relative_to(rootfs)) for path in (rootfs / "app").rglob("*") if path.is_file()}
        leftovers = [name for name in ("root/.cache/pip", "etc/pip.conf") if (rootfs / name).exists()]
        baked = extra_cas & pem_blocks((rootfs / "etc/ssl/certs/ca-certificates.crt").read_text())
    bytecode = {path for path in files if re.search(r"/__pycache__/[^/]+\.cpython-311\.pyc$", path)}
    if files - bytecode != expected:
        raise CheckFailed(f"{HOOKS_IMAGE}: /app should hold only {len(expected)} files; extra "
                          f"{sorted(files - bytecode - expected)}, missing {sorted(expected - files)}")
    if not bytecode:
        raise CheckFailed(f"{HOOKS_IMAGE}: hooks/ was not compiled (the running container cannot write bytecode)")
    if leftovers:
        raise CheckFailed(f"{HOOKS_IMAGE}: build leftovers in the image: {leftovers}")
    if baked:
        raise CheckFailed(f"{HOOKS_IMAGE}: the build host's own CA certificates were baked into the image")
    user = run(["podman", "image", "inspect", "--format", "{{.Config.User}}", HOOKS_IMAGE], env=env, quiet=True).stdout.strip()
    pod, container = hooks_container(yaml.safe_load(DEPLOYMENT.read_text()))
    deployed = f"{pod['securityContext']['runAsUser']}:{pod['securityContext']['runAsGroup']}"
    if user != deployed:
        raise CheckFailed(f"{HOOKS_IMAGE}: USER is {user!r}, the Deployment runs {container['name']} as {deployed}")


# --- the hooks image, run as the Deployment runs it -------------------------------------------------

def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def request(port: int, method: str, path: str, *, timeout: float, body: bytes | None = None) -> tuple[int, bytes, str]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        connection.request(method, path, body=body, headers={"Content-Type": "application/json"} if body else {})
        response = connection.getresponse()
        return response.status, response.read(), response.getheader("Content-Type", "")
    finally:
        connection.close()


def in_process_answer(route: str, body: dict) -> Any:
    """The same sync answered by the repository's code, in this process (Flask's test client)."""
    from hooks.server.app import create_app

    response = create_app().test_client().post(route, json=body)
    if response.status_code != 200:
        raise CheckFailed(f"in-process {route} answered {response.status_code}: {response.get_data(as_text=True)[:300]}")
    return response.get_json()


def sync_bodies() -> dict[str, dict]:
    bodies = {}
    for kind, path in SYNC_BODIES.items():
        body = yaml.safe_load((ROOT / path).read_text())
        body.pop("now", None)
        bodies[kind] = body
    return bodies


def container_processes(pid: int) -> list[int]:
    """The container's PID 1 (on the host) and all its descendants."""
    found, queue = [], [pid]
    while queue:
        current = queue.pop()
        found.append(current)
        for task in Path(f"/proc/{current}/task").glob("*"):
            with contextlib.suppress(OSError):
                queue += [int(child) for child in (task / "children").read_text().split()]
    return found


def proc_status(pid: int) -> dict[str, str]:
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    return {key: value.strip() for key, _, value in (line.partition(":") for line in lines)}


def ok_syncs(metrics: bytes) -> float | None:
    """The successful syncs a /metrics page counts, over every kind; None when it has no such series."""
    counts = re.findall(rb'^job_hooks_syncs_total\{kind="[^"]*",outcome="ok"\} (\S+)$', metrics, re.M)
    return sum(float(c) for c in counts) if counts else None


def check_running_hooks(env: dict[str, str], deployment: dict, report: Report | None = None, *, name: str) -> None:  # noqa: C901 (24)
    """Run the hooks image as `deployment` says and check what it answers; remove the container after."""
    import hooks.kinds

    pod, container = hooks_container(deployment)
    scratch = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=WORK))
    volumes = {}
    for volume in empty_dir_limits(deployment):
        volumes[volume] = scratch / volume
        volumes[volume].mkdir()
        volumes[volume].chmod(0o777)  # as the kubelet makes an emptyDir
    port = free_port()
    run(["podman", "rm", "--force", "--ignore", name], env=env, quiet=True)
    run(["podman", "run", "--detach", "--pull=never", "--name", name, *run_args(deployment, volumes=volumes, port=port),
         HOOKS_IMAGE], env=env)
    try:
        started = time.monotonic()
        liveness, readiness = container["livenessProbe"], container["readinessProbe"]
        # Liveness has no initialDelaySeconds: the kubelet restarts a server that has not answered by
        # periodSeconds * failureThreshold.
        deadline = started + liveness.get("periodSeconds", 10) * liveness.get("failureThreshold", 3)
        while True:
            state = run(["podman", "inspect", "--format", "{{.State.Status}}", name], env=env, quiet=True).stdout.strip()
            if state != "running":
                logs = run(["podman", "logs", name], env=env, check=False, quiet=True)
                lines = (logs.stdout + logs.stderr).strip().splitlines()
                last = next((line for line in reversed(lines) if "Error" in line), lines[-1] if lines else "no log")
                raise CheckFailed(f"the hooks container is {state}, not running ({last[-300:]}); its log:\n" + "\n".join(lines[-30:]))
            with contextlib.suppress(OSError):
                if request(port, "GET", liveness["httpGet"]["path"], timeout=1)[0] == 200:
                    break
            if time.monotonic() > deadline:
                raise CheckFailed("the hooks server did not answer its liveness probe before the kubelet would restart it")
            time.sleep(0.2)
        if report is not None:
            report.seconds["hooks container: start to first answer"] = time.monotonic() - started
        for probe in (liveness, readiness):
            t0 = time.monotonic()
            status, _, _ = request(port, "GET", probe["httpGet"]["path"], timeout=probe.get("timeoutSeconds", 1))
            if status != 200 or time.monotonic() - t0 > probe.get("timeoutSeconds", 1):
                raise CheckFailed(f"{probe['httpGet']['path']} answered {status} in {time.monotonic() - t0:.2f} s")

        # The container's processes, seen from the host: the Deployment's user, no capabilities.
        pid = int(run(["podman", "inspect", "--format", "{{.State.Pid}}", name], env=env, quiet=True).stdout)
        pids = container_processes(pid)
        want_uid = str(container.get("securityContext", {}).get("runAsUser", pod["securityContext"]["runAsUser"]))
        for each in pids:
            status_of = proc_status(each)
            if status_of["Uid"].split()[0] != want_uid or int(status_of["CapEff"], 16) or status_of["NoNewPrivs"] != "1":
                raise CheckFailed(f"process {each} runs as uid {status_of['Uid']}, CapEff {status_of['CapEff']}, "
                                  f"NoNewPrivs {status_of['NoNewPrivs']}")
        if len(pids) < 2:
            raise CheckFailed(f"expected gunicorn's master and workers, found {len(pids)} process(es)")

        bodies, sent = sync_bodies(), 0
        for kind in hooks.kinds.KINDS:
            for route in kind.routes:
                raw = json.dumps(bodies[kind.name]).encode()
                before = in_process_answer(route, bodies[kind.name])
                status, answer, _ = request(port, "POST", route, body=raw, timeout=10)
                after = in_process_answer(route, bodies[kind.name])
                if status != 200:
                    raise CheckFailed(f"POST {route} answered {status}: {answer[:300]!r}")
                if json.loads(answer) not in (before, after):  # `now` may tick between them
                    raise CheckFailed(f"POST {route}: the image answers differently from the repository's code")
                sent += 1
        status, metrics, content_type = request(port, "GET", "/metrics", timeout=5)
        if status != 200 or not content_type.startswith("text/plain") or ok_syncs(metrics) is None:
            raise CheckFailed(f"/metrics answered {status} {content_type}: {metrics[:300]!r}")
        # Several scrapes, since any worker may answer: each sums every worker's syncs.
        for _ in range(4):
            _, metrics, _ = request(port, "GET", "/metrics", timeout=5)
            total = ok_syncs(metrics)
            if total != sent:
                raise CheckFailed(f"/metrics counts {total!r} syncs, {sent} were sent")

        diff = run(["podman", "diff", name], env=env, quiet=True).stdout.splitlines()
        if unexpected_writes(diff):
            raise CheckFailed(f"writes outside /tmp: {unexpected_writes(diff)}")
        for volume, limit in empty_dir_limits(deployment).items():
            used = sum(p.stat().st_size for p in volumes[volume].rglob("*") if p.is_file())
            if limit is not None and used > limit:
                raise CheckFailed(f"emptyDir {volume} holds {used} bytes, over its sizeLimit {limit}")

        grace = pod.get("terminationGracePeriodSeconds", 30)
        t0 = time.monotonic()
        run(["podman", "kill", "--signal", "TERM", name], env=env, quiet=True)
        code = run(["podman", "wait", name], env=env, quiet=True, timeout=grace + 10).stdout.strip()
        stopped = time.monotonic() - t0
        if report is not None:
            report.seconds["hooks container: SIGTERM to exit"] = stopped
        if code != "0" or stopped > grace:
            raise CheckFailed(f"on SIGTERM the server exited {code} after {stopped:.1f} s (grace period {grace} s)")
    finally:
        run(["podman", "rm", "--force", "--ignore", name], env=env, check=False, quiet=True)
        shutil.rmtree(scratch, ignore_errors=True)


def train_digits(env: dict[str, str]) -> str:
    """One short local training in the digits image, as its ENTRYPOINT runs it."""
    result = run(["podman", "run", "--rm", "--pull=never", "--network=none", DIGITS_IMAGE, "--kv-store", "local",
                  # Not bit-reproducible (threaded float sums): 3 epochs gave 0.94 once and 0.897
                  # another time. 5 epochs and 0.85 prove it learns (chance is 0.1) without flaking.
                  "--epochs", "5", "--min-accuracy", "0.85"], env=env, timeout=600)
    finals = [line.strip() for line in result.stdout.splitlines() if "final validation-accuracy" in line]
    if len(finals) != 1:
        raise CheckFailed(f"the digits training exited 0 but printed no final accuracy:\n{result.stdout[-1000:]}")
    return finals[0]


# --- deliberate breaks: the check must fail on each -------------------------------------------------

def must_fail(what: str, attempt: Any) -> str:
    try:
        attempt()
    except CheckFailed as failure:
        first = str(failure).splitlines()[0]
        print(f"   as it should, the check failed: {first}")
        return first
    raise CheckFailed(f"deliberate break not caught: {what}")


def self_test(env: dict[str, str], deployment: dict) -> None:
    unwritable = copy.deepcopy(deployment)
    _, container = hooks_container(unwritable)
    for var in container["env"]:
        if var["name"] == "PROMETHEUS_MULTIPROC_DIR":
            var["value"] = "/var/lib/prometheus"  # on the read-only root
    must_fail("metrics directory outside /tmp",
              lambda: check_running_hooks(env, unwritable, name="image-check-break-metrics"))

    no_tmp = copy.deepcopy(deployment)
    pod, container = hooks_container(no_tmp)
    container["volumeMounts"], pod["volumes"] = [], []
    must_fail("no /tmp volume", lambda: check_running_hooks(env, no_tmp, name="image-check-break-tmp"))

    # The build context as Docker would take it, with .dockerignore no longer letting hooks/ in.
    context = Path(tempfile.mkdtemp(prefix="context-", dir=WORK))
    try:
        tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
        for path in tracked:
            if (ROOT / path).is_file():
                (context / path).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(ROOT / path, context / path)
        ignore = context / ".dockerignore"
        ignore.write_text(ignore.read_text().replace("!hooks/\n", ""))
        must_fail(".dockerignore without hooks/",
                  lambda: build(env, dockerfile="Dockerfile", tag="localhost/mxjob-hooks:broken", context=context))
    finally:
        shutil.rmtree(context, ignore_errors=True)


def in_own_mount_namespace(argv: list[str]) -> None:
    """Run the check in a mount namespace of its own (re-executing it under `unshare`): every layer the engine
    mounts is gone when the check ends, even when it is killed, so nothing stays mounted under WORK, where a
    mount would keep `make clean` from removing it."""
    if os.environ.get("IMAGE_CHECK_OWN_MOUNTS") == "1":
        return
    os.execvpe("unshare", ["unshare", "--mount", "--propagation", "private", sys.executable, __file__, *argv],
               {**os.environ, "IMAGE_CHECK_OWN_MOUNTS": "1"})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-self-test", action="store_true", help="skip the deliberate breaks")
    args = parser.parse_args(argv)
    in_own_mount_namespace(sys.argv[1:] if argv is None else argv)
    report = Report()
    started = time.monotonic()
    try:
        WORK.mkdir(exist_ok=True)
        with report.timed("install the tools (apt-get, when missing)"):
            install_tools()
        # The store of earlier versions of this check (vfs, one shared graph root): gigabytes no longer used.
        for legacy in ("storage", "run"):
            shutil.rmtree(WORK / legacy, ignore_errors=True)
        driver = storage_driver()
        report.notes.append(f"storage driver: {driver}")
        check_free_disk(driver)
        env = engine_env(driver)
        with report.timed("stand-in base (debootstrap + import)"):
            build_stand_in_base(env)
        with report.timed("build the hooks image (Dockerfile)"):
            build(env, dockerfile="Dockerfile", tag=HOOKS_IMAGE)
        with report.timed("build the digits image (examples/digits)"):
            build(env, dockerfile="examples/digits/Dockerfile", tag=DIGITS_IMAGE)
        for image in (BASE_IMAGE, HOOKS_IMAGE, DIGITS_IMAGE):
            size = run(["podman", "image", "inspect", "--format", "{{.Size}}", image], env=env, quiet=True).stdout
            report.sizes[image] = int(size)
        with report.timed("image contents and pinned versions"):
            check_hooks_contents(env)
            check_versions(env, HOOKS_IMAGE, "requirements.txt")
            check_versions(env, DIGITS_IMAGE, "requirements-mxnet.txt")
            check_user_entry(env, HOOKS_IMAGE)
            check_user_entry(env, DIGITS_IMAGE)
        deployment = yaml.safe_load(DEPLOYMENT.read_text())
        with report.timed("run the hooks image as the Deployment does"):
            check_running_hooks(env, deployment, report, name="image-check-hooks")
        with report.timed("one short training in the digits image"):
            report.notes.append(f"digits: {train_digits(env)}")
        if not args.no_self_test:
            with report.timed("deliberate breaks (each must fail)"):
                self_test(env, deployment)
    except CheckFailed as failure:
        print(f"\nimage-check FAILED: {failure}", file=sys.stderr)
        print(report.text(), file=sys.stderr)
        return 1
    report.seconds["total"] = time.monotonic() - started
    text = report.text()
    (WORK / "report.txt").write_text(text + "\n")
    print(text)
    print("image-check passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
