"""The HTTP shell: translates Metacontroller's sync webhook to one call of the pure core and back.

It owns the HTTP status codes, the clock, the request-size limit, the per-sync log line and the
metrics; it decides nothing about jobs. Reading and decoding the body, and what makes a request
malformed before any core runs, live in `hooks.server.wire`. It serves the kinds table it is given
(`hooks.kinds.KINDS` by default) and imports nothing from the cores but that table and
`hooks.shared.errors`.
"""

from __future__ import annotations

import gc
import logging
import os
import secrets
import threading
import time
import traceback
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from flask import Flask, Response, request
from werkzeug.exceptions import HTTPException

from hooks.kinds import KINDS, Kind
from hooks.server.logs import JsonFormatter
from hooks.server.metrics import make_metrics
from hooks.server.wire import MalformedRequest, RequestDecoder, encode, non_finite, read_body
from hooks.shared.errors import InvalidRequest
from hooks.shared.messages import cut

log = logging.getLogger("hooks.server.app")

# The largest sync request we accept (MAX_CONTENT_LENGTH; FLASK_MAX_CONTENT_LENGTH in the env).
# The cluster map lives once per job (in a ConfigMap), so a request grows linearly: about 13 KB per
# replica of a running job (benchmarks/sync_bench.py, docs/benchmarks.md: 13.2 MB at 1,000, 33.0 MB
# at 2,500). The largest admissible job is about 2,500 replicas (its pods' expanded MX_CONFIG must
# fit Linux's 128 KiB per environment string; the core refuses larger ones), so 64 MiB admits it
# with almost twice its size to spare for bigger pod templates and managedFields. Memory stays low
# because the observed children are decoded selectively (docs/benchmarks.md gives the peak).
DEFAULT_MAX_CONTENT_LENGTH = 64 * 1024 * 1024

# Strings from the request that go into a log line are cut to this length (the longest Kubernetes
# name is 253 characters), so a hostile body cannot blow up the logs.
_MAX_LOGGED_STRING = 253

_JSON = "application/json"


# JsonFormatter is re-exported so that a gunicorn config naming hooks.server.app.JsonFormatter keeps
# working; its home is hooks.server.logs.
__all__ = ["DEFAULT_MAX_CONTENT_LENGTH", "JsonFormatter", "SyncAnswer", "create_app"]


@dataclass
class SyncAnswer:
    """What the shell sends back for one sync request, and what it logs and counts about it."""

    status: int
    body: bytes
    # The log line's fields; "outcome" is always set (one of hooks.server.metrics.OUTCOMES).
    fields: dict[str, Any]
    # An unexpected exception (a bug) whose traceback goes into the log line.
    error: BaseException | None = None


def _add_hook_routes(app: Flask, table: Mapping[str, Kind], sync_view: Callable[[str], Response],
                     customize_view: Callable[[str], Response]) -> None:
    """One POST route per sync route and per customize route of each kind; the view gets the kind's name."""
    for name, kind in table.items():
        for route in kind.routes:
            app.add_url_rule(route, endpoint=f"sync:{route}", view_func=sync_view,
                             methods=["POST"], defaults={"kind": name})
        for route in kind.customize_routes:
            app.add_url_rule(route, endpoint=f"customize:{route}", view_func=customize_view,
                             methods=["POST"], defaults={"kind": name})


