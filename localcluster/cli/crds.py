"""What the shipped CRDs serve: per kind, its group, served versions, storage version and warnings.

`localcluster run` reads crd/ before it starts a cluster, so a job file in a version no CRD serves
(an MXJob of `kubeflow.org/v1alpha1`, say) is refused at once with the served versions and the way
to convert, instead of after the control plane is up.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from localcluster.config import REPO_ROOT

CRD_DIR = REPO_ROOT / "crd"
# The safe loader on libyaml's parser where PyYAML has it: the CRDs are 0.8 MB, under a second in pure
# Python and a fifth of that here, before every `run`.
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@dataclass(frozen=True)
class ServedKind:
    """One custom kind as its CRD serves it."""

    kind: str
    group: str
    storage: str
    served: tuple[str, ...]
    warnings: tuple[tuple[str, str], ...]  # (version, deprecationWarning) of deprecated versions

    def warning_for(self, version: str) -> str | None:
        """The deprecation warning the API server would return for a version, or None."""
        return dict(self.warnings).get(version)


def served_kind(crd: dict[str, Any]) -> ServedKind:
    """A CRD document read into what serving needs."""
    spec = crd["spec"]
    versions = spec["versions"]
    served = tuple(v["name"] for v in versions if v.get("served"))
    storage = next(v["name"] for v in versions if v.get("storage"))
    warnings = tuple(
        (v["name"], " ".join(str(v.get("deprecationWarning") or f"{spec['group']}/{v['name']} "
                                  f"{spec['names']['kind']} is deprecated").split()))
        for v in versions if v.get("served") and v.get("deprecated"))
    return ServedKind(kind=spec["names"]["kind"], group=spec["group"], storage=storage,
                      served=served, warnings=warnings)


@cache
def served_kinds(crd_dir: Path = CRD_DIR) -> dict[str, ServedKind]:
    """Every kind the CRDs under crd_dir define, by kind name."""
    kinds: dict[str, ServedKind] = {}
    for path in sorted(crd_dir.glob("*.yaml")):
        for doc in yaml.load_all(path.read_text(), Loader=_LOADER):
            if isinstance(doc, dict) and doc.get("kind") == "CustomResourceDefinition":
                served = served_kind(doc)
                kinds[served.kind] = served
    return kinds
