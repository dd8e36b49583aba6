"""The job kinds this hooks server serves: each kind's routes, its pure sync entry point and its settings.

A new kind is one sub-package beside hooks/mxjob and one entry in each table here; the HTTP shell
serves whatever is listed.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from hooks.chainerjob.children import KUBECTL_IMAGE
from hooks.chainerjob.sync import OBSERVED_FIELDS as CHAINERJOB_OBSERVED_FIELDS
from hooks.chainerjob.sync import sync_chainerjob
from hooks.mxjob.sync import OBSERVED_FIELDS as MXJOB_OBSERVED_FIELDS
from hooks.mxjob.sync import sync_mxjob
from hooks.shared.k8s import SyncResponse

# A kind's pure sync: `sync(request, *, now, **settings)`, the request, the time and the kind's
# settings (below) as keyword arguments in, the answer out.
SyncFunction = Callable[..., SyncResponse]

# `/sync` is the MXJob route every installed CompositeController already calls.
ROUTES: dict[str, tuple[str, ...]] = {"MXJob": ("/sync", "/mxjob/sync"), "ChainerJob": ("/chainerjob/sync",)}

# Looked up on every request (not bound at start-up), so a test can stand in for one kind's core.
SYNC: dict[str, SyncFunction] = {"MXJob": sync_mxjob, "ChainerJob": sync_chainerjob}

# Hook settings: kind -> keyword parameter of its sync -> (environment variable, default).
SETTINGS: dict[str, dict[str, tuple[str, str]]] = {
    "ChainerJob": {"kubectl_image": ("CHAINERJOB_KUBECTL_IMAGE", KUBECTL_IMAGE)},
}


def settings_from(environ: Mapping[str, str]) -> dict[str, dict[str, str]]:
    """Each kind's settings from an environment (the shell passes its own), defaults filled in."""
    return {kind: {param: environ.get(var) or default for param, (var, default) in params.items()}
            for kind, params in SETTINGS.items()}

# The fields of observed children each kind's core reads (see hooks.server.wire): the shell decodes
# only these. A kind left out here gets every field.
OBSERVED_FIELDS: dict[str, Mapping[str, Any]] = {"MXJob": MXJOB_OBSERVED_FIELDS,
                                                  "ChainerJob": CHAINERJOB_OBSERVED_FIELDS}
