"""The hooks server's Prometheus metrics: their names, and their exposition in one or many processes.

Every series carries the job kind whose route was called (`kind="MXJob"`, `kind="ChainerJob"`), so
the names say what is counted and not for which kind (docs/metrics.md, with the rename from the
old `mxjob_hooks_*` names).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector

# Every outcome a sync request can have; all are exported from the start (at 0) so that a rate()
# over a label that has not happened yet is 0, not "no data".
OUTCOMES = ("ok", "bad_request", "error", "too_large")

# From 1 ms (a small job) to 30 s: Metacontroller gives up after 10 s, so the buckets above 2.5 s
# show how close the slowest syncs come to that timeout, and the ones above it how often they pass it.
DURATION_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"


@dataclass(frozen=True)
class SyncMetrics:
    """The metrics of one app and the registry they live in."""

    registry: CollectorRegistry
    syncs: Counter
    duration: Histogram

    def observe(self, kind: str, outcome: str, seconds: float) -> None:
        """Record one sync request to `kind`'s route."""
        self.syncs.labels(kind=kind, outcome=outcome).inc()
        self.duration.labels(kind=kind).observe(seconds)

    def exposition(self) -> tuple[bytes, str]:
        """The text exposition and its content type, summed over every worker in multiprocess mode."""
        multiproc_dir = os.environ.get(MULTIPROC_ENV)
        if multiproc_dir:
            # Each gunicorn worker writes its values to files in this directory; a fresh registry
            # reading all of them gives the same totals whichever worker answers the scrape.
            registry = CollectorRegistry()
            MultiProcessCollector(registry, path=multiproc_dir)  # type: ignore[no-untyped-call]
        else:
            registry = self.registry
        return generate_latest(registry), CONTENT_TYPE_LATEST


SYNCS = "job_hooks_syncs"  # exposed as job_hooks_syncs_total
DURATION = "job_hooks_sync_duration_seconds"


def make_metrics(kinds: Iterable[str]) -> SyncMetrics:
    """New metrics for the given job kinds, in a registry of their own (so two apps in one process,
    e.g. tests, never share)."""
    registry = CollectorRegistry(auto_describe=True)
    syncs = Counter(
        SYNCS,
        "Sync requests answered, by job kind (the route called) and outcome.",
        labelnames=("kind", "outcome"),
        registry=registry,
    )
    duration = Histogram(
        DURATION,
        "Time to answer a sync request, from reading the body to the serialised answer, by job kind.",
        labelnames=("kind",),
        buckets=DURATION_BUCKETS,
        registry=registry,
    )
    for kind in kinds:
        duration.labels(kind=kind)
        for outcome in OUTCOMES:
            syncs.labels(kind=kind, outcome=outcome)
    return SyncMetrics(registry=registry, syncs=syncs, duration=duration)
