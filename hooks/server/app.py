"""The HTTP shell: translates Metacontroller's sync webhook to one call of the pure core and back.

It owns the HTTP status codes, the clock, the request-size limit, the per-sync log line and the
metrics; it decides nothing about MXJobs. It imports nothing from the core but `hooks.mxjob.sync` and
`hooks.shared.errors`.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import time
import traceback
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from flask import Flask, Response, request
from werkzeug.exceptions import HTTPException, RequestEntityTooLarge

import hooks.kinds
from hooks.server.metrics import make_metrics
from hooks.shared.errors import InvalidRequest

log = logging.getLogger("hooks.server.app")

# The largest sync request we accept (MAX_CONTENT_LENGTH; FLASK_MAX_CONTENT_LENGTH in the env).
# Measured with benchmarks/sync_bench.py (docs/benchmarks.md): every observed pod carries MX_CONFIG,
# which lists every replica, twice (env and last-applied annotation), so the request grows with the
# square of the replicas: 2.5 MB at 100, 138 MB at 1,000, 265 MB at 1,400, 3.2 GB at 5,000. Parsing
# takes about 4.7 times the body in memory (650 MB peak at 1,000 replicas), so 256 MiB (jobs up to
# about 1,400 replicas) keeps one worker near 1.2 GB. A larger job gets a 413, which changes
# nothing in the cluster; raise the limit together with the memory limit. Pods of jobs above about
# 2,500 replicas cannot start anyway: their MX_CONFIG passes Linux's 128 KiB limit on one env string.
DEFAULT_MAX_CONTENT_LENGTH = 256 * 1024 * 1024

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

    def sync_view(kind: str) -> Response:
        """Metacontroller's sync hook for one job kind: one call of that kind's pure core."""
        started = time.perf_counter()
        status, payload, fields, exc = _answer_sync(kind, settings.get(kind, {}))
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


def _answer_sync(kind: str, settings: Mapping[str, str]) -> tuple[int, bytes, dict[str, Any], BaseException | None]:
    """The status, body, log fields and any unexpected exception for the current sync request."""
    if not request.is_json:
        return _bad_request(f"request body must be JSON (Content-Type: application/json), got {request.mimetype!r}")
    try:
        raw = request.get_data(cache=False)
    except RequestEntityTooLarge:
        limit = request.max_content_length
        message = f"request body is larger than the limit of {limit} bytes (MAX_CONTENT_LENGTH)"
        too_large = {"outcome": "too_large", "error": f"request body larger than {limit} bytes"}
        return 413, _dumps({"error": message}), too_large, None
    try:
        body = json.loads(raw)
    except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError; neither quotes the body
        return _bad_request(f"request body is not valid JSON: {exc}")
    if not isinstance(body, dict):
        return _bad_request(f"request body must be a JSON object, got {_json_type(body)}")

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
    return None


def _bad_request(message: str) -> tuple[int, bytes, dict[str, Any], None]:
    """A 400 answer with its log fields."""
    return 400, _dumps({"error": message}), {"outcome": "bad_request", "error": message}, None


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
    """Compact JSON that Go's encoding/json accepts (no NaN or Infinity)."""
    # ensure_ascii (the default) keeps a lone surrogate from the request encodable as an escape.
    return json.dumps(value, separators=(",", ":"), allow_nan=False).encode()


def _json_response(status: int, value: object) -> Response:
    """A small JSON response."""
    return Response(_dumps(value), status=status, mimetype=_JSON)


def _json_type(value: object) -> str:
    """The JSON name of a decoded value's type."""
    names = {list: "an array", str: "a string", bool: "a boolean", int: "a number", float: "a number"}
    return "null" if value is None else names.get(type(value), type(value).__name__)


def _cut(text: str, limit: int) -> str:
    """The text, cut to `limit` characters."""
    return text if len(text) <= limit else text[:limit] + "..."