def create_app(config: Mapping[str, Any] | None = None, *, kinds: Iterable[Kind] = KINDS) -> Flask:
    """The hooks server's Flask app (the tutorial's factory), serving one sync route per route of `kinds`."""
    table = _kinds_by_name(kinds)
    app = Flask(__name__)
    app.config.from_mapping(MAX_CONTENT_LENGTH=DEFAULT_MAX_CONTENT_LENGTH)
    # FLASK_MAX_CONTENT_LENGTH=<bytes> in the Deployment changes the limit without changing the
    # server command (Flask reads FLASK_* variables as JSON values).
    app.config.from_prefixed_env()
    if config is not None:
        app.config.from_mapping(config)
    metrics = make_metrics(table)
    # Each kind's hook settings (CHAINERJOB_KUBECTL_IMAGE...), read once: the core never reads env.
    settings = {name: kind.settings_from(os.environ) for name, kind in table.items()}
    decoders = {name: RequestDecoder(kind.observed_fields) for name, kind in table.items()}

    # One sync at a time per worker process (its threads are there for probes and scrapes): a sync
    # is CPU-bound under the GIL, so a second one at once would end no sooner and double the
    # worker's peak memory, which the Deployment's limit is sized against (deployment.yaml).
    one_sync = threading.Lock()

    def sync_view(kind: str) -> Response:
        """Metacontroller's sync hook for one job kind: one call of that kind's pure core."""
        with one_sync:
            return _timed_sync(kind)

    def _timed_sync(kind: str) -> Response:
        started = time.perf_counter()
        # A sync builds many short-lived objects and no cycles; the cyclic collector would walk
        # them again and again while they are alive (measured: docs/benchmarks.md). Reference
        # counting frees them all the same. The switch is per process: with several threads, the
        # one that turned the collector off turns it back on, so it ends up on in every order.
        gc_was_enabled = gc.isenabled()
        gc.disable()
        try:
            answer = _answer_sync(table[kind], decoders[kind], app.config["MAX_CONTENT_LENGTH"], settings[kind])
        finally:
            if gc_was_enabled:
                gc.enable()
        seconds = time.perf_counter() - started
        metrics.observe(kind, answer.fields["outcome"], seconds)
        answer.fields.update(status=answer.status, duration_ms=round(seconds * 1000, 3))
        _log_sync(answer.fields, answer.error)
        return Response(answer.body, status=answer.status, mimetype=_JSON)

    full_decoder = RequestDecoder(None)

    def customize_view(kind: str) -> Response:
        """Metacontroller's customize hook for one job kind: which related objects its syncs get.
        Not a sync: it is logged (as `customize`) but not counted in the sync metrics."""
        started = time.perf_counter()
        answer = _answer_customize(table[kind], full_decoder, app.config["MAX_CONTENT_LENGTH"],
                                   {name: settings[kind][name] for name in table[kind].customize_settings})
        answer.fields.update(status=answer.status, duration_ms=round((time.perf_counter() - started) * 1000, 3))
        _log_sync(answer.fields, answer.error, hook="customize")
        return Response(answer.body, status=answer.status, mimetype=_JSON)

    _add_hook_routes(app, table, sync_view, customize_view)

    @app.get("/healthz")
    def healthz() -> Response:
        """Liveness: the process answers HTTP."""
        return _json_response(200, {"status": "ok"})

    @app.get("/readyz")
    def readyz() -> Response:
        """Readiness: the server is stateless and needs nothing else, so serving means ready."""
        return _json_response(200, {"status": "ready"})

    @app.get("/metrics")
    def metrics_endpoint() -> Response:
        """Prometheus text exposition."""
        body, content_type = metrics.exposition()
        return Response(body, status=200, content_type=content_type)

    @app.errorhandler(HTTPException)
    def http_error(exc: HTTPException) -> Response:
        """Every other HTTP error (404, 405, ...) as JSON too: clients here all speak JSON."""
        return _json_response(exc.code or 500, {"error": exc.description})

    return app


def _kinds_by_name(kinds: Iterable[Kind]) -> dict[str, Kind]:
    """The kinds table by name; two kinds of one name, or one route served twice, is a wiring bug."""
    table: dict[str, Kind] = {}
    routes: dict[str, str] = {}
    for kind in kinds:
        if kind.name in table:
            raise ValueError(f"two job kinds named {kind.name!r} in the kinds table")
        for route in (*kind.routes, *kind.customize_routes):
            if route in routes:
                raise ValueError(f"route {route!r} is served by both {routes[route]} and {kind.name}")
            routes[route] = kind.name
        table[kind.name] = kind
    return table


def _read_request(decoder: RequestDecoder, limit: int | None, fields: dict[str, Any]) -> dict[str, Any] | SyncAnswer:
    """The current request's decoded body, or the error answer when it is not JSON, too large or malformed."""
    if not request.is_json:
        return _bad_request(fields, "request body must be JSON (Content-Type: application/json), "
                                    f"got {request.mimetype!r}")
    try:
        return decoder.decode(read_body(request.environ, limit))
    except MalformedRequest as exc:
        if exc.status == 413:
            fields.update(outcome="too_large", error=f"request body larger than {limit} bytes")
            return SyncAnswer(413, _dumps({"error": str(exc)}), fields)
        return _bad_request(fields, str(exc), exc.status)


def _answer_sync(kind: Kind, decoder: RequestDecoder, limit: int | None, settings: Mapping[str, str]) -> SyncAnswer:
    """The answer to the current sync request, with its log fields and any unexpected exception."""
    fields: dict[str, Any] = {"kind": kind.name}
    body = _read_request(decoder, limit, fields)
    if isinstance(body, SyncAnswer):
        return body

    fields.update(_job_identity(body))
    # The shell reads the clock so the core stays a pure function of its inputs. Second precision:
    # status timestamps are RFC 3339 seconds, and a sub-second "now" would only add noise.
    now = datetime.now(UTC).replace(microsecond=0)
    try:
        answer = kind.sync(body, now=now, **settings)
    except InvalidRequest as exc:
        return _bad_request(fields, str(exc))
    except Exception as exc:  # a bug in the core: never a 200, or Metacontroller deletes children
        return _internal_error(fields, exc)

    problem = _malformed_answer(answer)
    if problem is not None:
        return _internal_error(fields, RuntimeError(f"the {kind.name} sync returned an unusable answer: {problem}"))
    try:
        payload = _dumps(answer)
    except (TypeError, ValueError) as exc:  # not JSON-serialisable, or NaN/Infinity
        return _internal_error(fields, exc)
    fields.update(outcome="ok", children=len(answer["children"]))
    return SyncAnswer(200, payload, fields)


