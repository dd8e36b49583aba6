"""Regression tests for hostile request bodies the shell must refuse before any core runs.

Each file in tests/fuzz_repro/ is a request body found by fuzzing the MXJob sync route from outside
(a `.meta.json` beside one says how it was sent). Every one must get a 4xx with a JSON message and
must not reach the core: a 500 would make Metacontroller retry forever, a 200 could drop children.
"""
from __future__ import annotations

import http.client
import io
import json
import os
import pathlib
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest
from flask import Flask
from helpers.fuzz_repro import GENERATED_CHUNKED, GENERATED_MALFORMED

from hooks.kinds import KINDS, MXJOB
from hooks.mxjob.sync import sync_mxjob
from hooks.server.app import create_app

REPRO = pathlib.Path(__file__).resolve().parents[1] / "fuzz_repro"
REPO = REPRO.parent.parent
GUNICORN = pathlib.Path(sys.executable).with_name("gunicorn")


def body_of(name: str) -> bytes:
    return (REPRO / name).read_bytes()


def meta_of(name: str) -> dict:
    return json.loads((REPRO / name.replace(".json", ".meta.json")).read_text())


@pytest.fixture
def core_calls() -> list:
    """The requests the MXJob core of a recording_app got; the tests here expect none."""
    return []


def recording_app(calls: list, config: dict[str, Any] | None = None) -> Flask:
    """The real app, whose MXJob core records every request in `calls` before answering it."""
    def core(request: dict, *, now: Any, **settings: str) -> Any:
        calls.append(request)
        return sync_mxjob(request, now=now, **settings)

    return create_app(config, kinds=tuple(replace(kind, sync=core) if kind is MXJOB else kind for kind in KINDS))


@pytest.mark.parametrize(("name", "says"), [
    ("09-deep-nesting.json", "nests deeper than 100 levels"),
    ("09b-deep-nesting-in-template.json", "nests deeper than 100 levels"),
    ("10-nan-literal.json", "not valid JSON"),
], ids=["09-deep-nesting", "09b-deep-nesting-in-template", "10-nan-literal"])
def test_a_malformed_body_is_a_400_before_the_core_runs(core_calls, name, says):
    response = recording_app(core_calls).test_client().post("/sync", data=body_of(name), content_type="application/json")
    assert response.status_code == 400
    assert says in response.get_json()["error"]
    assert core_calls == []


def test_nesting_at_the_bound_is_served_and_one_deeper_is_not(core_calls):
    """The bound is exact: 100 levels of objects and arrays are fine, 101 are refused."""
    client = recording_app(core_calls).test_client()

    def related(depth: int) -> bytes:
        # The request object is level 1 and "related" level 2: depth - 2 arrays more.
        nested = "[" * (depth - 2) + "]" * (depth - 2)
        return (b'{"parent": {"apiVersion": "kubeflow.org/v1", "kind": "MXJob", "metadata": {"name": "j"}, '
                b'"spec": {"mxReplicaSpecs": {"Worker": {"template": {"spec": {"containers": '
                b'[{"name": "mxnet", "image": "i"}]}}}}}}, "children": {"Pod.v1": {}, "Service.v1": {}, '
                b'"ConfigMap.v1": {}}, "related": {"x": ' + nested.encode() + b"}}")

    assert client.post("/sync", data=related(100), content_type="application/json").status_code == 200
    response = client.post("/sync", data=related(101), content_type="application/json")
    assert response.status_code == 400 and "nests deeper than 100 levels" in response.get_json()["error"]
    assert len(core_calls) == 1




@pytest.mark.parametrize(("name", "says"), GENERATED_MALFORMED.items(), ids=[n[:2] for n in GENERATED_MALFORMED])
def test_a_generated_malformed_body_is_a_400_before_the_core_runs(core_calls, name, says):
    response = recording_app(core_calls).test_client().post("/sync", data=body_of(f"generated/{name}"),
                                               content_type="application/json")
    assert response.status_code == 400, response.get_data(as_text=True)[:300]
    assert says in response.get_json()["error"]
    assert core_calls == []


