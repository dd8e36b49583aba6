"""The HTTP shell: translates Metacontroller's sync webhook to one call of the pure core and back.

It owns the HTTP status codes, the clock, the request-size limit, the per-sync log line and the
metrics; it decides nothing about MXJobs. Reading and decoding the body, and what makes a request
malformed before any core runs, live in `hooks.server.wire`. It imports nothing from the cores but
the table in `hooks.kinds` and `hooks.shared.errors`.
"""

from __future__ import annotations

import gc
import json
import logging
import os
import secrets
import threading
import time
import traceback
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from flask import Flask, Response, request
from werkzeug.exceptions import HTTPException

import hooks.kinds
from hooks.server.metrics import make_metrics
from hooks.server.wire import MalformedRequest, RequestDecoder, encode, non_finite, read_body
from hooks.shared.errors import InvalidRequest

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


def create_app(config: Mapping[str, Any] | None = None) -> Flask:
    """The hooks server's Flask app (the tutorial's factory)."""
    app = Flask(__name__)
    app.config.from_mapping(MAX_CONTENT_LENGTH=DEFAULT_MAX_CONTENT_LENGTH)
    # FLASK_MAX_CONTENT_LENGTH=<bytes> in the Deployment changes the limit without changing the
    # server command (Flask reads FLASK_* variables as JSON values).
    app.config.from_prefixed_env()
    if config is not None:
        app.config.from_mapping(config)
    metrics = make_metrics()
    # Each kind's hook settings (CHAINERJOB_KUBECTL_IMAGE...), read once: the core never reads env.
    settings = hooks.kinds.settings_from(os.environ)
    decoders = {kind: RequestDecoder(hooks.kinds.OBSERVED_FIELDS.get(kind)) for kind in hooks.kinds.ROUTES}

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
            status, payload, fields, exc = _answer_sync(kind, decoders[kind], app.config["MAX_CONTENT_LENGTH"],
                                                          settings.get(kind, {}))
        finally:
            if gc_was_enabled:
                gc.enable()
        seconds = time.perf_counter() - started
        metrics.observe(fields["outcome"], seconds)
        fields.update(status=status, duration_ms=round(seconds * 1000, 3))
        _log_sync(fields, exc)
        return Response(payload, status=status, mimetype=_JSON)

    for kind, routes in hooks.kinds.ROUTES.items():
        for route in routes:
            app.add_url_rule(route, endpoint=f"sync:{route}", view_func=sync_view,
                             methods=["POST"], defaults={"kind": kind})

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


def _answer_sync(kind: str, decoder: RequestDecoder, limit: int | None,
                 settings: Mapping[str, str]) -> tuple[int, bytes, dict[str, Any], BaseException | None]:
    """The status, body, log fields and any unexpected exception for the current sync request."""
    if not request.is_json:
        return _bad_request(f"request body must be JSON (Content-Type: application/json), got {request.mimetype!r}")
    try:
        body = decoder.decode(read_body(request.environ, limit))
    except MalformedRequest as exc:
        if exc.status == 413:
            too_large = {"outcome": "too_large", "error": f"request body larger than {limit} bytes"}
            return 413, _dumps({"error": str(exc)}), too_large, None
        return _bad_request(str(exc), exc.status)

    fields: dict[str, Any] = {"kind": kind, **_job_identity(body)}
    # The shell reads the clock so the core stays a pure function of its inputs. Second precision:
    # status timestamps are RFC 3339 seconds, and a sub-second "now" would only add noise.
    now = datetime.now(UTC).replace(microsecond=0)
    try:
        answer = hooks.kinds.SYNC[kind](body, now=now, **settings)
    except InvalidRequest as exc:
        fields.update(outcome="bad_request", error=_cut(str(exc), 500))
        return 400, _dumps({"error": str(exc)}), fields, None
    except Exception as exc:  # a bug in the core: never a 200, or Metacontroller deletes children
        return _internal_error(fields, exc)

    problem = _malformed_answer(answer)
    if problem is not None:
        return _internal_error(fields, RuntimeError(f"the {kind} sync returned an unusable answer: {problem}"))
    try:
        payload = _dumps(answer)
    except (TypeError, ValueError) as exc:  # not JSON-serialisable, or NaN/Infinity
        return _internal_error(fields, exc)
    fields.update(outcome="ok", children=len(answer["children"]))
    return 200, payload, fields, None


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


def _bad_request(message: str, status: int = 400) -> tuple[int, bytes, dict[str, Any], None]:
    """A 4xx answer with its log fields."""
    return status, _dumps({"error": message}), {"outcome": "bad_request", "error": _cut(message, 500)}, None


def _internal_error(fields: dict[str, Any], exc: BaseException) -> tuple[int, bytes, dict[str, Any], BaseException]:
    """A 500 answer whose short id ties the reply to the logged traceback."""
    error_id = secrets.token_hex(4)
    fields.update(outcome="error", errorId=error_id)
    return 500, _dumps({"error": "internal error", "errorId": error_id}), fields, exc


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
            identity[key] = _cut(value, _MAX_LOGGED_STRING)
    generation = metadata.get("generation")
    if isinstance(generation, int) and not isinstance(generation, bool):
        identity["generation"] = generation
    return identity


def _log_sync(fields: dict[str, Any], exc: BaseException | None) -> None:
    """The one log line of a sync request (with the traceback inside it when there is one)."""
    level = {"ok": logging.INFO, "error": logging.ERROR}.get(fields["outcome"], logging.WARNING)
    if exc is not None:
        fields["traceback"] = "".join(traceback.format_exception(exc))
    log.log(level, "sync %s", fields["outcome"], extra={"fields": fields})


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message and the record's `fields`."""

    def format(self, record: logging.LogRecord) -> str:
        """The record as one line of compact JSON."""
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds")[:-6] + "Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        fields = getattr(record, "fields", None)
        if isinstance(fields, Mapping):
            entry.update(fields)
        if record.exc_info and "traceback" not in entry:
            entry["traceback"] = self.formatException(record.exc_info)
        # default=str: a log line must never fail because of an odd value.
        return json.dumps(entry, separators=(",", ":"), default=str)


def _dumps(value: object) -> bytes:
    """Compact JSON (UTF-8) that Go's encoding/json accepts."""
    return encode(value)


def _json_response(status: int, value: object) -> Response:
    """A small JSON response."""
    return Response(_dumps(value), status=status, mimetype=_JSON)


def _cut(text: str, limit: int) -> str:
    """The text, cut to `limit` characters."""
    return text if len(text) <= limit else text[:limit] + "..."
