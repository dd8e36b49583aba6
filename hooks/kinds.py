"""The job kinds this hooks server serves: one `Kind` per kind, with its routes, pure sync entry point and settings.

A new kind is one sub-package beside hooks/mxjob and one entry in `KINDS`; the HTTP shell serves
whatever table `hooks.server.app.create_app(kinds=...)` is given, this one by default. This module
is the composition root: the only module outside the shell that imports more than one kind.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from hooks.chainerjob import vocabulary as chainerjob_vocabulary
from hooks.chainerjob.children import KUBECTL_IMAGE
from hooks.chainerjob.related import customize_chainerjob
from hooks.chainerjob.sync import OBSERVED_FIELDS as CHAINERJOB_OBSERVED_FIELDS
from hooks.chainerjob.sync import sync_chainerjob
from hooks.mxjob import vocabulary as mxjob_vocabulary
from hooks.mxjob.sync import OBSERVED_FIELDS as MXJOB_OBSERVED_FIELDS
from hooks.mxjob.sync import customize_mxjob, sync_mxjob
from hooks.shared.k8s import JSON, SyncResponse
from hooks.shared.kueue import KUEUE_POD_GROUPS_SETTING

# A kind's pure sync: `sync(request, *, now, **settings)`, the request, the time and the kind's
# settings (below) as keyword arguments in, the answer out.
SyncFunction = Callable[..., SyncResponse]


@dataclass(frozen=True)
class Kind:
    """One job kind as the shell serves it."""

    # The parent's kind (`MXJob`); also the `kind` label of the shell's metrics and log lines.
    name: str
    # The POST routes of its CompositeController's sync hook.
    routes: tuple[str, ...]
    sync: SyncFunction
    # Hook settings: keyword parameter of `sync` -> (environment variable, default).
    settings: Mapping[str, tuple[str, str]] = field(default_factory=dict)
    # The fields of observed children its core reads (see hooks.server.wire): the shell decodes
    # only these. None: every field.
    observed_fields: Mapping[str, Any] | None = None
    # Its CompositeController's customize hook, if it has one: `customize(request, **settings)` answers
    # `{"relatedResources": [...]}`, the objects each sync request then carries in `related`.
    customize: Callable[..., JSON] | None = None
    customize_routes: tuple[str, ...] = ()
    # The settings (keyword parameters, as for `sync`) its customize hook takes too.
    customize_settings: tuple[str, ...] = ()

    def settings_from(self, environ: Mapping[str, str]) -> dict[str, str]:
        """This kind's settings from an environment (the shell passes its own), defaults filled in."""
        return {param: environ.get(var) or default for param, (var, default) in self.settings.items()}


MXJOB = Kind(
    name=mxjob_vocabulary.KIND,
    # `/sync` is the MXJob route every installed CompositeController already calls.
    routes=("/sync", "/mxjob/sync"),
    sync=sync_mxjob,
    settings={"kueue_pod_groups": (KUEUE_POD_GROUPS_SETTING, "false")},
    observed_fields=MXJOB_OBSERVED_FIELDS,
    # A queued job's Kueue Workloads are not its children: the customize hook relates them, so a job
    # Kueue holds back says why (hooks.shared.kueue).
    customize=customize_mxjob,
    customize_routes=("/mxjob/customize",),
    customize_settings=("kueue_pod_groups",),
)

CHAINERJOB = Kind(
    name=chainerjob_vocabulary.KIND,
    routes=("/chainerjob/sync",),
    sync=sync_chainerjob,
    settings={"kubectl_image": ("CHAINERJOB_KUBECTL_IMAGE", KUBECTL_IMAGE),
              "kueue_pod_groups": (KUEUE_POD_GROUPS_SETTING, "false")},
    observed_fields=CHAINERJOB_OBSERVED_FIELDS,
    # The master Job's pods are not its children: the customize hook relates them, and a queued job's
    # Kueue Workloads (hooks.chainerjob.related).
    customize=customize_chainerjob,
    customize_routes=("/chainerjob/customize",),
    customize_settings=("kueue_pod_groups",),
)

KINDS: tuple[Kind, ...] = (MXJOB, CHAINERJOB)

# Read-only views by kind name, for callers that run one kind's core directly (golden tests,
# benchmarks). A test that needs another core builds its own table for create_app(kinds=...).
SYNC: Mapping[str, SyncFunction] = MappingProxyType({kind.name: kind.sync for kind in KINDS})
OBSERVED_FIELDS: Mapping[str, Mapping[str, Any] | None] = MappingProxyType(
    {kind.name: kind.observed_fields for kind in KINDS})
