"""A pod template spelt as the API server stores it, so that a child updated in place is a fixed point.

The API server stores what it decoded, encoded again: every resource quantity in its canonical form
(`4` becomes `"4"`, `1000m` becomes `"1"`, `1024Mi` becomes `"1Gi"`, `0.5` becomes `"500m"`), and
without the empty values Go's encoder leaves out (`omitempty`): an empty string, an empty list or a
null in any field of an object, an empty map field (`nodeSelector: {}`), and `false` in the plain
(not pointer) booleans that carry one. Metacontroller merges the hook's answer over the stored
object, so a value the answer spells otherwise makes the merge differ from the stored object at
every sync, and an InPlace child is then updated on every sync: a PUT the server takes as a no-op,
from the 5 requests a second that every job of the cluster shares. The hooks copy a user's pod
template into one InPlace child (a ChainerJob's worker StatefulSet); `pod_template_spec` is how.

What is left as written: a map's entries (a label or annotation may be an empty string), an empty
object in a field that holds a struct (`emptyDir: {}` means something, and `securityContext: {}`
is stored as such), list items, and a value that is not a quantity where one is expected (the API
server refuses it). tests/shared/test_canonical_templates.py checks every rule against the real server.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hooks.shared.jsoncopy import json_copy
from hooks.shared.k8s import JSON
from hooks.shared.quantity import parse_quantity

# Fields whose value is a map (its keys are data, not field names), by field name wherever they occur.
MAP_FIELDS = frozenset({"labels", "annotations", "nodeSelector", "matchLabels", "volumeAttributes", "options",
                        "limits", "requests", "overhead"})
# The maps whose values are quantities (ResourceList), and the scalar quantity fields.
QUANTITY_MAPS = frozenset({"limits", "requests", "overhead"})
QUANTITY_FIELDS = frozenset({"sizeLimit"})
# Plain booleans of a pod spec and a container: `false` is their zero value, left out when encoded.
PLAIN_BOOLEANS = frozenset({"hostNetwork", "hostPID", "hostIPC", "stdin", "stdinOnce", "tty"})
# Plain fields of list items, by the list they are items of: (list, field, its zero value).
PLAIN_ITEM_FIELDS = frozenset({("volumeMounts", "readOnly", False), ("ports", "hostPort", 0)})


def pod_template_spec(spec: Mapping[str, Any]) -> JSON:
    """A pod template's spec as the API server would store it (before adding its defaults); a new object."""
    return _object(json_copy(dict(spec)), "")


def quantity(raw: Any) -> Any:
    """The canonical string of a quantity; anything that is not one is returned unchanged."""
    try:
        return parse_quantity(raw).canonical()
    except ValueError:
        return raw


def _object(obj: Mapping[str, Any], list_name: str) -> JSON:
    out: JSON = {}
    for key, value in obj.items():
        if key in MAP_FIELDS and isinstance(value, Mapping):
            value = {k: quantity(v) for k, v in value.items()} if key in QUANTITY_MAPS else dict(value)
            if not value:
                continue
        elif key in QUANTITY_FIELDS:
            value = quantity(value)
        else:
            value = _value(value, key)
        if value is None or value == "" or value == []:
            continue
        if value is False and key in PLAIN_BOOLEANS:
            continue
        if any(key == field and value == zero and type(value) is type(zero) for name, field, zero in PLAIN_ITEM_FIELDS
               if name == list_name):
            continue
        out[key] = value
    return out


def _value(value: Any, key: str) -> Any:
    if isinstance(value, Mapping):
        return _object(value, "")
    if isinstance(value, list):
        return [_object(item, key) if isinstance(item, Mapping) else item for item in value]
    return value
