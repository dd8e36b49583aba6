"""The MXJob CRD as the tests read it: the schema, an OpenAPI validator, the CEL rules; valid objects to edit.

An emulation of what the API server does with a write, checked case by case against a real one
(tests/install/test_apiserver_crd_rules.py), and what it models besides the schema and the rules:
- on an update, ratcheting: an error at a node whose value did not change is not raised
  (`unchanged`, with the API server's notion of "unchanged", which a map without a schema never is);
- CEL rules are not run when the schema check found an error of a blocking kind (`BLOCKING`);
- `refusals` puts it together: what the server would say, [] when it accepts the write.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import celpy
from openapi_schema_validator import OAS30Validator, oas30_format_checker

from helpers import yamlio

ROOT = Path(__file__).resolve().parents[2]
CRD_PATH = ROOT / "crd" / "mxjob-crd.yaml"
CRD = yamlio.load(CRD_PATH.read_text())
VERSION = CRD["spec"]["versions"][0]
SCHEMA = VERSION["schema"]["openAPIV3Schema"]
CHAINERJOB_CRD_PATH = ROOT / "crd" / "chainerjob-crd.yaml"
CHAINERJOB_CRD = yamlio.load(CHAINERJOB_CRD_PATH.read_text())
CHAINERJOB_SCHEMA = CHAINERJOB_CRD["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


# Schema checks whose failure stops the API server from running any CEL rule (hasBlockingErr in
# k8s.io/apiextensions-apiserver's customresource strategy: NotSupported, Required, TooLong, TooMany,
# TypeInvalid); it then adds BLOCKED_NOTE. A bound (minimum, maximum, pattern, minProperties, int32
# and int64 formats) does not block.
BLOCKING = frozenset({"enum", "required", "maxLength", "maxItems", "maxProperties", "type"})
NUMBER_FORMATS = frozenset({"int32", "int64", "float", "double"})
BLOCKED_NOTE = "some validation rules were not checked because the object was invalid"


def _blocks(err: Any) -> bool:
    if err.validator == "format":
        return err.validator_value not in NUMBER_FORMATS  # date-time: TypeInvalid
    return err.validator in BLOCKING


def schema_problems(obj: Any, schema: dict = SCHEMA, *, old: Any = None) -> list[tuple[str, bool]]:
    """(message, blocking) per schema error; on an update (old given), errors at unchanged nodes ratchet."""
    validator = OAS30Validator(schema, format_checker=oas30_format_checker)
    return [
        (f"{'.'.join(str(p) for p in err.absolute_path) or '<root>'}: {err.message}", _blocks(err))
        for err in validator.iter_errors(obj)
        if old is None or not ratchets(obj, old, schema, tuple(err.absolute_path))
    ]


def schema_errors(obj: Any, schema: dict = SCHEMA, *, old: Any = None) -> list[str]:
    return [message for message, _ in schema_problems(obj, schema, old=old)]


def _child_schema(schema: dict, key: str | int) -> dict | None:
    """The schema the API server correlates a child by: a declared property or additionalProperties."""
    if isinstance(key, int):
        return None  # a list without x-kubernetes-list-type map or set is atomic: its items are not correlated
    if key in schema.get("properties", {}):
        return schema["properties"][key]
    extra = schema.get("additionalProperties")
    return extra if isinstance(extra, dict) else None


def unchanged(new: Any, old: Any, schema: dict) -> bool:
    """The API server's ratcheting equality (CorrelatedObject.CachedDeepEqual in k8s.io/apiserver).

    Lists compare whole. A map compares key by key, each key through the schema of its value: a key
    its schema neither declares nor covers by additionalProperties cannot be correlated, and makes
    the map count as changed even when it is equal, so a non-empty map under a plain
    x-kubernetes-preserve-unknown-fields node never ratchets.
    """
    if isinstance(new, dict) and isinstance(old, dict):
        if len(new) != len(old):
            return False
        for key, value in new.items():
            sub = _child_schema(schema, key)
            if key not in old or sub is None or not unchanged(value, old[key], sub):
                return False
        return True
    if isinstance(new, dict) or isinstance(old, dict):
        return False
    return type(new) is type(old) and new == old


def ratchets(new: Any, old: Any, schema: dict, where: tuple) -> bool:
    """Whether an error at `where` is ratcheted: a correlatable node on the way to it is unchanged."""
    node_new, node_old, node_schema = new, old, schema
    for step in (*where, None):
        if unchanged(node_new, node_old, node_schema):
            return True
        if step is None:
            return False
        sub = _child_schema(node_schema, step)
        if sub is None or not isinstance(node_new, dict) or not isinstance(node_old, dict) or step not in node_old:
            return False  # not correlatable below here
        node_new, node_old, node_schema = node_new.get(step), node_old[step], sub
    return False


def pruned_paths(obj: Any, schema: dict, path: str = "") -> list[str]:
    """Fields of obj that the API server would silently drop because the schema lacks them."""
    if schema.get("x-kubernetes-preserve-unknown-fields"):
        return []
    if isinstance(obj, dict) and schema.get("type") == "object":
        props = schema.get("properties")
        extra = schema.get("additionalProperties")
        if props is None and not isinstance(extra, dict):
            return []  # metadata: the API server has its own schema for it
        found = []
        for key, value in obj.items():
            sub = (props or {}).get(key, extra if isinstance(extra, dict) else None)
            if sub is None:
                found.append(f"{path}.{key}".lstrip("."))
            else:
                found.extend(pruned_paths(value, sub, f"{path}.{key}"))
        return found
    if isinstance(obj, list) and "items" in schema:
        found = []
        for i, item in enumerate(obj):
            found.extend(pruned_paths(item, schema["items"], f"{path}[{i}]"))
        return found
    return []


def lower_ascii(text: celpy.celtypes.StringType) -> celpy.celtypes.StringType:
    """Kubernetes' lowerAscii() (cel-go strings extension), which cel-python lacks."""
    return celpy.celtypes.StringType(
        "".join(chr(ord(c) + 32) if "A" <= c <= "Z" else c for c in text)
    )


