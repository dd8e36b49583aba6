"""The gang-scheduling kustomizations docs/gang-scheduling.md shows, read from the guide and written out to render."""

from __future__ import annotations

import os
import re
from pathlib import Path

from helpers import yamlio

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "gang-scheduling.md"
CHECKOUT = "../mxjob-operator/"  # how the guide's kustomizations refer to this repository


def readme_kustomizations() -> dict[str, str]:
    """The guide's gang-scheduling kustomizations, by the component each one adds."""
    section = GUIDE.read_text()
    found = {}
    for block in re.findall(r"```yaml\n(.*?)```", section, re.S):
        doc = yamlio.load(block)
        if doc.get("kind") == "Kustomization":
            found[doc["components"][0].rsplit("/", 1)[1]] = block
    return found


def write_kustomization(directory: Path, text: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    checkout = os.path.relpath(ROOT, directory) + "/"
    (directory / "kustomization.yaml").write_text(text.replace(CHECKOUT, checkout))
    return directory
