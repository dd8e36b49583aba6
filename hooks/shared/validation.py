"""Checks a kind's spec parser needs: integers and the Kubernetes name rules."""
from __future__ import annotations

import re
from typing import Any, TypeGuard

# DNS-1035 label: what Service names (and so every name prefixed by a job's name) must match.
DNS_1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
# DNS-1123 label: what a name part that is never first (a worker set's key) must match.
DNS_1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
MAX_LABEL_LENGTH = 63
MAX_INT32 = 2**31 - 1  # what the API server accepts in an int32 field (replicas, backoffLimit...)
MIN_INT32 = -(2**31)


def is_non_negative_int(value: Any, maximum: int | None = None) -> TypeGuard[int]:
    """An integer >= 0 (and <= maximum); YAML's true/false are not integers here, whatever Python thinks."""
    return (isinstance(value, int) and not isinstance(value, bool) and value >= 0
            and (maximum is None or value <= maximum))


def is_int32(value: Any) -> TypeGuard[int]:
    """An integer an int32 field holds (an exit code); YAML's true/false are not integers here."""
    return isinstance(value, int) and not isinstance(value, bool) and MIN_INT32 <= value <= MAX_INT32
