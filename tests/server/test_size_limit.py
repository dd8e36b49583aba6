"""The request-size limit admits the largest job the core admits, with margin, because requests grow linearly."""
from __future__ import annotations

import json
import sys
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import sync_bench

from hooks.mxjob.env import cluster_wiring
from hooks.mxjob.layout import size_problems
from hooks.mxjob.spec import parse_mxjob
from hooks.server.app import DEFAULT_MAX_CONTENT_LENGTH


def request_bytes(replicas: int) -> int:
    """Size of the sync request of a running job (the benchmark's realistic observed children)."""
    request = sync_bench.steady_state_request(replicas, sync_bench.CREATED + timedelta(hours=1))
    return len(json.dumps(request, separators=(",", ":")))


def admissible(replicas: int) -> bool:
    job = parse_mxjob(sync_bench.mxjob(replicas))
    return not size_problems(job, cluster_wiring(job))


def largest_admissible() -> int:
    low, high = 2, 10_000
    while low < high:
        middle = (low + high + 1) // 2
        low, high = (middle, high) if admissible(middle) else (low, middle - 1)
    return low


def test_requests_grow_linearly_and_the_limit_admits_the_largest_admissible_job_with_margin():
    small, large = request_bytes(50), request_bytes(100)
    per_replica = (large - small) / 50
    # Linear: 200 replicas cost what the line through 50 and 100 says (managedFields digits aside).
    assert abs(request_bytes(200) - (large + 100 * per_replica)) < 0.01 * request_bytes(200)
    biggest = largest_admissible()
    assert 2_400 < biggest < 2_700  # Linux's 128 KiB per environment string, 17-character name
    expected = large + (biggest - 100) * per_replica
    assert 1.5 * expected <= DEFAULT_MAX_CONTENT_LENGTH
