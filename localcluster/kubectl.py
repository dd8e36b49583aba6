"""`kubectl exec` stand-in for pods of the local cluster (`python -m localcluster.kubectl`, via a wrapper).

The process kubelet puts a `kubectl` wrapper calling this script on every pod's PATH (and where an
init container from a kubectl image would have copied kubectl). Only `kubectl exec` is emulated:
the command runs as a local process in the target container's environment (its env, working
directory and mounted paths, published by the kubelet while the container runs), with this
process's stdin/stdout/stderr, and is registered with the kubelet so that it dies with the
container, as a process exec'd into a real container does. The exit code is the command's.
Every other kubectl command fails with a message: there is no API server to talk to.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

from localcluster.volumes import PathMap

USAGE = "usage: kubectl exec [-i] [-t] [-n NAMESPACE] [-c CONTAINER] POD -- COMMAND [ARG...]"


def parse(argv: list[str]) -> tuple[dict[str, str], list[str]]:
    """Options and the command of an exec call (kubectl's own flag spellings)."""
    opts: dict[str, str] = {}
    rest = list(argv)
    positional: list[str] = []
    while rest:
        arg = rest.pop(0)
        if arg == "--":
            break
        if arg in ("-i", "--stdin", "-t", "--tty", "-it", "-ti", "-q", "--quiet"):
            continue
        match = re.fullmatch(r"(-n|--namespace|-c|--container|--pod-running-timeout|--kubeconfig)(?:=(.*))?", arg)
        if match:
            value = match.group(2) if match.group(2) is not None else (rest.pop(0) if rest else "")
            opts[match.group(1).lstrip("-")[0] if match.group(1) in ("-n", "-c") else match.group(1).lstrip("-")] = value
            continue
        if arg.startswith("-") and not positional:
            raise SystemExit(f"kubectl (local cluster): flag {arg} is not emulated\n{USAGE}")
        positional.append(arg)
    if len(positional) != 1:
        raise SystemExit(f"kubectl (local cluster): expected one pod name\n{USAGE}")
    opts["pod"] = positional[0].removeprefix("pod/").removeprefix("pods/")
    return opts, rest


def main(argv: list[str]) -> int:
    """Entry point: `python -m localcluster.kubectl --pods-dir DIR --namespace-default NS <kubectl args>`."""
    pods_dir, default_ns = Path(argv[2]), argv[4]
    args = argv[5:]
    if not args or args[0] != "exec":
        print(f"kubectl (local cluster): only `kubectl exec` is emulated, not {' '.join(args[:1]) or 'nothing'}\n{USAGE}",
              file=sys.stderr)
        return 1
    opts, command = parse(args[1:])
    if not command:
        print(f"error: you must specify at least one command for the container\n{USAGE}", file=sys.stderr)
        return 1
    namespace = opts.get("n", default_ns)
    pod_dir = pods_dir / namespace / opts["pod"]
    published = sorted(pod_dir.glob("exec-*.json"))
    if "c" in opts:
        published = [p for p in published if p.name == f"exec-{opts['c']}.json"]
    else:
        published = [p for p in published if json.loads(p.read_text()).get("first")]
    if not published:
        target = f"container {opts['c']} of pod {opts['pod']}" if "c" in opts else f"pod {opts['pod']}"
        print(f"error: unable to upgrade connection: {target} in namespace {namespace} is not running", file=sys.stderr)
        return 1
    info = json.loads(published[0].read_text())
    mapping = PathMap({path: Path(directory) for path, directory in info["mounts"].items()})
    argv_exec = [mapping.rewrite(part) for part in command]
    if os.sep not in argv_exec[0]:
        argv_exec[0] = shutil.which(argv_exec[0], path=info["env"].get("PATH")) or argv_exec[0]
    try:
        child = subprocess.Popen(argv_exec, env=info["env"], cwd=info["cwd"], start_new_session=True)
    except OSError as err:
        print(f"OCI runtime exec failed: {err}", file=sys.stderr)
        return 126 if isinstance(err, PermissionError) else 127
    registry = pod_dir / f"exec-{info['container']}.pids"
    registry.mkdir(parents=True, exist_ok=True)
    marker = registry / str(child.pid)
    marker.write_text(info["uid"])
    if not published[0].exists():  # the container stopped while we started: go down with it
        os.killpg(child.pid, signal.SIGKILL)

    def forward(signum: int, _frame: object) -> None:
        try:
            os.killpg(child.pid, signum)
        except ProcessLookupError:
            pass

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, forward)
    code = child.wait()
    marker.unlink(missing_ok=True)
    code = 128 - code if code < 0 else code
    if code:
        print(f"command terminated with exit code {code}", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv))
