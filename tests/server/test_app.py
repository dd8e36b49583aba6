"""The HTTP shell (hooks/server/app.py) through Flask's test client: status codes, limits, logs, metrics."""

from __future__ import annotations

import ast
import json
import logging
import math
import pathlib
import re
import subprocess
import sys
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from helpers.requests import mxjob_sync_request
from prometheus_client.parser import text_string_to_metric_families

import hooks.shared.errors
from hooks.kinds import CHAINERJOB, KINDS, MXJOB, Kind
from hooks.server.app import DEFAULT_MAX_CONTENT_LENGTH, create_app
from hooks.server.logs import JsonFormatter

REPO = pathlib.Path(__file__).resolve().parents[2]
SECRET = "s3cr3t-token-do-not-log"
IMAGE = "registry.example/private/mxnet-train:do-not-log"


def sync_request(name: str = "digits", namespace: str = "team-a") -> dict:
    """A small but complete Metacontroller sync request for an MXJob with a secret in its env."""
    template = {
        "spec": {
            "containers": [
                {
                    "name": "mxnet",
                    "image": IMAGE,
                    "command": ["python", "train.py", "--opaque-arg-do-not-log"],
                    "env": [{"name": "API_TOKEN", "value": SECRET}],
                }
            ]
        }
    }
    return mxjob_sync_request({
        "apiVersion": "kubeflow.org/v1",
        "kind": "MXJob",
        "metadata": {"name": name, "namespace": namespace, "uid": "0f1e2d3c-aaaa-bbbb-cccc-123456789abc",
                     "generation": 3},
        "spec": {"jobMode": "MXTrain",
                 "mxReplicaSpecs": {"Worker": {"replicas": 1, "restartPolicy": "Never", "template": template}}},
    })


class FakeCore:
    """Stands in for hooks.mxjob.sync.sync_mxjob: records its calls and answers or raises as told."""

    def __init__(self, answer=None, raises: BaseException | None = None):
        self.answer = {"status": {"conditions": []}, "children": [{"kind": "Pod"}]} if answer is None else answer
        self.raises = raises
        self.calls: list[tuple[dict, datetime]] = []

    def __call__(self, request, *, now, **settings):  # settings: the MXJob kind's (MXJOB_KUEUE_POD_GROUPS)
        self.calls.append((request, now))
        if self.raises is not None:
            raise self.raises
        return self.answer


@pytest.fixture
def client():
    return create_app().test_client()


def with_mxjob_core(core) -> tuple[Kind, ...]:
    """The real kinds table with `core` standing in for the MXJob one."""
    return tuple(replace(kind, sync=core) if kind is MXJOB else kind for kind in KINDS)


def faked(config=None, **kwargs):
    """A test client whose MXJob core is a FakeCore (made with kwargs), and that core."""
    core = FakeCore(**kwargs)
    return create_app(config, kinds=with_mxjob_core(core)).test_client(), core


def post_json(client, value, **kwargs):
    return client.post("/sync", data=json.dumps(value), content_type="application/json", **kwargs)


def sync_records(caplog) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "hooks.server.app"]


def logged(caplog) -> list[dict]:
    """The app's log lines as the JSON the server writes."""
    lines = [JsonFormatter().format(r) for r in sync_records(caplog)]
    assert all("\n" not in line for line in lines)
    return [json.loads(line) for line in lines]


def metric_samples(client) -> dict[tuple[str, tuple], float]:
    response = client.get("/metrics")
    assert response.status_code == 200
    assert response.mimetype == "text/plain"
    samples = {}
    for family in text_string_to_metric_families(response.get_data(as_text=True)):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


# --- 400: not a sync request -------------------------------------------------------------------

@pytest.mark.parametrize(
    ("content_type", "data", "expected"),
    [
        pytest.param("text/plain", b'{"parent": {}}', "Content-Type: application/json", id="text-plain"),
        pytest.param(None, b'{"parent": {}}', "Content-Type: application/json", id="no-content-type"),
        pytest.param("application/x-www-form-urlencoded", b"a=b", "Content-Type: application/json", id="form"),
        pytest.param("application/json", b'{"parent": ', "not valid JSON", id="truncated-json"),
        pytest.param("application/json", b"", "not valid JSON", id="empty-body"),
        pytest.param("application/json", b'{"a": "\xff"}', "not valid JSON", id="invalid-utf8"),
    ],
)
def test_a_body_that_is_not_json_is_a_400_naming_the_problem(content_type, data, expected):
    client, core = faked()
    response = client.post("/sync", data=data, content_type=content_type)
    assert response.status_code == 400
    assert response.mimetype == "application/json"
    assert expected in response.get_json()["error"]
    assert core.calls == []


