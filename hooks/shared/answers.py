"""Answers every kind gives the same way to a spec it cannot act on.

- A job that never started (no child, nothing recorded of a start): `refuse_new`, Failed with every
  problem in the message, and no children.
- A job that has started (an invalid edit): `keep_children`, every observed child as last applied,
  and `specError`. Metacontroller deletes what an answer leaves out, so acting on a broken spec (or
  answering with nothing) would destroy a running job. While nothing else happens, the status is
  `kept_status`: nothing in it is lost or changed (see docs/hostile-input.md).

Each kind decides which case a job is in, and what of its status it reads back.
"""
from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from hooks.shared.conditions import Conditions
from hooks.shared.k8s import JSON, SyncResponse
from hooks.shared.request import as_last_applied, parent_key
from hooks.shared.status import WARNINGS_FIELD, OldStatus

SPEC_ERROR_FIELD = "specError"
# Not ours to answer: Metacontroller writes it after each sync (and a copy would be stale).
_SET_BY_METACONTROLLER = "observedGeneration"


def invalid_spec_message(kind: str, parent: Mapping[str, Any], problems: list[str]) -> str:
    """One sentence naming the job and listing every problem (each with its field path and fix)."""
    return f"{kind} {parent_key(parent)} has an invalid spec: " + "; ".join(problems) + "."


def refuse_new(old_conditions: list[Any], message: str, now: datetime, *, reason: str,
               state_order: Sequence[str]) -> JSON:
    """A new job with an invalid spec: its conditions with Failed (`reason`, `message`) set.

    Failed is terminal: the job is never started later; it is created again instead.
    """
    conds = Conditions(old_conditions, now, state_order=tuple(state_order))
    conds.set("Failed", True, reason, message)
    return {"conditions": conds.ordered()}


def kept_status(old: OldStatus, read_back: Mapping[str, Any], *, read_back_fields: Collection[str]) -> JSON:
    """The status of an invalid edit that changes nothing else: everything it had, nothing lost.

    A field the kind reads back (`read_back_fields`) is kept as `read_back` holds it, that is only
    in the shape the hook writes it (a field in another shape is warned about and left out, as on
    a valid sync). Every other field is kept exactly as it was: the hook does not write it now, so
    dropping it would lose what a valid sync wrote or what someone else put there, for an edit the
    hook could not act on. Left out always: the last `specError` and `statusWarnings` (written
    again by the caller) and `observedGeneration` (Metacontroller's).
    """
    dropped = {*read_back_fields, SPEC_ERROR_FIELD, WARNINGS_FIELD, _SET_BY_METACONTROLLER}
    status: JSON = {k: v for k, v in old.raw.items() if k not in dropped}
    status.update(read_back)
    return status


def keep_children(status: Mapping[str, Any], observed: Iterable[tuple[str, str, Mapping[str, Any]]],
                  message: str) -> SyncResponse:
    """An invalid edit of a job that already has children: keep each as last applied, and say why.

    `status` is the status without the problem (`kept_status`, or the kind's own when the job's
    outcome is decided meanwhile); `observed` holds (child rule key, name, object) of every
    observed child.
    """
    return {"status": {**status, SPEC_ERROR_FIELD: message},
            "children": [as_last_applied(key, name, obj) for key, name, obj in observed]}