CEL_ENV = celpy.Environment()


class Rule:
    def __init__(self, path: tuple[str, ...], rule: dict):
        self.path = path
        self.source = rule["rule"]
        self.message = rule["message"]
        self.is_transition = "oldSelf" in self.source
        self.program = CEL_ENV.program(
            CEL_ENV.compile(self.source), functions={"lowerAscii": lower_ascii}
        )

    def holds(self, value: Any, old: Any = None) -> bool:
        activation = {"self": celpy.json_to_cel(value)}
        if self.is_transition:
            activation["oldSelf"] = celpy.json_to_cel(old)
        result = self.program.evaluate(activation)
        # An evaluation error fails the request in the API server, so it fails here too.
        return isinstance(result, celpy.celtypes.BoolType) and bool(result)

    def __repr__(self) -> str:
        return f"Rule({'.'.join(self.path)}: {self.source})"


def collect_rules(schema: dict, path: tuple[str, ...] = ()) -> Iterator[Rule]:
    for rule in schema.get("x-kubernetes-validations", []):
        yield Rule(path, rule)
    for name, sub in schema.get("properties", {}).items():
        yield from collect_rules(sub, path + (name,))
    if isinstance(schema.get("additionalProperties"), dict):
        yield from collect_rules(schema["additionalProperties"], path + ("*",))
    if "items" in schema:
        yield from collect_rules(schema["items"], path + ("[]",))


RULES = list(collect_rules(SCHEMA))


def nodes_at(obj: Any, path: tuple[str, ...], where: tuple = ()) -> Iterator[tuple[tuple, Any]]:
    """(concrete path, value) for every value the schema path matches in obj."""
    if not path:
        yield where, obj
        return
    head, rest = path[0], path[1:]
    if head == "*" and isinstance(obj, dict):
        for key, value in obj.items():
            yield from nodes_at(value, rest, where + (key,))
    elif head == "[]" and isinstance(obj, list):
        for i, value in enumerate(obj):
            yield from nodes_at(value, rest, where + (i,))
    elif isinstance(obj, dict) and head in obj:
        yield from nodes_at(obj[head], rest, where + (head,))


def lookup(obj: Any, where: tuple) -> tuple[bool, Any]:
    for step in where:
        if isinstance(obj, dict) and step in obj:
            obj = obj[step]
        else:
            return False, None
    return True, obj