@pytest.mark.parametrize(
    ("body", "type_name"),
    [
        pytest.param("[]", "an array", id="array"),
        pytest.param("null", "null", id="null"),
        pytest.param('"sync"', "a string", id="string"),
        pytest.param("42", "a number", id="number"),
        pytest.param("true", "a boolean", id="boolean"),
    ],
)
def test_json_that_is_not_an_object_is_a_400(body, type_name):
    client, core = faked()
    response = client.post("/sync", data=body, content_type="application/json")
    assert response.status_code == 400
    assert response.get_json() == {"error": f"request body must be a JSON object, got {type_name}"}
    assert core.calls == []


def test_a_body_the_core_rejects_is_a_400_with_the_core_message():
    client, _ = faked(raises=hooks.shared.errors.InvalidRequest("parent.kind must be MXJob, got 'Deployment'"))
    response = post_json(client, sync_request())
    assert response.status_code == 400
    assert response.get_json() == {"error": "parent.kind must be MXJob, got 'Deployment'"}


@pytest.mark.parametrize(
    "body",
    [
        pytest.param({}, id="empty-object"),
        pytest.param({"parent": "digits", "children": {}}, id="parent-not-an-object"),
        pytest.param({"parent": {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"}},
                      "children": {}}, id="parent-not-an-mxjob"),
    ],
)
def test_the_real_core_rejects_a_malformed_body_with_a_400(client, body):
    response = post_json(client, body)
    assert response.status_code == 400
    error = response.get_json()["error"]
    assert isinstance(error, str) and error


# --- 413: too large ----------------------------------------------------------------------------

def test_a_body_above_the_configured_limit_is_a_413_and_one_below_it_is_served():
    client, core = faked({"MAX_CONTENT_LENGTH": 4096})
    small = sync_request()
    large = sync_request() | {"padding": "x" * 4096}
    assert len(json.dumps(small)) < 4096

    assert post_json(client, small).status_code == 200
    response = post_json(client, large)
    assert response.status_code == 413
    assert response.mimetype == "application/json"
    assert response.get_json() == {
        "error": "request body is larger than the limit of 4096 bytes (MAX_CONTENT_LENGTH)"}
    assert len(core.calls) == 1


@pytest.mark.parametrize(
    ("env", "config", "limit"),
    [
        pytest.param(None, None, DEFAULT_MAX_CONTENT_LENGTH, id="default"),
        pytest.param("1048576", None, 1048576, id="from-env"),
        pytest.param("1048576", {"MAX_CONTENT_LENGTH": 10}, 10, id="config-beats-env"),
    ],
)
def test_the_size_limit_comes_from_config_then_env_then_default(monkeypatch, env, config, limit):
    monkeypatch.delenv("FLASK_MAX_CONTENT_LENGTH", raising=False)
    if env is not None:
        monkeypatch.setenv("FLASK_MAX_CONTENT_LENGTH", env)
    assert create_app(config).config["MAX_CONTENT_LENGTH"] == limit


# --- 500: a bug in the core is never a 200 -----------------------------------------------------

def test_an_exception_in_the_core_is_a_500_whose_error_id_is_in_the_log(caplog):
    caplog.set_level(logging.INFO, logger="hooks.server.app")
    client, _ = faked(raises=KeyError("replicaSpecs-internal-detail"))
    response = post_json(client, sync_request())

    assert response.status_code == 500
    body = response.get_json()
    assert set(body) == {"error", "errorId"}
    assert body["error"] == "internal error"
    assert re.fullmatch(r"[0-9a-f]{8}", body["errorId"])
    assert b"replicaSpecs-internal-detail" not in response.data  # details go to the log only

    [line] = logged(caplog)
    assert line["errorId"] == body["errorId"]
    assert line["level"] == "error"
    assert "KeyError" in line["traceback"] and "replicaSpecs-internal-detail" in line["traceback"]


def test_each_internal_error_gets_its_own_id():
    client, _ = faked(raises=RuntimeError("boom"))
    ids = {post_json(client, sync_request()).get_json()["errorId"] for _ in range(5)}
    assert len(ids) == 5


@pytest.mark.parametrize(
    "answer",
    [
        pytest.param({}, id="empty-object"),
        pytest.param({"status": {}}, id="no-children"),
        pytest.param({"children": []}, id="no-status"),
        pytest.param({"status": {}, "children": None}, id="children-null"),
        pytest.param({"status": {}, "children": {}}, id="children-an-object"),
        pytest.param({"status": [], "children": []}, id="status-a-list"),
        pytest.param({"status": {}, "children": ["digits-worker-0"]}, id="child-not-an-object"),
        pytest.param([], id="a-list"),
        pytest.param("ok", id="a-string"),
        pytest.param({"status": {"x": math.nan}, "children": []}, id="nan"),
        pytest.param({"status": {}, "children": [], "resyncAfterSeconds": math.inf}, id="infinite-resync"),
        pytest.param({"status": {"startTime": object()}, "children": []}, id="not-json-serialisable"),
    ],
)
def test_an_unusable_answer_from_the_core_is_a_500_not_a_200(answer):
    # Metacontroller deletes every child missing from a 200 answer: a wrong shape must never pass.
    client, _ = faked(answer=answer)
    response = post_json(client, sync_request())
    assert response.status_code == 500
    assert response.get_json()["error"] == "internal error"
    assert "errorId" in response.get_json()


# --- 200: pass-through -------------------------------------------------------------------------

def test_the_core_answer_is_passed_through_unchanged_as_compact_json():
    answer = {
        "status": {"conditions": [{"type": "Created", "status": "True", "message": "MXJob digits is créé"}],
                   "replicaStatuses": {"Worker": {"active": 0}}},
        "children": [{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "digits-worker-0"}},
                     {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "digits-worker-0"}}],
        "resyncAfterSeconds": 12.5,
    }
    client, _ = faked(answer=answer)
    response = post_json(client, sync_request())
    assert response.status_code == 200
    assert response.mimetype == "application/json"
    assert response.get_json() == answer
    assert b", " not in response.data and b": " not in response.data


