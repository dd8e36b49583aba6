"""What the API server would refuse in a child we emit: its schema (kubernetes-validate) plus the
semantic rules the schema cannot express (unique port numbers and names, env entry shape)."""
from __future__ import annotations

import kubernetes_validate

KUBERNETES_VERSION = "1.34"


def refusals(obj: dict) -> list[str]:
    """Why the API server would refuse this Pod or Service; [] when it would accept it."""
    try:
        kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
    except kubernetes_validate.ValidationError as exc:
        return [f"schema: {exc.message}"]
    problems: list[str] = []
    spec = obj.get("spec", {})  # a ConfigMap has none
    if obj["kind"] == "Service":
        ports = spec.get("ports", [])
        _unique(problems, "Service port number/protocol",
                [(p["port"], p.get("protocol", "TCP")) for p in ports])
        _unique(problems, "Service port name", [p.get("name") for p in ports])
        if len(ports) > 1 and not all(p.get("name") for p in ports):
            problems.append("a Service with several ports must name each")
    if obj["kind"] == "Pod":
        containers = spec["containers"] + spec.get("initContainers", [])
        _unique(problems, "container name", [c["name"] for c in containers])
        for c in containers:
            _unique(problems, f"port name in {c['name']}",
                    [p["name"] for p in c.get("ports", []) if "name" in p])
            for e in c.get("env", []):
                if "value" in e and "valueFrom" in e:
                    problems.append(f"env {e['name']} in {c['name']} has value and valueFrom")
    return problems


def _unique(problems: list[str], what: str, values: list) -> None:
    seen = set()
    for value in values:
        if value in seen:
            problems.append(f"duplicate {what} {value!r}")
        seen.add(value)