def chunks(data: bytes, size: int = 4096) -> Iterator[bytes]:
    for start in range(0, len(data), size):
        yield data[start:start + size]


def test_a_chunked_body_over_the_limit_is_a_413_in_process(core_calls):
    name = "13-chunked-over-limit.json"
    assert meta_of(name)["chunked"] is True
    body = body_of(name)
    client = recording_app(core_calls, {"MAX_CONTENT_LENGTH": 65536}).test_client()
    # No Content-Length: the body ends where the (chunked) input ends, as gunicorn marks it.
    response = client.post("/sync", input_stream=io.BytesIO(body), content_type="application/json",
                           environ_overrides={"wsgi.input_terminated": True})
    assert response.status_code == 413
    assert response.get_json() == {"error": "request body is larger than the limit of 65536 bytes (MAX_CONTENT_LENGTH)"}
    assert core_calls == []




@pytest.mark.parametrize(("name", "error"), GENERATED_CHUNKED.items(), ids=[n[:2] for n in GENERATED_CHUNKED])
def test_a_generated_chunked_body_under_the_limit_gets_the_answer_for_its_content(name, error):
    meta = meta_of(f"generated/{name.rsplit('.', 1)[0]}.json")
    assert meta["chunked"] is True and meta["app"] == "small"
    body = body_of(f"generated/{name}")
    assert len(body) < 65536
    client = create_app({"MAX_CONTENT_LENGTH": 65536}).test_client()
    response = client.post("/sync", input_stream=io.BytesIO(body), content_type="application/json",
                           environ_overrides={"wsgi.input_terminated": True})
    assert response.status_code == 400, response.get_data(as_text=True)[:300]
    assert error in response.get_json()["error"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def small_gunicorn(tmp_path) -> Iterator[int]:
    """The real server command with FLASK_MAX_CONTENT_LENGTH=65536, as the reproducer's meta says."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in {"PORT", "GUNICORN_CMD_ARGS", "PROMETHEUS_MULTIPROC_DIR"}}
    env.update(FLASK_MAX_CONTENT_LENGTH="65536", WEB_CONCURRENCY="1")
    proc = subprocess.Popen(
        [str(GUNICORN), "--config", "python:hooks.server.gunicorn_conf", "--bind", f"127.0.0.1:{port}",
         "hooks.server.app:create_app()"],
        cwd=REPO, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
        stderr=(tmp_path / "stderr.log").open("wb"), start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
                conn.request("GET", "/healthz")
                if conn.getresponse().status == 200:
                    break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"gunicorn did not start:\n{(tmp_path / 'stderr.log').read_text()}")
                time.sleep(0.1)
        yield port
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=5)


def post_chunked(port: int, body: bytes) -> tuple[int, dict]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("POST", "/sync", body=chunks(body), encode_chunked=True,
                     headers={"Content-Type": "application/json", "Transfer-Encoding": "chunked"})
        response = conn.getresponse()
        return response.status, json.loads(response.read())
    finally:
        conn.close()


def test_a_chunked_body_over_the_limit_is_a_413_through_gunicorn(small_gunicorn):
    status, answer = post_chunked(small_gunicorn, body_of("13-chunked-over-limit.json"))
    assert status == 413
    assert answer == {"error": "request body is larger than the limit of 65536 bytes (MAX_CONTENT_LENGTH)"}


def test_a_chunked_body_under_the_limit_is_served_through_gunicorn(small_gunicorn):
    body = json.dumps({"controller": {}, "parent": {
        "apiVersion": "kubeflow.org/v1", "kind": "MXJob", "metadata": {"name": "j", "namespace": "default", "uid": "u1"},
        "spec": {"mxReplicaSpecs": {"Worker": {"template": {"spec": {"containers": [{"name": "mxnet", "image": "i"}]}}}}}},
        "children": {"Pod.v1": {}, "Service.v1": {}, "ConfigMap.v1": {}}, "related": {}, "finalizing": False}).encode()
    status, answer = post_chunked(small_gunicorn, body)
    assert status == 200
    assert sorted(c["kind"] for c in answer["children"]) == ["ConfigMap", "Pod", "Service"]
