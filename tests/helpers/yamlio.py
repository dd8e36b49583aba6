"""YAML as the tests read it: PyYAML's safe loader on libyaml's parser.

The same objects as `yaml.safe_load`, about four times faster. It matters here: the tests read the
CRDs (0.8 MB) and every golden case, many of them at collection, in each test process, and in pure
Python that reading was most of the fast loop's collection time.
"""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import yaml

_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # a PyYAML built without libyaml: the same, slower


def load(text: str | bytes) -> Any:
    """One YAML document, as yaml.safe_load reads it."""
    return yaml.load(text, Loader=_LOADER)


def load_all(text: str | bytes) -> Iterator[Any]:
    """Every YAML document, as yaml.safe_load_all reads them."""
    return yaml.load_all(text, Loader=_LOADER)
