"""How mpiexec on the master reaches the workers: the env, the rsh agent script and the hostfile.

OpenMPI's launcher starts its daemons through an "rsh agent" (`<agent> <host> <command...>`,
run as ssh would run it). Ours runs the command here when the host is this pod and otherwise
`kubectl exec`s it into the target pod. Every host name is known before any pod starts (workers
are StatefulSet pods, the master pod's hostname is set), so the hostfile is written once, here.

A lost worker must fail the master, but OpenMPI 5's launcher (PRRTE 3.0) exits 0 when it loses the
connection to a worker's daemon before it sees the agent's exit (a worker pod's end kills the daemon
with it, and the TCP connection closes long before `kubectl exec` returns); it then SIGKILLs the
agents still running, so their exit codes are never read. So the master's command runs through the
launcher (`launcher_script`): every agent records its worker's daemon, and a command that exits 0
while a daemon was lost (its `kubectl exec` ended non-zero, or mpiexec killed the agent) fails with a
line naming the worker. docs/chainerjob.md, "A lost worker or master", has the evidence.
"""
from __future__ import annotations

from typing import Any

from hooks.chainerjob import names
from hooks.chainerjob.spec import DEFAULT_CONTAINER, ChainerJob

# How long the rsh agent waits for a worker container under gang scheduling (image pulls included).
AGENT_WAIT_SECONDS = 600
AGENT_WAIT_STEP = 2

# How long the launcher waits, after its command exited 0, for agents whose `kubectl exec` is
# still ending (a daemon that exited cleanly is gone at once; its stream closes a little later).
LAUNCHER_AGENT_WAIT_SECONDS = 30

AGENT_PATH = f"{names.ASSETS_DIR}/{names.AGENT_KEY}"
LAUNCHER_PATH = f"{names.ASSETS_DIR}/{names.LAUNCHER_KEY}"
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
        f"{_exec_recorded()}"
    )


def _exec_recorded() -> str:
    """`kubectl exec` into the worker; under the launcher, recorded in `$CHAINERJOB_AGENT_RECORDS`.

    The record `<agent pid>.<host>` is created empty before the daemon starts, removed when its
    `kubectl exec` ends 0 and holds the exit code otherwise; one left empty by a dead agent was
    killed by mpiexec, which does so only when it aborts. Not `exec`, so the agent outlives kubectl.
    """
    kubectl = (f"\"${{KUBECTL_DIR:-{names.KUBECTL_DIR}}}/kubectl\" "
               "exec -i \"$host\" -c \"$container\" -- /bin/sh -c \"$*\"")
    records = f"${names.AGENT_RECORDS_ENV}"
    return (
        f"if [ -z \"{records}\" ]; then\n"
        f"  exec {kubectl}\n"
        "fi\n"
        f"record=\"{records}/$$.$host\"\n"
        ": > \"$record\"\n"
        f"{kubectl}\n"
        "code=$?\n"
        "if [ \"$code\" -eq 0 ]; then rm -f \"$record\"; else echo \"$code\" > \"$record\"; fi\n"
        "exit \"$code\"\n"
    )


def launcher_script(job: ChainerJob) -> str:
    """The master's main container runs `launcher.sh <its command...>`: the command's exit code,
    except that 0 becomes 1 when a worker's daemon was lost meanwhile (the agents' records).

    The command runs as a child, so the launcher forwards TERM, INT and HUP to it (as the
    container's first process it would otherwise ignore them) and gives it its stdin (through fd 3:
    dash gives an `&` command /dev/null even with `<&0`).
    """
    return (
        "#!/bin/sh\n"
        "# The master of ChainerJob " + job.key + ": launcher.sh <command...>; fails a command that exits 0\n"
        "# although a worker's MPI daemon was lost while it ran (OpenMPI 5's mpiexec does; docs/chainerjob.md).\n"
        "records=$(mktemp -d \"${TMPDIR:-/tmp}/chainerjob-agents.XXXXXX\") || exec \"$@\"\n"
        f"{names.AGENT_RECORDS_ENV}=\"$records\"\n"
        f"export {names.AGENT_RECORDS_ENV}\n"
        "exec 3<&0\n"
        "\"$@\" 0<&3 3<&- &\n"
        "child=$!\n"
        "for sig in TERM INT HUP; do trap \"kill -$sig $child 2>/dev/null\" \"$sig\"; done\n"
        "while :; do\n"
        "  wait \"$child\"\n"
        "  code=$?\n"
        "  kill -0 \"$child\" 2>/dev/null || break\n"
        "done\n"
        "# A trapped signal interrupts wait (> 128) before the child's end is reported: ask again.\n"
        "if [ \"$code\" -gt 128 ]; then\n"
        "  wait \"$child\" 2>/dev/null\n"
        "  again=$?\n"
        "  [ \"$again\" -eq 127 ] || code=$again\n"
        "fi\n"
        "alive() {\n"
        "  if [ -r /proc/self/stat ]; then\n"
        "    state=$(sed -n 's/^.*) \\(.\\).*$/\\1/p' \"/proc/$1/stat\" 2>/dev/null)\n"
        "    [ -n \"$state\" ] && [ \"$state\" != Z ]\n"
        "  else\n"
        "    kill -0 \"$1\" 2>/dev/null\n"
        "  fi\n"
        "}\n"
        "lost=\n"
        "if [ \"$code\" -eq 0 ]; then\n"
        f"  deadline=$(( $(date +%s) + {LAUNCHER_AGENT_WAIT_SECONDS} ))\n"
        "  for record in \"$records\"/*; do\n"
        "    [ -e \"$record\" ] || continue\n"
        "    name=${record##*/}\n"
        "    while [ -e \"$record\" ] && [ ! -s \"$record\" ] && alive \"${name%%.*}\" \\\n"
        "        && [ \"$(date +%s)\" -lt \"$deadline\" ]; do\n"
        "      sleep 1\n"
        "    done\n"
        "    [ -e \"$record\" ] || continue\n"
        "    if [ -s \"$record\" ]; then\n"
        "      lost=\"$lost ${name#*.} (kubectl exec ended with exit code $(cat \"$record\"))\"\n"
        "    elif ! alive \"${name%%.*}\"; then\n"
        "      lost=\"$lost ${name#*.} (its agent was killed by mpiexec, as it does when it aborts)\"\n"
        "    fi\n"
        "  done\n"
        "fi\n"
        "rm -rf \"$records\"\n"
        "if [ -n \"$lost\" ]; then\n"
        "  echo \"launcher.sh: error: the command exited 0, but mpiexec lost a worker's MPI daemon; \"\\\n"
        "\"daemons that did not end cleanly:$lost. Failing the master so that its Job retries\" >&2\n"
        "  exit 1\n"
        "fi\n"
        "exit \"$code\"\n"
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
