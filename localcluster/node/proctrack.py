"""Which processes belong to a container, and stopping every one of them, as its cgroup would.

Owns: the marker the process kubelet puts into the environment of each container's process (and
the kubectl stand-in into each process exec'd into it, from the published env), finding every live
process that carries a container's or a pod's marker or descends from one that does, and
SIGKILLing them all.

Why: a container's processes run in a process group of their own, but a program that daemonizes
(setsid and a double fork: OpenMPI's `prted --daemonize`, `sh -c 'setsid sleep 1000 &'`) leaves
the group and its session, and its parent's exit hands it to init. In a cluster the container's
cgroup (its PID namespace) still holds it and the runtime kills it with the container; here it
outlived its pod. The environment is inherited through fork, exec, setsid and reparenting alike,
so the marker finds such a process wherever it went. Decided over the alternatives
(docs/localcluster.md, "Processes that leave their container"): a cgroup per pod needs root and a
writable cgroup2 mount, which a user's machine does not give (so this would be needed anyway), and
making the kubelet a child subreaper would make it reap every orphan of the test process that
hosts it without stealing the exit codes `subprocess` waits for.

Limit: a process that both leaves the tree (daemonizes) and starts over with a fresh environment
(`env -i`, sudo) is not found; one that only replaced its environment is, as long as its parent
chain reaches a marked process.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Iterable

MARKER = "LOCALCLUSTER_CONTAINER"  # <pod uid>/<container name>: neither holds a `/`
_PROC = "/proc"
SWEEP_ROUNDS = 50  # scans until no marked process is left: a dying tree may fork meanwhile
_ROUND_PAUSE = 0.01
_warned: list[str] = []


def marker_value(uid: str, container: str) -> str:
    """The marker of one container of one pod (a recreated pod has a new uid, so its own marker)."""
    return f"{uid}/{container}"


def tagged(env: dict[str, str], uid: str, container: str) -> dict[str, str]:
    """`env` with the container's marker, for its process and for what is exec'd into it."""
    return {**env, MARKER: marker_value(uid, container)}


def _marker_of(pid: str) -> str | None:
    """The marker in a process's environment as it was started (/proc/PID/environ); None without one."""
    try:
        with open(f"{_PROC}/{pid}/environ", "rb") as f:
            environ = f.read()
    except OSError:  # gone, or another user's
        return None
    prefix = MARKER.encode() + b"="
    for entry in environ.split(b"\0"):
        if entry.startswith(prefix):
            return entry[len(prefix):].decode(errors="replace")
    return None


def _parents() -> dict[str, str]:
    """Every live process's parent pid (zombies left out: they are dead and hold nothing)."""
    parents = {}
    for entry in os.scandir(_PROC):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"{_PROC}/{entry.name}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()  # the command name may hold spaces
        except (OSError, IndexError):
            continue
        if len(fields) > 1 and fields[0] != b"Z":
            parents[entry.name] = fields[1].decode()
    return parents


def processes(uid: str, container: str | None = None) -> list[int]:
    """The live processes of a pod's container (every container of the pod when None): those that
    carry its marker and their descendants; never this process or its ancestors."""
    parents = _parents()
    wanted = marker_value(uid, container) if container is not None else None

    def belongs(value: str | None) -> bool:
        if value is None:
            return False
        return value == wanted if wanted is not None else value.startswith(f"{uid}/")

    own = {str(os.getpid())}
    pid = str(os.getpid())
    while pid in parents and parents[pid] not in own and parents[pid] != "0":
        pid = parents[pid]
        own.add(pid)
    markers = {pid: _marker_of(pid) for pid in parents if pid not in own}
    found = {pid for pid, value in markers.items() if belongs(value)}
    grown = True
    while grown:
        # Unmarked descendants too (they replaced their environment); a descendant with another
        # container's marker is that container's (exec'd into it through the kubectl stand-in).
        more = {pid for pid, value in markers.items() if value is None and parents[pid] in found and pid not in found}
        found |= more
        grown = bool(more)
    return sorted(int(pid) for pid in found)


def _kill(pids: Iterable[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def stop(uid: str, container: str | None = None) -> list[int]:
    """SIGKILL every process of a pod's container (of every container when None), scanning again
    until none is left, as a container's end kills its whole cgroup; the pids killed."""
    if not os.path.isdir(_PROC):
        _warn_once(f"localcluster: no {_PROC}: processes that leave their container (daemons) are not stopped with it")
        return []
    killed: set[int] = set()
    for _ in range(SWEEP_ROUNDS):
        pids = processes(uid, container)
        if not pids:
            break
        _kill(pids)
        killed.update(pids)
        time.sleep(_ROUND_PAUSE)
    else:
        _warn_once(f"localcluster: processes of pod {uid} outlived {SWEEP_ROUNDS} SIGKILL rounds: {processes(uid, container)}")
    return sorted(killed)


def _warn_once(message: str) -> None:
    if message not in _warned:
        _warned.append(message)
        print(message, file=sys.stderr)
