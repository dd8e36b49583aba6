"""How mpiexec on the master reaches the workers: the env, the rsh agent script and the hostfile.

OpenMPI's launcher starts its daemons through an "rsh agent" (`<agent> <host> <command...>`,
run as ssh would run it). Ours runs the command here when the host is this pod and otherwise
`kubectl exec`s it into the target pod. Every host name is known before any pod starts (workers
are StatefulSet pods, the master pod's hostname is set), so the hostfile is written once, here.
"""
from __future__ import annotations

from typing import Any

from hooks.chainerjob import names
from hooks.chainerjob.spec import DEFAULT_CONTAINER, ChainerJob

# How long the rsh agent waits for a worker container under gang scheduling (image pulls included).
AGENT_WAIT_SECONDS = 600
AGENT_WAIT_STEP = 2

AGENT_PATH = f"{names.ASSETS_DIR}/{names.AGENT_KEY}"
HOSTFILE_PATH = f"{names.ASSETS_DIR}/{names.HOSTFILE_KEY}"


def launcher_env() -> list[dict[str, str]]:
    """The env of every container of a distributed job, in this order.

    The original's names stay for images built for it (OpenMPI <= 4, which reads OMPI_MCA_*);
    OpenMPI 5 launches through PRRTE, which ignores them and reads the PRTE_MCA_* names. No tree
    spawn: only the master runs the agent, so workers need neither kubectl nor API rights.
    """
    return [
        {"name": "KUBECTL_DIR", "value": names.KUBECTL_DIR},
        {"name": "OMPI_MCA_plm_rsh_agent", "value": AGENT_PATH},
        {"name": "OMPI_MCA_orte_keep_fqdn_hostnames", "value": "t"},
        {"name": "OMPI_MCA_orte_default_hostfile", "value": HOSTFILE_PATH},
        {"name": "OMPI_MCA_btl_tcp_if_exclude", "value": "lo,docker0"},
        {"name": "OMPI_MCA_plm_rsh_no_tree_spawn", "value": "1"},
        {"name": "PRTE_MCA_plm_ssh_agent", "value": AGENT_PATH},
        {"name": "PRTE_MCA_prte_default_hostfile", "value": HOSTFILE_PATH},
        {"name": "PRTE_MCA_plm_ssh_no_tree_spawn", "value": "1"},
    ]


def with_launcher_env(user_env: list[Any] | None) -> list[Any]:
    """The user's entries, less any the operator sets, then the operator's: its values win."""
    ours = launcher_env()
    taken = {e["name"] for e in ours}
    return [e for e in user_env or [] if not (isinstance(e, dict) and e.get("name") in taken)] + ours


def hostfile(job: ChainerJob) -> str:
    """`<host> slots=<N>` per line: worker sets in name order, ordinals in order, the master last.

    The master last, as in the original, so `mpiexec -n <workers>` leaves it out.
    """
    lines = [f"{names.worker_pod(job.name, ws.name, i)} slots={ws.slots}"
             for ws in job.worker_sets.values() for i in range(ws.replicas)]
    lines.append(f"{names.master(job.name)} slots={job.master.slots}")
    return "\n".join(lines) + "\n"


def agent_script(job: ChainerJob, *, wait_for_target: bool = False) -> str:
    """The rsh agent: run `<command...>` on pod `<host>` through a shell, as ssh would.

    With `wait_for_target` (gang scheduling: every pod is created at once, so mpiexec may start
    before a worker's container runs) it first waits, at most AGENT_WAIT_SECONDS, for the target
    container to be running, and says why when it gives up.
    """
    # Longest set name first: `a-[0-9]*` also matches the pods of a set named `a-1` (a-1-0), but
    # `a-1-[0-9]*` never matches a pod of `a` (its names have only digits after `a-`).
    by_length = sorted(job.worker_sets.values(), key=lambda ws: (-len(ws.name), ws.name))
    cases = "".join(f"  {names.worker_set(job.name, ws.name)}-[0-9]*) container={ws.main_container} ;;\n"
                    for ws in by_length)
    return (
        "#!/bin/sh\n"
        "# OpenMPI's rsh agent for ChainerJob " + job.key + ": kubexeb.sh <host> <command...>\n"
        "host=\"$1\"\n"
        "shift\n"
        "if [ \"$host\" = \"$(hostname)\" ]; then\n"
        "  exec /bin/sh -c \"$*\"\n"
        "fi\n"
        "case \"$host\" in\n"
        f"{cases}"
        f"  *) container={DEFAULT_CONTAINER} ;;\n"
        "esac\n"
        f"{_wait_for_target() if wait_for_target else ''}"
        f"exec \"${{KUBECTL_DIR:-{names.KUBECTL_DIR}}}/kubectl\" exec -i \"$host\" -c \"$container\" -- "
        "/bin/sh -c \"$*\"\n"
    )


def _wait_for_target() -> str:
    running = ('{.status.containerStatuses[?(@.name==\\"$container\\")].state.running.startedAt}')
    # Wall-clock bounded (each look bounded too), so a slow API server cannot stretch the wait.
    return (
        "started=$(date +%s)\n"
        f"until [ -n \"$(\"${{KUBECTL_DIR:-{names.KUBECTL_DIR}}}/kubectl\" get pod \"$host\" "
        f"--request-timeout={AGENT_WAIT_STEP}s -o \"jsonpath={running}\" 2>/dev/null)\" ]; do\n"
        "  waited=$(( $(date +%s) - started ))\n"
        f"  if [ \"$waited\" -ge {AGENT_WAIT_SECONDS} ]; then\n"
        "    echo \"kubexeb.sh: container $container of pod $host is not running after $waited s; "
        "giving up (is the gang scheduled? kubectl describe pod $host)\" >&2\n"
        "    exit 1\n"
        "  fi\n"
        f"  sleep {AGENT_WAIT_STEP}\n"
        "done\n"
    )
