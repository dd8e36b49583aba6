"""What a scenario costs the API server, counted by the server itself (`apiserver_request_total`, by
verb, resource and subresource; `ControlPlane.request_counts()`).

That counter does not say who made a request, so Metacontroller's reads are counted from the API
server's audit log (`LocalCluster(audit_reads=True)`): under the real engine every request its
ServiceAccount made, under the emulation every request sent with the emulation's User-Agent or its
informers' (which the kubelet and the tests read through too, as a real Metacontroller's informers
are its own). A test's own polling is neither.

SCENARIO_COSTS=<file> makes `record_cost` append each scenario's counts as one JSON line, with the
engine it ran under (docs/benchmarks.md, "What a scenario costs the API server"). Shared by the
real-cluster modules that record a scenario (test_kubernetes.py, test_e2e.py).
"""

from __future__ import annotations

import json
import os

from localcluster.cluster import LocalCluster
from localcluster.controlplane.apistore import AGENT_EMULATION, AGENT_INFORMER, PLURALS
from localcluster.metacontroller.binary import NAMESPACE, SERVICE_ACCOUNT

WRITES = ("POST", "PUT", "PATCH", "DELETE")
# Every resource a job's controllers (Metacontroller, the Job and StatefulSet controllers, the kubelet
# for its pods) write: the parents, the children and Events, as the local cluster's client names them.
JOB_RESOURCES = frozenset(PLURALS.values())

Counts = dict[tuple[str, str, str], int]
METACONTROLLER_USER = f"system:serviceaccount:{NAMESPACE}:{SERVICE_ACCOUNT}"
READS = {"get": "GET", "list": "LIST", "watch": "WATCH"}  # the audit log's verbs, as request_counts names them


def writes(counts: Counts) -> dict[str, int]:
    """Write requests to what a job's own controllers write (its parent, its children, the pods and
    Events), by 'VERB resource[/subresource]'. The control plane's own upkeep is left out: its
    components renew their leader leases (PUT leases) every few seconds, and the node's lease and
    status are the kubelet's, nothing of the job's."""
    return {f"{verb} {resource}{'/' + sub if sub else ''}": n for (verb, resource, sub), n in sorted(counts.items())
            if verb in WRITES and n and resource in JOB_RESOURCES}


def delta(after: Counts, before: Counts) -> Counts:
    return {key: after[key] - before.get(key, 0) for key in after if after[key] - before.get(key, 0)}


def named(counts: Counts) -> dict[str, int]:
    return {f"{verb} {resource}{'/' + sub if sub else ''}": n for (verb, resource, sub), n in sorted(counts.items())}


def audit_mark(cluster: LocalCluster) -> int:
    """Where the audit log ends now: `metacontroller_reads` counts from here."""
    assert cluster.control_plane is not None and cluster.control_plane.audit_reads, "LocalCluster(audit_reads=True)"
    log = cluster.control_plane.audit_log
    return log.stat().st_size if log.exists() else 0


def metacontroller_reads(cluster: LocalCluster, since: int) -> Counts:
    """Metacontroller's reads of a job's resources since `since` (audit_mark), by (verb, resource,
    subresource). A watch counts when it starts, any other request when it ends."""
    assert cluster.control_plane is not None
    with cluster.control_plane.audit_log.open("rb") as log:
        log.seek(since)
        lines = log.read().decode().splitlines()
    counts: Counts = {}
    for line in lines:
        event = json.loads(line)
        verb, ref = event.get("verb", ""), event.get("objectRef") or {}
        stage = "ResponseStarted" if verb == "watch" else "ResponseComplete"
        if verb not in READS or event.get("stage") != stage or ref.get("resource") not in JOB_RESOURCES:
            continue
        if cluster.engine == "binary":
            mine = event.get("user", {}).get("username") == METACONTROLLER_USER
        else:
            mine = event.get("userAgent") in (AGENT_EMULATION, AGENT_INFORMER)
        if mine:
            key = (READS[verb], ref["resource"], ref.get("subresource", ""))
            counts[key] = counts.get(key, 0) + 1
    return counts


def record_cost(scenario: str, counts: Counts, engine: str = "emulation", reads: Counts | None = None) -> None:
    """Append the scenario's requests (and Metacontroller's reads, when counted) to the SCENARIO_COSTS
    file, when one is named."""
    target = os.environ.get("SCENARIO_COSTS")
    if target:
        line = {"scenario": scenario, "engine": engine, "requests": named(counts)}
        if reads is not None:
            line["metacontroller_reads"] = named(reads)
        with open(target, "a") as out:
            out.write(json.dumps(line) + "\n")
