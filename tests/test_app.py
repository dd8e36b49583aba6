"""The HTTP shell (hooks/app.py) through Flask's test client: status codes, limits, logs, metrics."""

from __future__ import annotations

import ast
import json
import logging
import math
import pathlib
import re
import subprocess
import sys
from datetime import UTC, datetime, timedelta

import pytest
from prometheus_client.parser import text_string_to_metric_families

import hooks.kinds
import hooks.shared.errors
from hooks.server.app import DEFAULT_MAX_CONTENT_LENGTH, JsonFormatter, create_app

REPO = pathlib.Path(__file__).resolve().parent.parent
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
    return {
        "controller": {"apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": "CompositeController",
                       "metadata": {"name": "mxjob-controller"}},
        "parent": {
            "apiVersion": "kubeflow.org/v1",
            "kind": "MXJob",
            "metadata": {"name": name, "namespace": namespace, "uid": "0f1e2d3c-aaaa-bbbb-cccc-123456789abc",
                         "generation": 3},
            "spec": {"jobMode": "MXTrain",
                     "mxReplicaSpecs": {"Worker": {"replicas": 1, "restartPolicy": "Never", "template": template}}},
        },
        "children": {"Pod.v1": {}, "Service.v1": {}, "ConfigMap.v1": {}},
        "related": {},
        "finalizing": False,
    }


class FakeCore:
    """Stands in for hooks.mxjob.sync.sync_mxjob: records its calls and answers or raises as told."""

    def __init__(self, answer=None, raises: BaseException | None = None):
        self.answer = {"status": {"conditions": []}, "children": [{"kind": "Pod"}]} if answer is None else answer
        self.raises = raises
        self.calls: list[tuple[dict, datetime]] = []

    def __call__(self, request, *, now):
        self.calls.append((request, now))
        if self.raises is not None:
            raise self.raises
        return self.answer


@pytest.fixture
def client():
    return create_app().test_client()


def fake_core(monkeypatch, **kwargs) -> FakeCore:
    core = FakeCore(**kwargs)
    monkeypatch.setitem(hooks.kinds.SYNC, "MXJob", core)
    return core


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
def test_a_body_that_is_not_json_is_a_400_naming_the_problem(monkeypatch, client, content_type, data, expected):
    core = fake_core(monkeypatch)
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
def test_json_that_is_not_an_object_is_a_400(monkeypatch, client, body, type_name):
    core = fake_core(monkeypatch)
    response = client.post("/sync", data=body, content_type="application/json")
    assert response.status_code == 400
    assert response.get_json() == {"error": f"request body must be a JSON object, got {type_name}"}
    assert core.calls == []


def test_a_body_the_core_rejects_is_a_400_with_the_core_message(monkeypatch, client):
    fake_core(monkeypatch, raises=hooks.shared.errors.InvalidRequest("parent.kind must be MXJob, got 'Deployment'"))
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

def test_a_body_above_the_configured_limit_is_a_413_and_one_below_it_is_served(monkeypatch):
    core = fake_core(monkeypatch)
    client = create_app({"MAX_CONTENT_LENGTH": 4096}).test_client()
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

def test_an_exception_in_the_core_is_a_500_whose_error_id_is_in_the_log(monkeypatch, client, caplog):
    caplog.set_level(logging.INFO, logger="hooks.server.app")
    fake_core(monkeypatch, raises=KeyError("replicaSpecs-internal-detail"))
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


def test_each_internal_error_gets_its_own_id(monkeypatch, client):
    fake_core(monkeypatch, raises=RuntimeError("boom"))
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
def test_an_unusable_answer_from_the_core_is_a_500_not_a_200(monkeypatch, client, answer):
    # Metacontroller deletes every child missing from a 200 answer: a wrong shape must never pass.
    fake_core(monkeypatch, answer=answer)
    response = post_json(client, sync_request())
    assert response.status_code == 500
    assert response.get_json()["error"] == "internal error"
    assert "errorId" in response.get_json()


# --- 200: pass-through -------------------------------------------------------------------------

def test_the_core_answer_is_passed_through_unchanged_as_compact_json(monkeypatch, client):
    answer = {
        "status": {"conditions": [{"type": "Created", "status": "True", "message": "MXJob digits is créé"}],
                   "replicaStatuses": {"Worker": {"active": 0}}},
        "children": [{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "digits-worker-0"}},
                     {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "digits-worker-0"}}],
        "resyncAfterSeconds": 12.5,
    }
    fake_core(monkeypatch, answer=answer)
    response = post_json(client, sync_request())
    assert response.status_code == 200
    assert response.mimetype == "application/json"
    assert response.get_json() == answer
    assert b", " not in response.data and b": " not in response.data