def test_the_core_gets_the_request_body_and_a_utc_now_in_whole_seconds():
    client, core = faked()
    before = datetime.now(UTC)
    post_json(client, sync_request())
    after = datetime.now(UTC)

    [(request, now)] = core.calls
    assert request == sync_request()
    assert now.utcoffset() == timedelta(0)
    assert now.microsecond == 0
    assert before - timedelta(seconds=1) <= now <= after


def test_the_real_core_answers_a_new_job_with_children_and_status(client):
    response = post_json(client, sync_request())
    assert response.status_code == 200
    answer = response.get_json()
    assert isinstance(answer["children"], list) and answer["children"]
    assert isinstance(answer["status"], dict)


# --- probes and other routes -------------------------------------------------------------------

@pytest.mark.parametrize("path", ["/healthz", "/readyz"])
def test_probes_answer_200_json(client, path):
    response = client.get(path)
    assert response.status_code == 200
    assert response.mimetype == "application/json"
    assert response.get_json()["status"] in {"ok", "ready"}


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [pytest.param("GET", "/sync", 405, id="get-sync"), pytest.param("POST", "/finalize", 404, id="unknown-path")],
)
def test_other_http_errors_are_json_too(client, method, path, status):
    response = client.open(path, method=method)
    assert response.status_code == status
    assert response.mimetype == "application/json"
    assert response.get_json()["error"]


# --- metrics -----------------------------------------------------------------------------------

OUTCOMES = ("ok", "bad_request", "error", "too_large")


def syncs(samples: dict, kind: str, outcome: str) -> float:
    return samples[("job_hooks_syncs_total", (("kind", kind), ("outcome", outcome)))]


def durations(samples: dict, kind: str, suffix: str = "count") -> float:
    return samples[(f"job_hooks_sync_duration_seconds_{suffix}", (("kind", kind),))]