def _answer_customize(kind: Kind, decoder: RequestDecoder, limit: int | None,
                      settings: Mapping[str, str]) -> SyncAnswer:
    """The answer to the current customize request; errors as for a sync (a non-200 makes
    Metacontroller retry the parent's sync, so a bug must never answer 200 with no rules)."""
    fields: dict[str, Any] = {"kind": kind.name, "hook": "customize"}
    body = _read_request(decoder, limit, fields)
    if isinstance(body, SyncAnswer):
        return body
    fields.update(_job_identity(body))
    assert kind.customize is not None  # only kinds with a customize hook get the route
    try:
        answer = kind.customize(body, **settings)
    except InvalidRequest as exc:
        return _bad_request(fields, str(exc))
    except Exception as exc:  # a bug in the core
        return _internal_error(fields, exc)
    rules = answer.get("relatedResources") if isinstance(answer, dict) else None
    if not isinstance(rules, list) or not all(isinstance(rule, dict) for rule in rules):
        return _internal_error(fields, RuntimeError(
            f"the {kind.name} customize hook returned an unusable answer: 'relatedResources' is not a list of objects"))
    try:
        payload = _dumps(answer)
    except (TypeError, ValueError) as exc:
        return _internal_error(fields, exc)
    fields.update(outcome="ok", related_rules=len(rules))
    return SyncAnswer(200, payload, fields)


def _malformed_answer(answer: object) -> str | None:
    """Why the core's answer must not be sent as a 200, or None if its shape is sound."""
    # A 200 without a children list would make Metacontroller delete every child of the job, and
    # one without status would wipe its status, so a wrong shape is an internal error.
    if not isinstance(answer, dict):
        return f"expected an object, got {type(answer).__name__}"
    if not isinstance(answer.get("children"), list):
        return "'children' is missing or not a list"
    if not isinstance(answer.get("status"), dict):
        return "'status' is missing or not an object"
    if not all(isinstance(child, dict) for child in answer["children"]):
        return "'children' holds something that is not an object"
    # The encoder would write NaN as null; only the core's own numbers (status, resync) can be one,
    # since decoding refuses NaN in the request the children are built from.
    if non_finite(answer["status"]) or non_finite(answer.get("resyncAfterSeconds")):
        return "a number in 'status' or 'resyncAfterSeconds' is NaN or infinite"
    return None


def _bad_request(fields: dict[str, Any], message: str, status: int = 400) -> SyncAnswer:
    """A 4xx answer naming the problem."""
    fields.update(outcome="bad_request", error=cut(message, 500))
    return SyncAnswer(status, _dumps({"error": message}), fields)


def _internal_error(fields: dict[str, Any], exc: BaseException) -> SyncAnswer:
    """A 500 answer whose short id ties the reply to the logged traceback."""
    error_id = secrets.token_hex(4)
    fields.update(outcome="error", errorId=error_id)
    return SyncAnswer(500, _dumps({"error": "internal error", "errorId": error_id}), fields, exc)


def _job_identity(body: Mapping[str, Any]) -> dict[str, Any]:
    """The parent's namespace, name, uid and generation, for logs; only scalars, never objects."""
    parent = body.get("parent")
    metadata = parent.get("metadata") if isinstance(parent, dict) else None
    if not isinstance(metadata, dict):
        return {}
    identity: dict[str, Any] = {}
    for key in ("namespace", "name", "uid"):
        value = metadata.get(key)
        if isinstance(value, str):
            identity[key] = cut(value, _MAX_LOGGED_STRING)
    generation = metadata.get("generation")
    if isinstance(generation, int) and not isinstance(generation, bool):
        identity["generation"] = generation
    return identity


def _log_sync(fields: dict[str, Any], exc: BaseException | None, *, hook: str = "sync") -> None:
    """The one log line of a hook request (with the traceback inside it when there is one)."""
    level = {"ok": logging.INFO, "error": logging.ERROR}.get(fields["outcome"], logging.WARNING)
    if exc is not None:
        fields["traceback"] = "".join(traceback.format_exception(exc))
    log.log(level, "%s %s", hook, fields["outcome"], extra={"fields": fields})


def _dumps(value: object) -> bytes:
    """Compact JSON (UTF-8) that Go's encoding/json accepts."""
    return encode(value)


def _json_response(status: int, value: object) -> Response:
    """A small JSON response."""
    return Response(_dumps(value), status=status, mimetype=_JSON)

