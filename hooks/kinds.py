"""The job kinds this hooks server serves: each kind's routes and its pure sync entry point.

A new kind is one sub-package beside hooks/mxjob and one entry in each table here; the HTTP shell
serves whatever is listed.
"""
from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any, Protocol

from hooks.mxjob.sync import OBSERVED_FIELDS as MXJOB_OBSERVED_FIELDS
from hooks.mxjob.sync import sync_mxjob
from hooks.shared.k8s import SyncResponse


class SyncFunction(Protocol):
    """A kind's pure sync: the request and the time in, the answer out."""

    def __call__(self, request: Mapping[str, Any], *, now: datetime) -> SyncResponse: ...


# `/sync` is the MXJob route every installed CompositeController already calls.
ROUTES: dict[str, tuple[str, ...]] = {"MXJob": ("/sync", "/mxjob/sync")}

# Looked up on every request (not bound at start-up), so a test can stand in for one kind's core.
SYNC: dict[str, SyncFunction] = {"MXJob": sync_mxjob}

# The fields of observed children each kind's core reads (see hooks.server.wire): the shell decodes
# only these. A kind left out here gets every field.
OBSERVED_FIELDS: dict[str, Mapping[str, Any]] = {"MXJob": MXJOB_OBSERVED_FIELDS}
