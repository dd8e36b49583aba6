"""Reading a manifest as `kubectl apply -f` reads it, so `run` sees the job a cluster would get.

kubectl turns YAML into JSON with sigs.k8s.io/yaml, which parses YAML 1.1 with go-yaml v2, and its
apply then leaves out every field whose value is null. PyYAML parses YAML 1.1 too, but resolves
plain scalars otherwise; this module uses PyYAML's parser with go-yaml v2's resolution (`resolve.go`)
and sigs.k8s.io/yaml's conversion to JSON. tests/localcluster/test_validate.py compares the outcome
with what kubectl sends to a real API server. What differs from `yaml.safe_load`:

- a timestamp (`2001-01-01`) stays the string as written (PyYAML: a date object, which is not JSON);
- `y`, `Y`, `n`, `N` are booleans, as are `yes`, `on`, `true`, ... (PyYAML: the first four are strings);
- an integer may have any Go prefix (`0x1F`, `0o17`, `0b101`, `017` octal) and underscores;
  `190:20:30` is a string (PyYAML: a base-60 integer);
- `1e3` and `08` are floats (PyYAML: strings); a float with an integral value below 1e21 reaches
  the server as an integer (`1.0` as 1), as Go's JSON encoder writes it;
- map keys become strings as sigs.k8s.io/yaml writes them (`1:` as "1", `yes:` as "true", `1.5:`
  as "1.5"); a null key, an integer key above int64, and an infinite or NaN value are errors;
- `kubectl apply` drops every map entry whose value is null, at any depth (list items stay).

`!!str` and quotes keep a scalar a string, as in both parsers; duplicate keys keep the last value.

kubectl also decodes every manifest's metadata as ObjectMeta before it sends anything
(`metadata_error`): a field of the wrong type is refused there, and the server is never asked.
Everything else about the fields of a job (unknown fields, the CRD's defaults) is the API server's
to say, and `run` asks it (`--validate`).
"""

from __future__ import annotations

import math
import re
import struct
from collections.abc import Mapping
from datetime import datetime
from typing import IO, Any

import yaml

PLAIN = "tag:localcluster,2026:plain"  # a plain (unquoted, untagged) scalar, resolved below
MERGE = "tag:yaml.org,2002:merge"

TRUE = {"y", "Y", "yes", "Yes", "YES", "true", "True", "TRUE", "on", "On", "ON"}
FALSE = {"n", "N", "no", "No", "NO", "false", "False", "FALSE", "off", "Off", "OFF"}
NULL = {"", "~", "null", "Null", "NULL"}
SPECIAL_FLOATS = {
    ".nan": math.nan, ".NaN": math.nan, ".NAN": math.nan,
    ".inf": math.inf, ".Inf": math.inf, ".INF": math.inf, "+.inf": math.inf, "+.Inf": math.inf, "+.INF": math.inf,
    "-.inf": -math.inf, "-.Inf": -math.inf, "-.INF": -math.inf,
}
YAML_STYLE_FLOAT = re.compile(r"[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?")
GO_INT = re.compile(r"([-+]?)(0[xX][0-9a-fA-F]+|0[oO][0-7]+|0[bB][01]+|0[0-7]*|[1-9][0-9]*)")
INT64_MAX = 2**63 - 1
UINT64_MAX = 2**64 - 1


class ManifestError(ValueError):
    """The YAML parses, but kubectl could not turn it into JSON."""


class KubectlLoader(yaml.SafeLoader):
    """PyYAML's safe loader with go-yaml v2's resolution of plain scalars."""

    # types-PyYAML leaves BaseResolver.resolve and BaseConstructor.construct_object without hints,
    # so calling them from typed code needs the ignores below (the only untyped calls into yaml).
    def resolve(self, kind: Any, value: Any, implicit: Any) -> Any:
        if kind is yaml.ScalarNode and implicit[0]:
            return MERGE if value == "<<" else PLAIN
        return super().resolve(kind, value, implicit)  # type: ignore[no-untyped-call]

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        """Keys become strings as they are read: `1`, `1.0` and `y` are one key to a Python dict, three to kubectl."""
        self.flatten_mapping(node)
        mapping: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            key = self.construct_object(key_node, deep=deep)  # type: ignore[no-untyped-call]
            where = f"line {key_node.start_mark.line + 1}"
            mapping[map_key(key, where)] = self.construct_object(value_node, deep=deep)  # type: ignore[no-untyped-call]
        return mapping