def test_metrics_count_each_outcome_and_time_every_sync():
    client, core = faked({"MAX_CONTENT_LENGTH": 4096})
    post_json(client, sync_request())
    post_json(client, sync_request())
    client.post("/sync", data="not json", content_type="text/plain")
    post_json(client, sync_request() | {"padding": "x" * 4096})
    core.raises = RuntimeError("boom")
    post_json(client, sync_request())

    samples = metric_samples(client)
    assert {outcome: syncs(samples, "MXJob", outcome) for outcome in OUTCOMES} == {
        "ok": 2, "bad_request": 1, "error": 1, "too_large": 1}
    assert durations(samples, "MXJob") == 5
    assert durations(samples, "MXJob", "sum") > 0
    assert {outcome: syncs(samples, "ChainerJob", outcome) for outcome in OUTCOMES} == dict.fromkeys(OUTCOMES, 0)
    assert durations(samples, "ChainerJob") == 0


def test_each_route_counts_under_its_own_kind():
    """A ChainerJob sync is counted as a ChainerJob one, whichever route of a kind is called."""
    mxjob_core, chainerjob_core = FakeCore(), FakeCore(raises=hooks.shared.errors.InvalidRequest("bad"))
    kinds = (replace(MXJOB, sync=mxjob_core), replace(CHAINERJOB, sync=lambda request, *, now, **settings:
                                                           chainerjob_core(request, now=now)))
    client = create_app(kinds=kinds).test_client()
    for path in ("/sync", "/mxjob/sync", "/chainerjob/sync", "/chainerjob/sync", "/chainerjob/sync"):
        client.post(path, data=json.dumps(sync_request()), content_type="application/json")

    samples = metric_samples(client)
    assert (len(mxjob_core.calls), len(chainerjob_core.calls)) == (2, 3)
    assert (syncs(samples, "MXJob", "ok"), syncs(samples, "MXJob", "bad_request")) == (2, 0)
    assert (syncs(samples, "ChainerJob", "ok"), syncs(samples, "ChainerJob", "bad_request")) == (0, 3)
    assert (durations(samples, "MXJob"), durations(samples, "ChainerJob")) == (2, 3)
    # The old names, which counted every kind as MXJob, are gone (docs/metrics.md gives the rename).
    assert not [name for name, _ in samples if name.startswith("mxjob_hooks_")]


def test_each_app_has_its_own_metrics_and_starts_every_outcome_at_zero():
    client, _ = faked()
    post_json(client, sync_request())
    samples = metric_samples(create_app().test_client())
    for kind in ("MXJob", "ChainerJob"):
        for outcome in OUTCOMES:
            assert syncs(samples, kind, outcome) == 0
        assert durations(samples, kind) == 0


def test_probes_and_scrapes_are_not_counted_as_syncs(client):
    client.get("/healthz")
    client.get("/metrics")
    samples = metric_samples(client)
    assert durations(samples, "MXJob") == durations(samples, "ChainerJob") == 0


def test_docs_metrics_names_every_series_and_label_the_app_exports():
    docs = (REPO / "docs" / "metrics.md").read_text()
    response = create_app().test_client().get("/metrics")
    families = {f.name: f for f in text_string_to_metric_families(response.get_data(as_text=True))}
    # (prometheus_client adds *_created series in a single process only; a cluster never sees them.)
    exported = {name for name in families if name.startswith("job_hooks_") and not name.endswith("_created")}
    assert exported == {"job_hooks_syncs", "job_hooks_sync_duration_seconds"}
    for name in exported:
        shown = name + "_total" if families[name].type == "counter" else name
        assert f"`{shown}`" in docs
        for sample in families[name].samples:
            assert all(f"`{label}`" in docs for label in sample.labels if label != "le")


# --- the kinds table -----------------------------------------------------------------------------

