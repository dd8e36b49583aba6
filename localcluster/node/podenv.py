"""A container's environment as the kubelet builds it: `valueFrom` resolved, `$(NAME)` expanded.

The rules follow the kubelet (pkg/kubelet/kubelet_pods.go and its expansion package), so a pod
spec that relies on them (the MXJob's MX_CONFIG refers to `$(MXJOB_CLUSTER)`, a ConfigMap value)
behaves here as in a cluster:
- entries are resolved in order; a non-empty `value` is expanded with the entries before it
  (never with the host's or the image's variables: `$(HOME)` stays as written), a `valueFrom`
  value is taken as it is, never expanded;
- `$$` is an escaped `$`, `$(NAME)` of a known name is replaced, any other reference is kept as
  written (`$(UNKNOWN)`, an unclosed `$(`, a `$` before another character);
- a missing ConfigMap or key fails the container's start (CreateContainerConfigError) unless the
  reference is `optional`, in which case the entry is left out.
`configMapKeyRef` and `fieldRef` are emulated; other sources (`secretKeyRef`,
`resourceFieldRef`) are left out, as the local cluster has no Secrets or resource accounting.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any


class EnvError(Exception):
    """The container cannot start with this env (the kubelet's CreateContainerConfigError)."""


def expand(value: str, mapping: Mapping[str, str]) -> str:
    """Kubernetes `$(NAME)` expansion, character for character as the kubelet's."""
    out: list[str] = []
    checkpoint = 0
    cursor = 0
    end = len(value)
    while cursor < end:
        if value[cursor] == "$" and cursor + 1 < end:
            out.append(value[checkpoint:cursor])
            following = value[cursor + 1]
            advance = 1
            if following == "$":
                out.append("$")
            elif following == "(":
                close = value.find(")", cursor + 2)
                if close < 0:
                    out.append("$(")  # an unclosed reference stays as written
                else:
                    name = value[cursor + 2:close]
                    out.append(mapping.get(name, f"$({name})"))
                    advance = close - cursor
            else:
                out.append("$" + following)
            cursor += advance
            checkpoint = cursor + 1
        cursor += 1
    out.append(value[checkpoint:])
    return "".join(out)


_LABEL_PATH = re.compile(r"^metadata\.(labels|annotations)\['(.+)'\]$")


def field_value(pod: Mapping[str, Any], path: str, runtime: Mapping[str, str]) -> str:
    """A `fieldRef.fieldPath` of the pod; `runtime` holds what the kubelet knows (status.podIP, ...)."""
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    if path in runtime:
        return runtime[path]
    simple = {
        "metadata.name": meta.get("name"), "metadata.namespace": meta.get("namespace"),
        "metadata.uid": meta.get("uid"), "spec.nodeName": spec.get("nodeName"),
        "spec.serviceAccountName": spec.get("serviceAccountName") or "default",
    }
    if path in simple:
        return str(simple[path] or "")
    match = _LABEL_PATH.match(path)
    if match:
        return str((meta.get(match[1]) or {}).get(match[2], ""))
    raise EnvError(f"unsupported fieldRef.fieldPath {path!r}")


def resolve_env(container: Mapping[str, Any], pod: Mapping[str, Any], *,
                config_map: Callable[[str], Mapping[str, Any] | None],
                runtime: Mapping[str, str], services: Mapping[str, str] | None = None) -> dict[str, str]:
    """The container's env: the `services` variables the kubelet sets (KUBERNETES_SERVICE_HOST, ...)
    then the declared entries, resolved in order; `$(NAME)` sees the services and the entries before it,
    and a declared entry overrides a service variable of its name (as the kubelet's)."""
    declared: dict[str, str] = dict(services or {})
    for var in container.get("env") or []:
        name = var["name"]
        value = var.get("value") or ""
        source = var.get("valueFrom")
        if value:
            declared[name] = expand(value, declared)
        elif source:
            resolved = _value_from(source, pod, config_map, runtime)
            if resolved is not None:
                declared[name] = resolved
        else:
            declared[name] = ""
    return declared


def _value_from(source: Mapping[str, Any], pod: Mapping[str, Any],
                config_map: Callable[[str], Mapping[str, Any] | None], runtime: Mapping[str, str]) -> str | None:
    if "fieldRef" in source:
        return field_value(pod, source["fieldRef"].get("fieldPath", ""), runtime)
    ref = source.get("configMapKeyRef")
    if ref is None:
        return None  # a Secret or a resource field: not emulated, so left out
    name, key, optional = ref.get("name", ""), ref.get("key", ""), bool(ref.get("optional"))
    found = config_map(name)
    namespace = (pod.get("metadata") or {}).get("namespace", "")
    if found is None:
        if optional:
            return None
        raise EnvError(f'configmap "{name}" not found')
    data = found.get("data") or {}
    if key not in data:
        if optional:
            return None
        raise EnvError(f"couldn't find key {key} in ConfigMap {namespace}/{name}")
    return str(data[key])