def test_the_core_gets_the_request_body_and_a_utc_now_in_whole_seconds(monkeypatch, client):
    core = fake_core(monkeypatch)
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

def test_metrics_count_each_outcome_and_time_every_sync(monkeypatch):
    core = fake_core(monkeypatch)
    client = create_app({"MAX_CONTENT_LENGTH": 4096}).test_client()
    post_json(client, sync_request())
    post_json(client, sync_request())
    client.post("/sync", data="not json", content_type="text/plain")
    post_json(client, sync_request() | {"padding": "x" * 4096})
    core.raises = RuntimeError("boom")
    post_json(client, sync_request())

    samples = metric_samples(client)
    count = {outcome: samples[("mxjob_hooks_syncs_total", (("outcome", outcome),))]
             for outcome in ("ok", "bad_request", "error", "too_large")}
    assert count == {"ok": 2, "bad_request": 1, "error": 1, "too_large": 1}
    assert samples[("mxjob_hooks_sync_duration_seconds_count", ())] == 5
    assert samples[("mxjob_hooks_sync_duration_seconds_sum", ())] > 0


def test_each_app_has_its_own_metrics_and_starts_every_outcome_at_zero(monkeypatch):
    fake_core(monkeypatch)
    post_json(create_app().test_client(), sync_request())
    samples = metric_samples(create_app().test_client())
    for outcome in ("ok", "bad_request", "error", "too_large"):
        assert samples[("mxjob_hooks_syncs_total", (("outcome", outcome),))] == 0
    assert samples[("mxjob_hooks_sync_duration_seconds_count", ())] == 0


def test_probes_and_scrapes_are_not_counted_as_syncs(client):
    client.get("/healthz")
    client.get("/metrics")
    assert metric_samples(client)[("mxjob_hooks_sync_duration_seconds_count", ())] == 0


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
def test_each_sync_logs_one_json_line_with_the_job_and_no_secrets(monkeypatch, client, caplog, core_kwargs,
                                                                     outcome, status, level):
    caplog.set_level(logging.INFO, logger="hooks.server.app")
    fake_core(monkeypatch, **core_kwargs)
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
def test_odd_parent_metadata_never_puts_objects_or_huge_strings_in_the_log(monkeypatch, client, caplog, metadata):
    caplog.set_level(logging.INFO, logger="hooks.server.app")
    fake_core(monkeypatch)
    body = sync_request()
    body["parent"]["metadata"] = metadata
    post_json(client, body)
    [line] = logged(caplog)
    assert SECRET not in json.dumps(line)
    assert len(line.get("name", "")) <= 256
    assert "generation" not in line


# --- module boundaries -------------------------------------------------------------------------

SHELL_PACKAGE = "hooks.server"


def test_the_pure_core_imports_no_web_or_metrics_library():
    # Each pure module in a fresh interpreter: none may pull in the server's libraries.
    script = """
import importlib, json, pkgutil, sys
import hooks
shell = json.loads(sys.argv[1])
pure = sorted(m.name for m in pkgutil.walk_packages(hooks.__path__, "hooks.")
              if not m.name.startswith(shell))
for name in pure:
    importlib.import_module(name)
banned = sorted(m for m in sys.modules if m.split(".")[0] in {"flask", "werkzeug", "gunicorn", "prometheus_client"})
print(json.dumps({"pure": pure, "banned": banned}))
"""
    result = subprocess.run([sys.executable, "-c", script, json.dumps(SHELL_PACKAGE)], cwd=REPO,
                            capture_output=True, text=True, timeout=60, check=True)
    report = json.loads(result.stdout)
    assert {"hooks.kinds", "hooks.mxjob.sync", "hooks.shared.errors"} <= set(report["pure"])
    assert report["banned"] == []


def test_the_shell_imports_only_the_core_entry_point_and_its_errors():
    tree = ast.parse((REPO / "hooks" / "server" / "app.py").read_text())
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
    assert {m for m in imported if m.split(".")[0] == "hooks"} == {
        "hooks.kinds", "hooks.shared.errors", "hooks.server.metrics", "hooks.server.wire"}


def test_a_worker_answers_one_sync_at_a_time_while_probes_go_through(monkeypatch):
    """Its threads serve probes; two syncs at once would only double its peak memory."""
    import threading
    import time

    running, overlaps, release = [], [], threading.Event()

    def slow_core(request, *, now):
        running.append(1)
        overlaps.append(len(running))
        release.wait(5)
        time.sleep(0.05)
        running.pop()
        return {"status": {}, "children": []}

    monkeypatch.setitem(hooks.kinds.SYNC, "MXJob", slow_core)
    app = create_app()
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
