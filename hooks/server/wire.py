"""The sync request's bytes in, the answer's bytes out: reading the body, decoding, encoding.

It owns what makes a request malformed before any core sees it (MalformedRequest, a 4xx):
- a body over the size limit, with or without Content-Length (413);
- not JSON, invalid UTF-8, a NaN or Infinity literal (JSON has none), not an object (400);
- nesting deeper than MAX_DEPTH anywhere the hook builds objects from (400);
- observed children of the wrong shape, for a kind that declares what it reads (400).

Speed: a 1,000-replica sync request is about 13 MB, nearly all of it observed children the core
reads a dozen fields of. A kind may declare those fields (`hooks.kinds.OBSERVED_FIELDS`); the
decoder then builds only them and skips the rest without creating a Python object, which costs a
fraction of a full parse. A kind that declares nothing gets the whole request.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, TypedDict

import msgspec

from hooks.shared.messages import type_name
from hooks.shared.request import CheckedChildren

# Deeper than any Kubernetes object: the deepest real paths in a sync request (an affinity term
# inside a pod template inside an MXJob, or a managedFields tree mirroring one) are about 20
# levels. Far below Python's recursion limit (1,000), so no recursive code in the core can hit it.
MAX_DEPTH = 100

_READ_BLOCK = 4 * 1024 * 1024  # gunicorn and werkzeug hand out what they have; ask for a lot


class MalformedRequest(ValueError):
    """The body is not a request any core could read; `status` is the HTTP status to answer."""

    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.status = status


def read_body(environ: Mapping[str, Any], limit: int | None) -> bytes:
    """The whole request body in few large reads, refusing more than `limit` bytes with a 413.

    The limit holds for chunked bodies too: without Content-Length, reading stops one byte past it.
    """
    stream = _unbuffered(environ["wsgi.input"])
    declared = environ.get("CONTENT_LENGTH") or ""
    if declared.isdigit():
        length = int(declared)
        if limit is not None and length > limit:
            raise _too_large(limit)
        return _read_exactly(stream, length)
    if not environ.get("wsgi.input_terminated"):
        # No length and a server that does not mark the end of the body: reading could block, so
        # there is no body (as werkzeug decides too).
        return b""
    parts: list[bytes] = []
    total = 0
    while True:
        wanted = _READ_BLOCK if limit is None else min(_READ_BLOCK, limit + 1 - total)
        chunk = stream.read(wanted)
        if not chunk:
            return b"".join(parts)
        parts.append(chunk)
        total += len(chunk)
        if limit is not None and total > limit:
            raise _too_large(limit)


def _unbuffered(stream: Any) -> Any:
    """gunicorn's body reader itself, when nothing has been read from the body yet.

    gunicorn's `wsgi.input` (gunicorn.http.body.Body) pulls its reader 1 KB at a time whatever size
    is asked for, re-buffering the socket's 8 KB chunks on every pull; its reader (for a
    Content-Length or a chunked body) returns what is asked for in one pass. Measured on a 13 MB
    request: several times faster (docs/benchmarks.md).
    """
    reader = getattr(stream, "reader", None)
    buffered = getattr(stream, "buf", None)
    if callable(getattr(reader, "read", None)) and buffered is not None and buffered.tell() == 0:
        return reader
    return stream


def _read_exactly(stream: Any, length: int) -> bytes:
    parts: list[bytes] = []
    left = length
    while left > 0:
        chunk = stream.read(left)
        if not chunk:
            break  # the client sent less than it declared; the decoder will say what is wrong
        parts.append(chunk)
        left -= len(chunk)
    return parts[0] if len(parts) == 1 else b"".join(parts)


def _too_large(limit: int) -> MalformedRequest:
    return MalformedRequest(f"request body is larger than the limit of {limit} bytes (MAX_CONTENT_LENGTH)", 413)


class RequestDecoder:
    """Decodes one kind's sync requests: fully, or only the declared fields of observed children."""

    def __init__(self, observed_fields: Mapping[str, Any] | None):
        if observed_fields is None:
            self._decoder: msgspec.json.Decoder[Any] = msgspec.json.Decoder()
            self._unbounded: tuple[str, ...] | None = None
            self._fields: Mapping[str, Any] | None = None
        else:
            child = _typed_dict("ObservedChild", observed_fields)
            request = _typed_dict("SyncRequest", {
                "controller": True, "parent": True, "children": dict[str, dict[str, child]],  # type: ignore[valid-type]
                "related": True, "finalizing": True})
            self._decoder = msgspec.json.Decoder(request | list | str | int | float | bool | None)
            # The children's depth is bounded by their declared types; these parts are not.
            self._unbounded = ("controller", "parent", "related", "finalizing")
            self._fields = observed_fields

    def decode(self, raw: bytes) -> dict[str, Any]:
        """The request as plain dicts and lists, or MalformedRequest saying what is wrong and where."""
        try:
            if not raw.isascii():
                # Skipped parts are not checked for UTF-8 by the decoder; JSON must be UTF-8.
                raw.decode("utf-8")
            value = self._decoder.decode(raw)
        except msgspec.ValidationError as exc:  # a declared field of the wrong shape
            raise MalformedRequest(f"request body has the wrong shape: {exc}") from None
        except (msgspec.DecodeError, UnicodeDecodeError) as exc:  # neither quotes the body
            raise MalformedRequest(f"request body is not valid JSON: {exc}") from None
        except RecursionError:
            raise MalformedRequest(f"request body nests deeper than {MAX_DEPTH} levels") from None
        if not isinstance(value, dict):
            raise MalformedRequest(f"request body must be a JSON object, got {type_name(value, json=True)}")
        parts = value.values() if self._unbounded is None else [value.get(k) for k in self._unbounded]
        if any(_too_deep(part, 2) for part in parts):
            raise MalformedRequest(f"request body nests deeper than {MAX_DEPTH} levels, deeper than any "
                                   "Kubernetes object")
        children = value.get("children")
        if self._fields is not None and type(children) is dict:
            # Every declared field of every observed child has been checked for type by the decoder:
            # the core need not walk them again (hooks.shared.request.read_children).
            value["children"] = CheckedChildren(children, self._fields)
        return value


