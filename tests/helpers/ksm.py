"""What kube-state-metrics serves for a CustomResourceStateMetrics configuration, in Python, for the parts the shipped
monitoring/custom-resource-state.yaml uses: Gauge (path, valueFrom, labelFromKey, labelsFromPath, nilIsZero) and
StateSet (path, valueFrom, labelName, list), resource-level labelsFromPath and metricNamePrefix.

It follows kube-state-metrics v2.20.0, pkg/customresourcestate/registry_factory.go: compilePath (map keys, list
indexes with negative ones from the end, `[key=value]` list lookups), compiledGauge.Values (a map: one series per
key; a list: one per element; else one), compiledGauge.value (an unresolved valueFrom gives 0 under nilIsZero,
else no series), compiledStateSet.values (no series when the path does not resolve), toFloat64 (bools, "true"/
"false"/"unknown" strings, RFC 3339 times as Unix seconds, numbers), and the labels kube-state-metrics adds
(customresource_group, _version, _kind). Anything else in a configuration is refused, so a field this does not
model cannot pass unseen. tests/install/test_monitoring.py compares it with a real kube-state-metrics when one is
built (make monitoring-tools).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Mapping
from datetime import datetime
from typing import Any

Sample = tuple[str, frozenset[tuple[str, str]], float]

GAUGE_KEYS = {"path", "valueFrom", "labelFromKey", "labelsFromPath", "nilIsZero"}
STATESET_KEYS = {"path", "valueFrom", "labelName", "list", "labelsFromPath"}
METRIC_KEYS = {"name", "help", "each"}
RESOURCE_KEYS = {"groupVersionKind", "metricNamePrefix", "labelsFromPath", "metrics"}
_MISSING = object()


def _step(obj: Any, part: str) -> Any:
    """One element of a path (compilePath)."""
    if part.startswith("[") and part.endswith("]"):
        key, _, value = part[1:-1].partition("=")
        if isinstance(obj, list):
            return next((m for m in obj if isinstance(m, dict) and key in m and str(m[key]) == value), None)
        return None
    if isinstance(obj, dict):
        return obj.get(part)
    if isinstance(obj, list) and re.fullmatch(r"-?\d+", part):
        index = int(part) + (len(obj) if int(part) < 0 else 0)
        return obj[index] if 0 <= index < len(obj) else None
    return None


def get(obj: Any, path: list[str]) -> Any:
    for part in path:
        if obj is None:
            return None
        obj = _step(obj, str(part))
    return obj


def to_float(value: Any, nil_is_zero: bool) -> float:
    """toFloat64; ValueError where kube-state-metrics logs an error and emits nothing."""
    if value is None:
        if nil_is_zero:
            return 0.0
        raise ValueError("expected number but found nil value")
    if isinstance(value, bool):
        return 1.0 if value else 0.0
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        if value.lower() in ("true", "yes"):
            return 1.0
        if value.lower() in ("false", "no", "unknown"):
            return 0.0
        if re.fullmatch(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})", value):
            return float(math.floor(datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()))
        return float(value)
    raise ValueError(f"expected number but was {value!r}")


def _path_labels(obj: Any, labels: Mapping[str, list[str]]) -> dict[str, str]:
    found = {}
    for name, path in labels.items():
        if "*" in name:
            raise NotImplementedError(f"labelsFromPath {name!r}: whole-object labels are not modelled")
        value = get(obj, path)
        if value is not None:
            found[name] = _go_string(value)
    return found


def _go_string(value: Any) -> str:
    """fmt.Sprintf("%v", v) for the scalars a status holds."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _gauge(spec: Mapping[str, Any], root: Any) -> Iterator[tuple[dict[str, str], float]]:
    unknown = set(spec) - GAUGE_KEYS
    if unknown:
        raise NotImplementedError(f"gauge fields not modelled: {sorted(unknown)}")
    target = get(root, spec.get("path", []))
    value_from, nil_is_zero = spec.get("valueFrom", []), bool(spec.get("nilIsZero", False))
    each_labels = spec.get("labelsFromPath", {})

    def one(item: Any) -> tuple[dict[str, str], float] | None:
        got = get(item, value_from)
        if got is None:
            return ({}, 0.0) if nil_is_zero else None
        try:
            return {}, to_float(got, nil_is_zero)
        except ValueError:
            return None

    if isinstance(target, dict):
        for key, item in target.items():
            found = one(item)
            if found is None:
                continue
            labels = {spec["labelFromKey"]: key} if spec.get("labelFromKey") and key else {}
            yield {**labels, **_path_labels(item, each_labels), **_path_labels(target, each_labels)}, found[1]
    elif isinstance(target, list):
        for item in target:
            found = one(item)
            if found is not None:
                yield _path_labels(item, each_labels), found[1]
    else:
        found = one(target)
        if found is not None:
            yield _path_labels(target, each_labels), found[1]


