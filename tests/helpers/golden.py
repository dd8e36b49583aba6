"""The golden cases (tests/golden/<case>/request.yaml and response.yaml), read by several test modules."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from helpers import yamlio

GOLDEN = Path(__file__).resolve().parents[1] / "golden"


def golden_statuses() -> dict[str, tuple[str, dict[str, Any]]]:
    """(parent kind, status) of every golden answer that writes a status, by case name."""
    cases = {}
    for response in sorted(GOLDEN.glob("*/response.yaml")):
        kind = yamlio.load((response.parent / "request.yaml").read_text())["parent"]["kind"]
        status = yamlio.load(response.read_text()).get("status")
        if status:
            cases[response.parent.name] = (kind, status)
    return cases
