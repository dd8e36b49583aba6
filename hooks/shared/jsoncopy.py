"""Copying JSON-shaped data (dicts, lists, scalars) from a request before changing it."""
from __future__ import annotations

import pickle
from collections.abc import Callable
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


def copier(value: Any) -> Callable[[], Any]:
    """A function that returns a fresh deep copy of `value` (as it is now) on every call.

    For many copies of one template (a pod per replica): the value is serialised once and each copy
    is rebuilt in C, about twice as fast as json_copy. The bytes never leave this process.
    """
    blob = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    return lambda: pickle.loads(blob)
