"""Hypothesis settings and garbage values for fuzzing hook inputs, and the helpers that put them at a path of a request."""

from __future__ import annotations

import os
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

EXAMPLES = int(os.environ.get("MXJOB_FUZZ_EXAMPLES", "60"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize=EXAMPLES <= 60,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
# A sample sent through the real API server (a namespace and a write per child each): a few dozen
# examples, always the same ones unless MXJOB_SAMPLE_EXAMPLES asks for more.
SAMPLE_EXAMPLES = int(os.environ.get("MXJOB_SAMPLE_EXAMPLES", "24"))
SAMPLE = settings(max_examples=SAMPLE_EXAMPLES, deadline=None, derandomize=SAMPLE_EXAMPLES <= 24,
                  suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
garbage = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.sampled_from([0, -1, 2**31, 2**63 - 1]),
    st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=20),
    st.sampled_from(["", "Never", "9999-12-31T23:59:59Z", "2026-01-01T00:00:00", "0-2147483647"]),
    st.lists(st.integers(), max_size=3), st.just({}), st.just([]),
    st.dictionaries(st.text(max_size=5), st.integers(), max_size=2),
)


def paths(node: Any, prefix: tuple = ()) -> list[tuple]:
    """Every path into a JSON value, containers included."""
    found = [prefix]
    if isinstance(node, dict):
        for key, value in node.items():
            found += paths(value, (*prefix, key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            found += paths(value, (*prefix, i))
    return found


def set_at(root: Any, path: tuple, value: Any) -> None:
    node = root
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = value