def broken_rules(obj: dict, old: dict | None = None, *, rules: list[Rule] | None = None, schema: dict = SCHEMA) -> list[Rule]:
    """The rules the API server would reject obj for (old: the stored object on an update).

    A transition rule runs only on an update, where the old value exists. A rule without oldSelf
    ratchets on an update: its error is dropped (the API server makes it a warning) when its node is
    unchanged (`ratchets`).
    """
    broken = []
    for rule in RULES if rules is None else rules:
        for where, value in nodes_at(obj, rule.path):
            if rule.is_transition:
                if old is None:
                    continue
                found, old_value = lookup(old, where)
                if not found:
                    continue  # transition rules only run when the old value exists
                if not rule.holds(value, old_value):
                    broken.append(rule)
            elif not rule.holds(value) and not (old is not None and ratchets(obj, old, schema, where)):
                broken.append(rule)
    return broken


def refusals(obj: dict, old: dict | None = None, *, schema: dict = SCHEMA, rules: list[Rule] | None = None) -> list[str]:
    """What the API server would answer to a create (old None) or an update of obj: [] when it accepts.

    The schema's errors, then either the note that the rules were not run (after a blocking schema
    error, when the CRD has rules: without any the API server has no rule validator to skip) or the
    message of every broken rule.
    """
    rules = RULES if rules is None else rules
    problems = schema_problems(obj, schema, old=old)
    found = [message for message, _ in problems]
    if rules and any(blocking for _, blocking in problems):
        return [*found, BLOCKED_NOTE]
    return found + [r.message for r in broken_rules(obj, old, rules=rules, schema=schema)]


def status_refusals(obj: dict, old: dict, *, schema: dict = SCHEMA) -> list[str]:
    """What the API server would answer to a write of obj's status through the status subresource:
    the status is checked against its schema (ratcheting), and every rule runs on the whole object
    (so a spec that breaks a rule refuses the status write, unless its node ratchets)."""
    problems = [(m, b) for m, b in schema_problems(obj, schema, old=old) if m.startswith("status")]
    if any(blocking for _, blocking in problems):
        return [*(m for m, _ in problems), BLOCKED_NOTE]
    return [m for m, _ in problems] + [r.message for r in broken_rules(obj, old, schema=schema)]


def mxnet(image: str = "mxjob/mxnet:1.9.1") -> dict:
    return {"spec": {"containers": [{"name": "mxnet", "image": image}]}}


def mxjob(replica_specs: dict, **spec_fields: Any) -> dict:
    """An MXJob; replica_specs maps type -> replicas (None: leave replicas out)."""
    specs = {}
    for rtype, replicas in replica_specs.items():
        specs[rtype] = {"template": mxnet()}
        if replicas is not None:
            specs[rtype]["replicas"] = replicas
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "MXJob",
        "metadata": {"name": "job"},
        "spec": {**spec_fields, "mxReplicaSpecs": specs},
    }


def keys_anywhere(node: Any, key: str) -> list[str]:
    if isinstance(node, dict):
        here = [key] if key in node else []
        return here + [k for v in node.values() for k in keys_anywhere(v, key)]
    if isinstance(node, list):
        return [k for v in node for k in keys_anywhere(v, key)]
    return []


def untyped_nodes(schema: dict, path: str = "") -> list[str]:
    """Nodes a structural schema must give a type: all but int-or-string and preserve-unknown-fields ones."""
    exempt = schema.get("x-kubernetes-int-or-string") or schema.get("x-kubernetes-preserve-unknown-fields")
    found = [] if "type" in schema or exempt else [path]
    for name, sub in schema.get("properties", {}).items():
        found += untyped_nodes(sub, f"{path}.{name}")
    if isinstance(schema.get("additionalProperties"), dict):
        found += untyped_nodes(schema["additionalProperties"], f"{path}.*")
    if "items" in schema:
        found += untyped_nodes(schema["items"], f"{path}[]")
    return found


def with_field(obj: dict, dotted: str, value: Any) -> dict:
    obj = copy.deepcopy(obj)
    *parents, last = dotted.split(".")
    node = obj
    for part in parents:
        node = node.setdefault(part, {})
    node[last] = value
    return obj


VALID = mxjob({"Scheduler": 1, "Server": 2, "Worker": 2})
