"""The pod template of an MXJob replica spec (a part of hooks.mxjob.spec): every part the hook
reads or adds to is checked, and the mxnet container's mxjob-port found."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hooks.shared.merge import collapsed
from hooks.shared.podtemplate import (
    check_containers,
    check_image,
    check_pod_spec,
    check_template_metadata,
    is_port_number,
)

MAIN_CONTAINER = "mxnet"
PORT_NAME = "mxjob-port"
DEFAULT_PORT = 9091
TUNER_KEY_ANNOTATION = "tuner-server-key"


def check_template(path: str, template: Any, problems: list[str]) -> int:
    """Check every part of the pod template the hook reads or adds to; return the mxjob-port."""
    fix = f'add a container named "{MAIN_CONTAINER}" with the training image'
    if not isinstance(template, Mapping):
        problems.append(f"{path}.template: required; {fix}")
        return DEFAULT_PORT
    check_template_metadata(f"{path}.template.metadata", template.get("metadata"), problems)
    pod_spec = template.get("spec")
    if pod_spec is not None and not isinstance(pod_spec, Mapping):
        problems.append(f"{path}.template.spec: must be an object (a PodSpec)")
        return DEFAULT_PORT
    containers = pod_spec.get("containers") if isinstance(pod_spec, Mapping) else None
    cpath = f"{path}.template.spec.containers"
    if not isinstance(containers, list) or not containers:
        problems.append(f"{cpath}: required, a list of containers; {fix}")
        return DEFAULT_PORT
    names, main = check_containers(cpath, containers, problems, main=MAIN_CONTAINER)
    main_path = f"{cpath}[name={MAIN_CONTAINER}]"
    if isinstance(pod_spec, Mapping):  # it is, as it has containers
        check_pod_spec(f"{path}.template.spec", pod_spec, names, problems)
    if main is None:
        problems.append(f'{cpath}: no container named "{MAIN_CONTAINER}"; {fix}')
        return DEFAULT_PORT
    check_image(f"{main_path}.image", main.get("image"), problems)
    return _mxjob_port(main_path, main.get("ports"), problems)


def _mxjob_port(path: str, ports: Any, problems: list[str]) -> int:
    """The mxjob-port number, and no two ports of the job's Service with one number.

    Metacontroller merges a Service's ports by `port` alone (hooks.shared.merge), so one number on
    two protocols (or twice) would give a Service the API server refuses on every later sync.
    """
    if not isinstance(ports, list):
        return DEFAULT_PORT
    if not all(isinstance(p, Mapping) and is_port_number(p.get("containerPort"))
               and isinstance(p.get("protocol") or "TCP", str) for p in ports):
        return DEFAULT_PORT  # reported by check_ports
    number = next((p["containerPort"] for p in ports if p.get("name") == PORT_NAME), DEFAULT_PORT)
    for index, _, value in collapsed(main_ports(ports, number)):
        first = next(i for i, p in enumerate(ports) if p["containerPort"] == value)
        if index < len(ports):
            problems.append(f"{path}.ports[{index}].containerPort: port {value} is also ports[{first}]; the "
                            f"job's Service can list a number only once (Metacontroller merges its ports by "
                            f"number alone, whatever the protocol), so remove one or use another number")
        else:
            problems.append(f"{path}.ports[{first}].containerPort: {value} is the number of the {PORT_NAME} "
                            f"(TCP) the operator adds; name this port {PORT_NAME} or use another number")
    return number


def main_ports(user_ports: Any, port: int) -> list[dict[str, Any]]:
    """The mxnet container's ports plus mxjob-port, unless it is there by name or by number.

    A user port already on the same number/TCP stays as it is: adding mxjob-port beside it would
    give the Service two ports with one number, which the API server refuses.
    """
    ports: list[dict[str, Any]] = [dict(p) for p in user_ports or []]
    if not any(p.get("name") == PORT_NAME or (p.get("containerPort") == port
                                              and (p.get("protocol") or "TCP") == "TCP")
               for p in ports):
        ports.append({"name": PORT_NAME, "containerPort": port})
    return ports


def tuner_key_of(template: Any, label: Any) -> str:
    annotations: Any = {}
    if isinstance(template, Mapping) and isinstance(template.get("metadata"), Mapping):
        annotations = template["metadata"].get("annotations") or {}
    key = annotations.get(TUNER_KEY_ANNOTATION) if isinstance(annotations, Mapping) else None
    if isinstance(key, str) and key:
        return key
    return label if isinstance(label, str) else ""
