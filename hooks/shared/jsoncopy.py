"""Copying JSON-shaped data (dicts, lists, scalars) from a request before changing it."""
from __future__ import annotations

from typing import Any


def json_copy(value: Any) -> Any:
    """Deep copy of JSON-shaped data; several times faster than copy.deepcopy on pod templates."""
    # Exact type checks: isinstance against typing.Mapping cost a third of the whole sync.
    kind = type(value)
    if kind is dict:
        return {k: json_copy(v) for k, v in value.items()}
    if kind is list:
        return [json_copy(v) for v in value]
    return value