def _construct_plain(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> Any:
    return resolve_plain(str(loader.construct_scalar(node)))


KubectlLoader.add_constructor(PLAIN, _construct_plain)


def resolve_plain(text: str) -> Any:
    """A plain scalar's value as go-yaml v2 resolves it (`resolve()` in its resolve.go)."""
    if text in TRUE:
        return True
    if text in FALSE:
        return False
    if text in NULL:
        return None
    if text in SPECIAL_FLOATS:
        return SPECIAL_FLOATS[text]
    if text[0] == ".":
        return _go_float(text, text)
    if not (text[0].isdigit() or text[0] in "+-"):
        return text
    if _looks_like_timestamp(text):
        return text  # go-yaml v2 keeps a timestamp decoded into interface{} as its string
    plain = text.replace("_", "")
    match = GO_INT.fullmatch(plain)
    if match:
        sign, digits = match.groups()
        base = {"x": 16, "o": 8, "b": 2}.get(digits[1:2].lower(), 8) if digits.startswith("0") and len(digits) > 1 else 10
        number = int(digits[2:] if base in (16, 2) or digits[1:2] in ("o", "O") else digits, base)
        number = -number if sign == "-" else number
        if -(2**63) <= number <= UINT64_MAX:
            return number
    if YAML_STYLE_FLOAT.fullmatch(plain):
        return _go_float(plain, text)
    return text


def _go_float(text: str, original: str) -> Any:
    try:
        return float(text)
    except ValueError:
        return original


def _looks_like_timestamp(text: str) -> bool:
    """go-yaml v2's quick check before it tries its timestamp layouts: four digits and a dash."""
    return len(text) > 4 and text[:4].isdigit() and text[4] == "-" and _TIMESTAMP.fullmatch(text) is not None


_TIMESTAMP = re.compile(
    r"\d{4}-\d{1,2}-\d{1,2}"
    r"([Tt]\d{1,2}:\d{1,2}:\d{1,2}(\.\d{1,9})?(Z|[+-]\d{2}:\d{2})|[ ]\d{1,2}:\d{1,2}:\d{1,2}(\.\d{1,9})?)?"
)


def load_all(stream: str | IO[str]) -> list[Any]:
    """Every document of a YAML stream, as JSON values the way kubectl converts them (ManifestError if it cannot)."""
    return [to_json(doc) for doc in yaml.load_all(stream, Loader=KubectlLoader)]  # KubectlLoader is a SafeLoader


def to_json(value: Any, path: str = "") -> Any:
    """sigs.k8s.io/yaml's conversion of a parsed YAML value to a JSON value, then Go's JSON encoding of numbers."""
    if isinstance(value, dict):
        return {key: to_json(item, f"{path}.{key}" if path else key) for key, item in value.items()}
    if isinstance(value, list):
        return [to_json(item, f"{path}[{index}]") for index, item in enumerate(value)]
    if isinstance(value, float):
        if math.isinf(value) or math.isnan(value):
            raise ManifestError(f"{path or 'the document'}: {value} is not a JSON number (json: unsupported value)")
        if value.is_integer() and abs(value) < 1e21:
            return int(value)  # Go writes 1.0 as 1, and the server then reads an integer
    if isinstance(value, int) and not isinstance(value, bool) and value > INT64_MAX:
        return float(value)  # a uint64: the server decodes a number above int64 as a float
    return value


def map_key(key: Any, where: str) -> str:
    """A YAML map key as sigs.k8s.io/yaml writes it into JSON (`where` says where it is, for errors)."""
    if isinstance(key, str):
        return key
    if isinstance(key, bool):
        return "true" if key else "false"
    if isinstance(key, int):
        if key > INT64_MAX:
            raise ManifestError(f"{where}: map key {key} is above int64 (unsupported map key of type uint64)")
        return str(key)
    if isinstance(key, float):
        return format_float32(key)
    shapes: dict[type, str] = {list: "a sequence", dict: "a mapping", type(None): "null"}
    shape = shapes.get(type(key), type(key).__name__)
    raise ManifestError(f"{where}: a map key must be a string, a number or a boolean, not {shape} (unsupported map key)")


def format_float32(value: float) -> str:
    """Go's strconv.FormatFloat(value, 'g', -1, 32), with go-yaml's spellings of infinity and NaN."""
    if math.isnan(value):
        return ".nan"
    if math.isinf(value):
        return ".inf" if value > 0 else "-.inf"
    single = struct.unpack("f", struct.pack("f", value))[0]
    for digits in range(1, 10):  # the shortest decimal that reads back as the same float32
        text = f"{single:.{digits - 1}e}"
        if struct.unpack("f", struct.pack("f", float(text)))[0] == single:
            break
    mantissa, exponent_text = text.split("e")
    sign = "-" if mantissa.startswith("-") else ""
    figures = mantissa.lstrip("-").replace(".", "").rstrip("0") or "0"
    exponent = int(exponent_text)
    if exponent < -4 or exponent >= 6:  # %e below 1e-4 and from 1e6 on ('g' at the shortest precision)
        rest = f".{figures[1:]}" if len(figures) > 1 else ""
        return f"{sign}{figures[0]}{rest}e{'-' if exponent < 0 else '+'}{abs(exponent):02d}"
    if exponent < 0:
        return f"{sign}0.{'0' * (-exponent - 1)}{figures}"
    whole, fraction = figures[: exponent + 1].ljust(exponent + 1, "0"), figures[exponent + 1:]
    return f"{sign}{whole}{'.' + fraction if fraction else ''}"


def without_nulls(value: Any) -> Any:
    """value as `kubectl apply` sends it: every map entry whose value is null left out, at any depth."""
    if isinstance(value, dict):
        return {key: without_nulls(item) for key, item in value.items() if item is not None}
    if isinstance(value, list):
        return [without_nulls(item) for item in value]
    return value


# --- ObjectMeta, as kubectl decodes it ----------------------------------------------------------

# metav1.ObjectMeta and the structs in it, as Go's JSON decoder reads them: field -> type, where a
# type is "string", "integer", "boolean", "time" (a metav1.Time: an RFC 3339 string), "any" (raw
# JSON), ("map", type), ("list", type) or a struct (a dict like these).
OWNER_REFERENCE: dict[str, Any] = {
    "apiVersion": "string", "kind": "string", "name": "string", "uid": "string",
    "controller": "boolean", "blockOwnerDeletion": "boolean",
}
MANAGED_FIELDS_ENTRY: dict[str, Any] = {
    "manager": "string", "operation": "string", "apiVersion": "string", "time": "time",
    "fieldsType": "string", "fieldsV1": "any", "subresource": "string",
}
OBJECT_META: dict[str, Any] = {
    "name": "string", "generateName": "string", "namespace": "string", "selfLink": "string", "uid": "string",
    "resourceVersion": "string", "generation": "integer", "creationTimestamp": "time", "deletionTimestamp": "time",
    "deletionGracePeriodSeconds": "integer", "labels": ("map", "string"), "annotations": ("map", "string"),
    "ownerReferences": ("list", OWNER_REFERENCE), "finalizers": ("list", "string"),
    "managedFields": ("list", MANAGED_FIELDS_ENTRY),
}
# Go's time.RFC3339 as metav1.Time parses it (fractional seconds allowed).
RFC3339 = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})")
INT64 = (-(2**63), 2**63 - 1)