def test_create_app_serves_the_kinds_it_is_given_and_only_those():
    calls = []

    def fake_sync(request, *, now, flavour):
        calls.append((request, flavour))
        return {"status": {"phase": "Fine"}, "children": []}

    fake = Kind(name="FakeJob", routes=("/fakejob/sync",), sync=fake_sync,
                settings={"flavour": ("FAKEJOB_FLAVOUR", "vanilla")})
    client = create_app(kinds=[fake]).test_client()

    reply = client.post("/fakejob/sync", json={"parent": {"kind": "FakeJob"}})
    assert reply.status_code == 200 and reply.get_json() == {"status": {"phase": "Fine"}, "children": []}
    assert calls == [({"parent": {"kind": "FakeJob"}}, "vanilla")]
    # The real kinds' routes are not served by this app, and its metrics know only its kind.
    assert client.post("/sync", json=sync_request()).status_code == 404
    assert client.post("/chainerjob/sync", json=sync_request()).status_code == 404
    samples = metric_samples(client)
    assert syncs(samples, "FakeJob", "ok") == 1
    assert {dict(labels)["kind"] for name, labels in samples if name == "job_hooks_syncs_total"} == {"FakeJob"}


def test_a_kinds_setting_comes_from_the_environment(monkeypatch):
    monkeypatch.setenv("FAKEJOB_FLAVOUR", "mint")
    seen = []
    fake = Kind(name="FakeJob", routes=("/fakejob/sync",),
                sync=lambda request, *, now, flavour: seen.append(flavour) or {"status": {}, "children": []},
                settings={"flavour": ("FAKEJOB_FLAVOUR", "vanilla")})
    assert create_app(kinds=[fake]).test_client().post("/fakejob/sync", json={}).status_code == 200
    assert seen == ["mint"]


@pytest.mark.parametrize(
    ("kinds", "message"),
    [
        pytest.param([MXJOB, replace(CHAINERJOB, name="MXJob")], "two job kinds named 'MXJob'", id="same-name"),
        pytest.param([MXJOB, replace(CHAINERJOB, routes=("/chainerjob/sync", "/sync"))],
                     "route '/sync' is served by both MXJob and ChainerJob", id="same-route"),
    ],
)
def test_a_kinds_table_that_serves_a_route_twice_is_refused_at_start(kinds, message):
    with pytest.raises(ValueError, match=message):
        create_app(kinds=kinds)


# --- the per-sync log line ---------------------------------------------------------------------

@pytest.mark.parametrize(
    ("core_kwargs", "outcome", "status", "level"),
    [
        pytest.param({}, "ok", 200, "info", id="ok"),
        pytest.param({"raises": hooks.shared.errors.InvalidRequest("spec is not an object")}, "bad_request", 400,
                     "warning", id="bad-request"),
        pytest.param({"raises": RuntimeError("boom")}, "error", 500, "error", id="error"),
    ],
)
def test_each_sync_logs_one_json_line_with_the_job_and_no_secrets(caplog, core_kwargs, outcome, status, level):
    caplog.set_level(logging.INFO, logger="hooks.server.app")
    client, _ = faked(**core_kwargs)
    post_json(client, sync_request())

    [line] = logged(caplog)
    assert line["level"] == level
    assert line["outcome"] == outcome
    assert line["status"] == status
    assert {"namespace": "team-a", "name": "digits", "uid": "0f1e2d3c-aaaa-bbbb-cccc-123456789abc",
            "generation": 3}.items() <= line.items()
    assert isinstance(line["duration_ms"], float) and line["duration_ms"] >= 0
    if outcome == "ok":
        assert line["children"] == 1
    assert ("errorId" in line) == (outcome == "error")
    text = json.dumps(line)
    for private in (SECRET, IMAGE, "opaque-arg-do-not-log", "API_TOKEN", "mxReplicaSpecs"):
        assert private not in text


def test_a_rejected_body_is_logged_without_job_fields(client, caplog):
    caplog.set_level(logging.INFO, logger="hooks.server.app")
    client.post("/sync", data="[1, 2]", content_type="application/json")
    [line] = logged(caplog)
    assert line["outcome"] == "bad_request" and line["status"] == 400
    assert not {"namespace", "name", "uid", "generation"} & line.keys()


@pytest.mark.parametrize(
    "metadata",
    [
        pytest.param({"name": {"nested": SECRET}, "namespace": [SECRET], "uid": 7, "generation": "3"}, id="wrong-types"),
        pytest.param({"name": "n" * 10_000}, id="huge-name"),
    ],
)
def test_odd_parent_metadata_never_puts_objects_or_huge_strings_in_the_log(caplog, metadata):
    caplog.set_level(logging.INFO, logger="hooks.server.app")
    client, _ = faked()
    body = sync_request()
    body["parent"]["metadata"] = metadata
    post_json(client, body)
    [line] = logged(caplog)
    assert SECRET not in json.dumps(line)
    assert len(line.get("name", "")) <= 256
    assert "generation" not in line