def _stateset(spec: Mapping[str, Any], root: Any) -> Iterator[tuple[dict[str, str], float]]:
    unknown = set(spec) - STATESET_KEYS
    if unknown:
        raise NotImplementedError(f"stateSet fields not modelled: {sorted(unknown)}")
    target = get(root, spec.get("path", []))
    for item in target if isinstance(target, list) else [target]:
        value = get(item, spec.get("valueFrom", []))
        if not isinstance(value, str):
            continue  # unresolved: no series; not a string: an error logged, no series
        for entry in spec["list"]:
            yield {spec["labelName"]: entry, **_path_labels(item, spec.get("labelsFromPath", {}))}, 1.0 if value == entry else 0.0


def render(config: Mapping[str, Any], objects: list[Mapping[str, Any]]) -> list[Sample]:
    """Every sample kube-state-metrics serves for `objects` under `config` (objects of other kinds are ignored)."""
    assert config["kind"] == "CustomResourceStateMetrics"
    samples: list[Sample] = []
    for resource in config["spec"]["resources"]:
        unknown = set(resource) - RESOURCE_KEYS
        if unknown:
            raise NotImplementedError(f"resource fields not modelled: {sorted(unknown)}")
        gvk = resource["groupVersionKind"]
        common = {"customresource_group": gvk["group"], "customresource_version": gvk["version"], "customresource_kind": gvk["kind"]}
        prefix = resource.get("metricNamePrefix", "kube_customresource")
        for obj in objects:
            if obj.get("kind") != gvk["kind"] or obj.get("apiVersion") != f"{gvk['group']}/{gvk['version']}":
                continue
            base = {**common, **_path_labels(obj, resource.get("labelsFromPath", {}))}
            for metric in resource["metrics"]:
                if set(metric) - METRIC_KEYS:
                    raise NotImplementedError(f"metric fields not modelled: {sorted(set(metric) - METRIC_KEYS)}")
                each = metric["each"]
                name = f"{prefix}_{metric['name']}" if prefix else metric["name"]
                values = _gauge(each["gauge"], obj) if each["type"] == "Gauge" else _stateset(each["stateSet"], obj) \
                    if each["type"] == "StateSet" else None
                if values is None:
                    raise NotImplementedError(f"metric type {each['type']} is not modelled")
                samples += [(name, frozenset({**base, **labels}.items()), value) for labels, value in values]
    return sorted(samples, key=lambda s: (s[0], sorted(s[1])))


_SAMPLE = re.compile(r'^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>.*)\})? (?P<value>\S+)$')
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse_exposition(text: str, prefix: str = "") -> list[Sample]:
    """The samples of a Prometheus text exposition (kube-state-metrics' /metrics) whose names start with `prefix`."""
    samples: list[Sample] = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        match = _SAMPLE.match(line)
        if match is None:
            raise ValueError(f"not a sample line: {line!r}")
        if not match["name"].startswith(prefix):
            continue
        labels = frozenset((k, v.replace('\\"', '"').replace("\\n", "\n").replace("\\\\", "\\"))
                           for k, v in _LABEL.findall(match["labels"] or ""))
        samples.append((match["name"], labels, float(match["value"])))
    return sorted(samples, key=lambda s: (s[0], sorted(s[1])))