FieldPath = tuple[str | int, ...]  # keys and list indexes from the resource's root


def show(path: FieldPath) -> str:
    """A path as the API server writes it in a warning: keys joined by '.', list indexes in brackets."""
    text = ""
    for step in path:
        text += f"[{step}]" if isinstance(step, int) else (f".{step}" if text else str(step))
    return text


def metadata_error(obj: Mapping[str, Any]) -> str | None:
    """Why obj's metadata cannot be decoded as ObjectMeta (a field of the wrong type), or None.

    kubectl decodes every manifest's metadata before it sends anything, and refuses one that does
    not decode ("unable to decode ... cannot unmarshal"), whatever --validate says; like Go's
    decoder, this names the first such field in sorted-key order.
    """
    if "metadata" not in obj:
        return None
    return _meta_error(obj["metadata"], OBJECT_META, ("metadata",))


_JSON_TYPES = {dict: "an object", list: "an array", str: "a string", bool: "a boolean", int: "a number", float: "a number"}


def _meta_error(value: Any, kind: Any, path: FieldPath) -> str | None:
    if value is None:  # JSON null decodes into anything as the zero value
        return None
    if isinstance(kind, dict) or (isinstance(kind, tuple) and kind[0] == "map"):
        return _object_error(value, kind, path)
    if isinstance(kind, tuple):  # a list
        if not isinstance(value, list):
            return f"{show(path)} must be an array, not {_json_type(value)}"
        return next(filter(None, (_meta_error(item, kind[1], (*path, index)) for index, item in enumerate(value))), None)
    return _scalar_error(value, kind, path)


def _json_type(value: Any) -> str:
    return _JSON_TYPES.get(type(value), type(value).__name__)


def _object_error(value: Any, kind: Any, path: FieldPath) -> str | None:
    """A struct (kind a dict of fields) or a map (kind ("map", type)): the first field, by sorted key, that does not decode."""
    if not isinstance(value, Mapping):
        return f"{show(path)} must be an object, not {_json_type(value)}"
    for key in sorted(value):
        sub = kind.get(key) if isinstance(kind, dict) else kind[1]
        if sub is not None and (problem := _meta_error(value[key], sub, (*path, key))):
            return problem
    return None


def _scalar_error(value: Any, kind: str, path: FieldPath) -> str | None:
    where, found = show(path), _json_type(value)
    if kind == "string" and not isinstance(value, str):
        return f"{where} must be a string, not {found}"
    if kind == "boolean" and not isinstance(value, bool):
        return f"{where} must be a boolean, not {found}"
    if kind == "integer" and not (isinstance(value, int | float) and not isinstance(value, bool)
                                  and float(value).is_integer() and INT64[0] <= value <= INT64[1]):
        return f"{where} must be an integer, not {found if not isinstance(value, int | float) else value!r}"
    if kind == "time" and not (isinstance(value, str) and _is_rfc3339(value)):
        return f"{where} must be an RFC 3339 time (2006-01-02T15:04:05Z), not {value!r}"
    return None


def _is_rfc3339(text: str) -> bool:
    if not RFC3339.fullmatch(text):
        return False
    try:
        datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return False
    return True
