"""Checks of the parts of a pod template a hook reads or adds to, whatever the job kind.

The CRDs declare Kubernetes' PodTemplateSpec schema for templates, but a job stored before they did,
or written by a client that skips validation, can still hold anything; so the hook checks, with field
paths, every part it reads or merges into: a wrong type there would otherwise crash the sync (a 500
Metacontroller retries forever) or give a child the API server refuses.
"""
from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

from hooks.shared.merge import collapsed
from hooks.shared.messages import show, type_name
from hooks.shared.validation import DNS_1123_LABEL, MAX_LABEL_LENGTH, is_non_negative_int

PROTOCOLS = ("TCP", "UDP", "SCTP")
A_CONTAINER = "an object (a Container)"
_IANA_SVC_NAME = re.compile(r"^(?=.*[a-z])(?!.*--)[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_DNS_1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_ENV_NAME = re.compile(r"^[\x20-\x3c\x3e-\x7e]+$")  # printable ASCII (the space too) but '=' (Kubernetes 1.30+)
# Where an env entry's valueFrom may take its value: the API server wants exactly one of them.
ENV_SOURCES = ("configMapKeyRef", "fieldRef", "fileKeyRef", "resourceFieldRef", "secretKeyRef")


def optional_map(path: str, value: Any, problems: list[str], *, expected: str) -> Mapping[str, Any]:
    """An optional object field: itself, or {} when absent; {} and a problem (`must be <expected>`)
    when not an object."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        problems.append(f"{path}: must be {expected}")
        return {}
    return value


def optional_list(path: str, value: Any, problems: list[str], *, expected: str) -> list[Any]:
    """An optional list field: itself, or [] when absent; [] and a problem (`must be <expected>`) when not a list."""
    if value is None:
        return []
    if not isinstance(value, list):
        problems.append(f"{path}: must be {expected}")
        return []
    return value


def each_object(path: str, items: list[Any], problems: list[str], *,
                expected: str) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """The entries of a list that are objects, each with its path (`path[i]`); the others are
    reported (`must be <expected>`) in list order, as the iteration reaches them."""
    for i, item in enumerate(items):
        here = f"{path}[{i}]"
        if isinstance(item, Mapping):
            yield here, item
        else:
            problems.append(f"{here}: must be {expected}")


def check_image(path: str, image: Any, problems: list[str]) -> None:
    if not isinstance(image, str) or not image.strip():
        problems.append(f"{path}: must be a non-empty image reference")
    elif image != image.strip():
        problems.append(f"{path}: must not begin or end with white space, got {show(image)}")


def check_template_metadata(path: str, meta: Any, problems: list[str]) -> None:
    meta = optional_map(path, meta, problems, expected="an object with labels and annotations")
    for kind, value_ok, rule in (("labels", _LABEL_VALUE.match, "at most 63 letters, digits, "
                                   "'-', '_' or '.', starting and ending with a letter or digit"),
                                  ("annotations", None, "")):
        entries = optional_map(f"{path}.{kind}", meta.get(kind), problems, expected="a map of strings to strings")
        for key, value in entries.items():
            here = f"{path}.{kind}[{show(key)}]"
            if not is_qualified_key(key):
                problems.append(f"{here}: not a valid {kind[:-1]} key ([prefix/]name, the name at "
                                f"most 63 letters, digits, '-', '_' or '.')")
            elif not isinstance(value, str):
                problems.append(f"{here}: the value must be a string, got {type_name(value)}")
            elif value_ok is not None and (len(value) > 63 or not value_ok(value)):
                problems.append(f"{here}: the value must be {rule}")


def is_qualified_key(key: str) -> bool:
    prefix, _, name = key.rpartition("/")
    if "/" in key and (not prefix or len(prefix) > 253 or not _DNS_1123_SUBDOMAIN.match(prefix)):
        return False
    return 0 < len(name) <= 63 and bool(_QUALIFIED_NAME.match(name))


def check_env(path: str, env: Any, problems: list[str]) -> None:
    env = optional_list(path, env, problems, expected="a list of {name, value} objects")
    for here, entry in each_object(path, env, problems, expected="an object with a name and a value or valueFrom"):
        name = entry.get("name")
        if not isinstance(name, str) or not _ENV_NAME.match(name):
            problems.append(f"{here}.name: must be a non-empty string of printable ASCII characters "
                            f"other than '=', got {show(name)}")
        value, value_from = entry.get("value"), entry.get("valueFrom")
        if value is not None and not isinstance(value, str):
            problems.append(f"{here}.value: must be a string (quote numbers), got {type_name(value)}")
        if value_from is not None and not isinstance(value_from, Mapping):
            problems.append(f"{here}.valueFrom: must be an object")
        elif value_from is not None and value is not None:
            problems.append(f"{here}: give value or valueFrom, not both")
        elif value_from is not None and sum(value_from.get(source) is not None for source in ENV_SOURCES) != 1:
            problems.append(f"{here}.valueFrom: must give exactly one of {', '.join(ENV_SOURCES)}")


def check_ports(path: str, ports: Any, problems: list[str]) -> None:
    ports = optional_list(path, ports, problems, expected="a list of {name, containerPort} objects")
    names: set[str] = set()
    for here, port in each_object(path, ports, problems, expected="an object with a containerPort"):
        if not is_port_number(port.get("containerPort")):
            problems.append(f"{here}.containerPort: must be an integer from 1 to 65535, "
                            f"got {show(port.get('containerPort'))}")
        if port.get("hostPort") is not None and not is_port_number(port["hostPort"]):
            problems.append(f"{here}.hostPort: must be an integer from 1 to 65535")
        protocol = port.get("protocol")
        if protocol is not None and not isinstance(protocol, str):
            problems.append(f"{here}.protocol: must be one of {', '.join(PROTOCOLS)} (a string), "
                            f"got {type_name(protocol)}")
        elif protocol is not None and protocol not in PROTOCOLS:
            problems.append(f"{here}.protocol: {show(protocol)} is not one of {', '.join(PROTOCOLS)}")
        name = port.get("name")
        if name is None:
            continue
        if not isinstance(name, str) or len(name) > 15 or not _IANA_SVC_NAME.match(name):
            problems.append(f"{here}.name: must be at most 15 lower-case letters, digits and '-' "
                            f"with at least one letter (an IANA service name), got {show(name)}")
        elif name in names:
            problems.append(f"{here}.name: {show(name)} names two ports; rename one")
        else:
            names.add(name)


def check_merged_lists(path: str, container: Mapping[str, Any], problems: list[str]) -> None:
    """A container of a template Metacontroller merges (in an InPlace child, hooks.shared.merge): no
    two ports with one containerPort, whatever their protocols, and no two env entries with one name."""
    effects = {"ports": "so the StatefulSet could not be updated again (whatever the protocols)",
               "env": "so later pods would see a changed environment"}
    for field, effect in effects.items():
        items = container.get(field)
        if not isinstance(items, list):
            continue
        for index, key, value in collapsed(items):
            first = next(i for i, item in enumerate(items) if item.get(key) == value)
            problems.append(f"{path}.{field}[{index}].{key}: {show(value)} is also {field}[{first}]'s; "
                            f"Metacontroller merges this list by {key} alone, so both entries would become "
                            f"the last one, {effect}; keep one")


def is_port_number(value: Any) -> bool:
    return is_non_negative_int(value) and 1 <= value <= 65535


# Pod spec fields that hold one name: a hook reads some (schedulerName and priorityClassName under
# gang scheduling), and a wrong type in any would get every pod of the job refused.
_POD_NAME_FIELDS = ("hostname", "subdomain", "nodeName", "schedulerName", "priorityClassName",
                    "serviceAccountName")


def check_pod_spec(path: str, pod_spec: Mapping[str, Any], container_names: list[str], problems: list[str], *,
                   reserved_containers: tuple[str, ...] = (), reserved_volumes: tuple[str, ...] = ()) -> None:
    """The parts of a PodSpec around its containers: name fields, init containers, volumes.

    `container_names` are the names the containers already took; `reserved_*` the names of what the
    operator adds to the pod (a template must not use them).
    """
    for key in _POD_NAME_FIELDS:
        value = pod_spec.get(key)
        # "" is allowed: the API server reads it as unset (Helm charts often write it).
        if value is not None and not isinstance(value, str):
            problems.append(f"{path}.{key}: must be a string (a name), got {show(value)}")
    check_init_containers(f"{path}.initContainers", pod_spec.get("initContainers"), list(container_names),
                          problems, reserved=reserved_containers)
    check_volumes(f"{path}.volumes", pod_spec.get("volumes"), problems, reserved=reserved_volumes)


def check_container_name(path: str, name: Any, taken: list[str], problems: list[str], *,
                         reserved: tuple[str, ...] = ()) -> bool:
    """A DNS label not used by another container of the pod (init containers included)."""
    if not isinstance(name, str) or not DNS_1123_LABEL.match(name) or len(name) > MAX_LABEL_LENGTH:
        problems.append(f"{path}.name: must be lower-case letters, digits and '-' (at most "
                        f"{MAX_LABEL_LENGTH}), got {show(name)}")
        return False
    if name in taken or name in reserved:
        problems.append(f"{path}.name: {show(name)} is used by another container"
                        + (" (one the operator adds)" if name in reserved else "") + "; rename it")
        return False
    return True


def check_containers(path: str, containers: list[Any], problems: list[str], *, reserved: tuple[str, ...] = (),
                     main: str | None = None, unnamed: str | None = None) -> tuple[list[str], Mapping[str, Any] | None]:
    """Walk a pod's containers: each an object with a name no other container uses (nor `reserved`,
    the operator's), an image, env and ports. Returns the names taken, in order, and the container
    named `main`, whose image is left to the caller (it names that container by its role).

    `unnamed`: what to say of a container without a name, which is then not checked further
    (None: the name check reports it like any other bad name).
    """
    names: list[str] = []
    found: Mapping[str, Any] | None = None
    for here, container in each_object(path, containers, problems, expected=A_CONTAINER):
        name = container.get("name")
        if unnamed is not None and not name:
            problems.append(f"{here}.name: {unnamed}")
            continue
        if check_container_name(here, name, names, problems, reserved=reserved):
            names.append(str(name))
        if main is not None and name == main:
            found = container
        else:
            check_image(f"{here}.image", container.get("image"), problems)
        check_env(f"{here}.env", container.get("env"), problems)
        check_ports(f"{here}.ports", container.get("ports"), problems)
    return names, found


def check_init_containers(path: str, init: Any, taken: list[str], problems: list[str], *,
                          reserved: tuple[str, ...] = ()) -> None:
    init = optional_list(path, init, problems, expected="a list of containers")
    for here, container in each_object(path, init, problems, expected=A_CONTAINER):
        if check_container_name(here, container.get("name"), taken, problems, reserved=reserved):
            taken.append(container["name"])
        check_image(f"{here}.image", container.get("image"), problems)
        check_env(f"{here}.env", container.get("env"), problems)


def check_volumes(path: str, volumes: Any, problems: list[str], *, reserved: tuple[str, ...] = ()) -> None:
    volumes = optional_list(path, volumes, problems, expected="a list of volumes")
    seen: set[str] = set()
    for i, volume in enumerate(volumes):
        name = volume.get("name") if isinstance(volume, Mapping) else None
        if not isinstance(volume, Mapping) or not isinstance(name, str) or not name:
            problems.append(f"{path}[{i}]: must be an object with a name")
        elif name in reserved:
            problems.append(f"{path}[{i}].name: {show(name)} is the operator's volume; rename yours")
        elif name in seen:
            problems.append(f"{path}[{i}].name: {show(name)} names two volumes; rename one")
        else:
            seen.add(name)