def _typed_dict(name: str, fields: Mapping[str, Any]) -> Any:
    """A TypedDict for a tree of fields: a leaf is True (any value) or the type its value must have,
    a dict is an object of those fields, a one-element list an array of such objects. Absent fields
    stay absent, and fields not named are skipped without being built."""
    members = {field: _field_type(f"{name}_{field}", shape) | None for field, shape in fields.items()}
    return TypedDict(name, members, total=False)  # type: ignore[operator]


def _field_type(name: str, shape: Any) -> Any:
    if shape is True:
        return Any
    if isinstance(shape, list):
        return list[_field_type(name, shape[0])]  # type: ignore[misc]
    if isinstance(shape, Mapping):
        return _typed_dict(name, shape)
    return shape


def _too_deep(value: Any, depth: int = 1) -> bool:
    """Whether any container in the value (itself at `depth`) is nested deeper than MAX_DEPTH."""
    stack = [(value, depth)]
    while stack:
        node, level = stack.pop()
        if level > MAX_DEPTH:
            return True
        kind = type(node)
        if kind is dict:
            stack.extend((v, level + 1) for v in node.values() if type(v) is dict or type(v) is list)
        elif kind is list:
            stack.extend((v, level + 1) for v in node if type(v) is dict or type(v) is list)
    return False


def non_finite(value: Any) -> bool:
    """Whether a float NaN or Infinity is anywhere in the value (JSON has no literal for them)."""
    stack = [value]
    while stack:
        node = stack.pop()
        kind = type(node)
        if kind is float and not math.isfinite(node):
            return True
        if kind is dict:
            stack.extend(node.values())
        elif kind is list:
            stack.extend(node)
    return False


def encode(value: Any) -> bytes:
    """Compact JSON (UTF-8); TypeError or ValueError for what JSON cannot hold."""
    try:
        return msgspec.json.encode(value)
    except msgspec.EncodeError as exc:
        raise ValueError(str(exc)) from None