# --- module boundaries -------------------------------------------------------------------------

SHELL_PACKAGES = ("hooks.server", "hooks.cli")


def test_the_pure_core_imports_no_web_or_metrics_library():
    # Each pure module in a fresh interpreter: none may pull in the server's libraries.
    script = """
import importlib, json, pkgutil, sys
import hooks
shell = tuple(json.loads(sys.argv[1]))
pure = sorted(m.name for m in pkgutil.walk_packages(hooks.__path__, "hooks.")
              if not m.name.startswith(shell))
for name in pure:
    importlib.import_module(name)
banned = sorted(m for m in sys.modules if m.split(".")[0] in {"flask", "werkzeug", "gunicorn", "prometheus_client"})
print(json.dumps({"pure": pure, "banned": banned}))
"""
    result = subprocess.run([sys.executable, "-c", script, json.dumps(SHELL_PACKAGES)], cwd=REPO,
                            capture_output=True, text=True, timeout=60, check=True)
    report = json.loads(result.stdout)
    assert {"hooks.kinds", "hooks.mxjob.sync", "hooks.shared.errors"} <= set(report["pure"])
    assert report["banned"] == []


def test_the_shell_imports_only_the_core_entry_point_and_its_errors():
    """And the message helpers every part of hooks/ cuts a quoted value with (pure, no kind)."""
    tree = ast.parse((REPO / "hooks" / "server" / "app.py").read_text())
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
    assert {m for m in imported if m.split(".")[0] == "hooks"} == {
        "hooks.kinds", "hooks.shared.errors", "hooks.shared.messages", "hooks.server.logs", "hooks.server.metrics",
        "hooks.server.wire"}


def test_gunicorns_log_config_loads_its_formatter_without_the_app():
    """gunicorn's master sets up logging from gunicorn_conf; that must not import Flask or the cores
    (the workers import the app), and prometheus_client, which the master does import, must start in
    multiprocess mode (it picks its mode when first imported)."""
    script = """
import json, logging.config, sys
from hooks.server import gunicorn_conf
logging.config.dictConfig(gunicorn_conf.logconfig_dict)
handler = logging.getLogger("gunicorn.error").handlers[0]
from prometheus_client import values
print(json.dumps({"formatter": type(handler.formatter).__module__ + "." + type(handler.formatter).__name__,
                  "loaded": sorted(m for m in sys.modules if m.split(".")[0] == "flask"
                                   or m in {"hooks.server.app", "hooks.kinds", "hooks.mxjob", "hooks.chainerjob"}),
                  "multiprocess": values.ValueClass.__name__}))
gunicorn_conf.on_exit(None)
"""
    env = {"PATH": "/usr/bin:/bin"}
    result = subprocess.run([sys.executable, "-c", script], cwd=REPO, env=env, capture_output=True, text=True,
                            timeout=60, check=True)
    assert json.loads(result.stdout) == {"formatter": "hooks.server.logs.JsonFormatter", "loaded": [],
                                         "multiprocess": "MmapedValue"}


def test_a_worker_answers_one_sync_at_a_time_while_probes_go_through():
    """Its threads serve probes; two syncs at once would only double its peak memory."""
    import threading
    import time

    running, overlaps, release = [], [], threading.Event()

    def slow_core(request, *, now, **settings):
        running.append(1)
        overlaps.append(len(running))
        release.wait(5)
        time.sleep(0.05)
        running.pop()
        return {"status": {}, "children": []}

    app = create_app(kinds=with_mxjob_core(slow_core))
    body = json.dumps(sync_request())
    codes: list[int] = []
    threads = [threading.Thread(target=lambda: codes.append(app.test_client().post(
        "/sync", data=body, content_type="application/json").status_code)) for _ in range(3)]
    for thread in threads:
        thread.start()
    time.sleep(0.2)
    assert app.test_client().get("/healthz").status_code == 200  # not queued behind the syncs
    release.set()
    for thread in threads:
        thread.join(10)
    assert codes == [200, 200, 200] and overlaps == [1, 1, 1]
