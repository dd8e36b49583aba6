"""Answers every kind gives the same way: the invalid-spec message, and keeping children on an invalid edit."""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from hooks.shared.k8s import JSON, SyncResponse
from hooks.shared.request import as_last_applied, parent_key


def invalid_spec_message(kind: str, parent: Mapping[str, Any], problems: list[str]) -> str:
    """One sentence naming the job and listing every problem (each with its field path and fix)."""
    return f"{kind} {parent_key(parent)} has an invalid spec: " + "; ".join(problems) + "."


def keep_children(old_status: Mapping[str, Any], observed: Iterable[tuple[str, str, Mapping[str, Any]]],
                  message: str) -> SyncResponse:
    """An invalid edit of a job that already has children: keep each as last applied, and say why.

    Metacontroller deletes what an answer leaves out, so acting on a broken spec (or answering
    with nothing) would destroy a running job; the status keeps everything else it had.
    `observed` holds (child rule key, name, object) of every observed child.
    """
    status: JSON = {k: v for k, v in old_status.items() if k not in ("observedGeneration", "specError")}
    status["specError"] = message
    return {"status": status, "children": [as_last_applied(key, name, obj) for key, name, obj in observed]}
