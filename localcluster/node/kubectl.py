"""`kubectl exec` and `kubectl get pod` stand-in for pods of the local cluster (`python -m localcluster.node.kubectl`).

The process kubelet puts a `kubectl` wrapper calling this script on every pod's PATH (and where an
init container from a kubectl image would have copied kubectl). `kubectl get pod [NAME...]` reads
the Pods the kubelet records (`pod.json`, the store's copy) and prints them as a table, `-o json`,
`-o yaml`, `-o name` or `-o jsonpath=TEMPLATE` (Kubernetes' template syntax: `{.a.b}`, filters
like `[?(@.name=="x")]`, several matches joined by spaces; `range` is not emulated). In `kubectl
exec` the command runs as a local process in the target container's environment (its env, working
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

import yaml
from jsonpath_ng.ext import parse as jsonpath_parse

from localcluster.node.volumes import PathMap
from localcluster.types import KubeObject

USAGE = ("usage: kubectl exec [-i] [-t] [-n NAMESPACE] [-c CONTAINER] POD -- COMMAND [ARG...]\n"
         "       kubectl get pod[s] [NAME...] [-n NAMESPACE] [-o json|yaml|name|jsonpath=TEMPLATE]")


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


def parse_get(argv: list[str]) -> tuple[str, list[str], str]:
    """Namespace, pod names and output format of a `get pod` call (SystemExit with usage otherwise)."""
    namespace, output, positional = "", "", []
    rest = list(argv)
    while rest:
        arg = rest.pop(0)
        match = re.fullmatch(r"(-n|--namespace|-o|--output)(?:=(.*))?", arg)
        if match:
            value = match.group(2) if match.group(2) is not None else (rest.pop(0) if rest else "")
            if match.group(1) in ("-n", "--namespace"):
                namespace = value
            else:
                output = value
        elif arg.startswith("-o") and len(arg) > 2:  # -ojsonpath=...
            output = arg[2:]
        elif arg.startswith("--request-timeout="):
            pass  # every read here is local and immediate
        elif arg.startswith("--kubeconfig") or arg in ("--ignore-not-found",):
            if arg == "--kubeconfig" and rest:
                rest.pop(0)
        elif arg.startswith("-"):
            raise SystemExit(f"kubectl (local cluster): flag {arg} is not emulated\n{USAGE}")
        else:
            positional.append(arg)
    if not positional:
        raise SystemExit(f"kubectl (local cluster): say which resource (pod)\n{USAGE}")
    resource, *names = positional
    kind, _, first = resource.partition("/")
    if kind not in ("pod", "pods", "po"):
        raise SystemExit(f"kubectl (local cluster): only pods can be read, not {kind!r}\n{USAGE}")
    return namespace, ([first] if first else []) + names, output


def render_jsonpath(template: str, obj: object) -> str:
    """What `-o jsonpath=TEMPLATE` prints for one object (Kubernetes' template syntax)."""
    out = []
    for text, expr in re.findall(r"([^{]*)(?:\{([^}]*)\})?", template):
        out.append(text)
        if not expr:
            continue
        expr = expr.strip()
        if expr.startswith(("range", "end")):
            raise SystemExit(f"kubectl (local cluster): jsonpath {{{expr}}} is not emulated")
        path = "$" + expr.removeprefix("$").removeprefix("@") if expr not in ("@", "$") else "$"
        try:
            values = [m.value for m in jsonpath_parse(path).find(obj)]
        except Exception as err:  # jsonpath-ng raises several types for a bad template
            raise SystemExit(f"error: error parsing jsonpath {template}, {err}") from err
        out.append(" ".join(v if isinstance(v, str) else json.dumps(v) for v in values))
    return "".join(out)


def get(pods_dir: Path, default_ns: str, argv: list[str]) -> int:
    """`kubectl get pod`: the recorded Pods, printed as asked."""
    namespace, names, output = parse_get(argv)
    namespace = namespace or default_ns
    folder = pods_dir / namespace
    pods, missing = [], []
    listed = sorted(p.name for p in folder.iterdir() if (p / "pod.json").exists()) if folder.is_dir() else []
    for name in names or listed:
        try:
            pods.append(json.loads((folder / name / "pod.json").read_text()))
        except (OSError, ValueError):
            missing.append(name)
    for name in missing:
        print(f'Error from server (NotFound): pods "{name}" not found', file=sys.stderr)
    if not pods:
        if not names:
            print(f"No resources found in {namespace} namespace.", file=sys.stderr)
        return 1 if missing else 0
    if output.startswith("jsonpath="):
        template = output.removeprefix("jsonpath=")
        # One object prints as itself; several are a List, as kubectl builds one.
        subject = pods[0] if len(pods) == 1 and names else {"apiVersion": "v1", "kind": "List", "items": pods}
        sys.stdout.write(render_jsonpath(template, subject))
    elif output in ("json", "yaml"):
        subject = pods[0] if len(pods) == 1 and names else {"apiVersion": "v1", "kind": "List", "items": pods}
        sys.stdout.write(json.dumps(subject, indent=4) + "\n" if output == "json" else yaml.safe_dump(subject))
    elif output == "name":
        sys.stdout.write("".join(f"pod/{p['metadata']['name']}\n" for p in pods))
    elif output in ("", "wide"):
        rows = [("NAME", "READY", "STATUS", "RESTARTS")] + [table_row(p) for p in pods]
        widths = [max(len(r[i]) for r in rows) for i in range(4)]
        sys.stdout.write("".join("   ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() + "\n"
                                 for r in rows))
    else:
        print(f"error: unable to match a printer suitable for the output format {output!r}, "
              "allowed formats are: json,jsonpath,name,wide,yaml", file=sys.stderr)
        return 1
    return 1 if missing else 0


def table_row(pod: KubeObject) -> tuple[str, str, str, str]:
    """NAME, READY, STATUS and RESTARTS columns of one Pod."""
    statuses = pod.get("status", {}).get("containerStatuses") or []
    ready = sum(1 for s in statuses if s.get("ready"))
    total = len(pod.get("spec", {}).get("containers") or statuses)
    waiting = [s["state"]["waiting"].get("reason", "") for s in statuses if "waiting" in s.get("state", {})]
    status = next((w for w in waiting if w), pod.get("status", {}).get("phase", "Unknown"))
    if pod.get("metadata", {}).get("deletionTimestamp"):
        status = "Terminating"
    restarts = sum(int(s.get("restartCount", 0)) for s in statuses)
    return pod["metadata"]["name"], f"{ready}/{total}", status, str(restarts)


def main(argv: list[str]) -> int:
    """Entry point: `python -m localcluster.node.kubectl --pods-dir DIR --namespace-default NS <kubectl args>`."""
    pods_dir, default_ns = Path(argv[2]), argv[4]
    args = argv[5:]
    if args and args[0] == "get":
        return get(pods_dir, default_ns, args[1:])
    if not args or args[0] != "exec":
        print(f"kubectl (local cluster): only `kubectl exec` and `kubectl get pod` are emulated, "
              f"not {' '.join(args[:1]) or 'nothing'}\n{USAGE}", file=sys.stderr)
        return 1
    return exec_in(pods_dir, default_ns, args[1:])


def published_container(pod_dir: Path, container: str | None) -> Path | None:
    """The file the kubelet publishes while a container runs: the one named, else the pod's first."""
    published = sorted(pod_dir.glob("exec-*.json"))
    if container is not None:
        return next((p for p in published if p.name == f"exec-{container}.json"), None)
    return next((p for p in published if json.loads(p.read_text()).get("first")), None)


def exec_in(pods_dir: Path, default_ns: str, argv: list[str]) -> int:
    """`kubectl exec`: the command as a local process in the container's environment; its exit code."""
    opts, command = parse(argv)
    if not command:
        print(f"error: you must specify at least one command for the container\n{USAGE}", file=sys.stderr)
        return 1
    namespace = opts.get("n", default_ns)
    pod_dir = pods_dir / namespace / opts["pod"]
    published = published_container(pod_dir, opts.get("c"))
    if published is None:
        target = f"container {opts['c']} of pod {opts['pod']}" if "c" in opts else f"pod {opts['pod']}"
        print(f"error: unable to upgrade connection: {target} in namespace {namespace} is not running", file=sys.stderr)
        return 1
    return run_in(pod_dir, published, command)


def run_in(pod_dir: Path, published: Path, command: list[str]) -> int:
    """Run `command` where the published container runs, registered so that it dies with the container."""
    info = json.loads(published.read_text())
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
    if not published.exists():  # the container stopped while we started: go down with it
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
