"""The kubectl stand-in's `get pod`: Kubernetes' jsonpath templates and flags, on recorded Pods."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from localcluster.node import kubectl

POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "w-0", "namespace": "team"},
       "spec": {"containers": [{"name": "chainer"}, {"name": "side"}]},
       "status": {"phase": "Running", "containerStatuses": [
           {"name": "chainer", "ready": True, "restartCount": 2, "state": {"running": {"startedAt": "2026-11-25T10:00:00Z"}}},
           {"name": "side", "ready": False, "restartCount": 0, "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]}}


@pytest.mark.parametrize(("template", "expected"), [
    ('{.status.containerStatuses[?(@.name=="chainer")].state.running.startedAt}', "2026-11-25T10:00:00Z"),
    ('{.status.containerStatuses[?(@.name=="side")].state.running.startedAt}', ""),
    ("{.metadata.name} is {.status.phase}", "w-0 is Running"),
    ("{.status.containerStatuses[*].name}", "chainer side"),
    ("{.status.containerStatuses[0].restartCount}", "2"),
    ("{.status.containerStatuses[1].ready}", "false"),
    ("{.missing.field}", ""),
    ("plain text", "plain text"),
    ("{.spec.containers[0]}", '{"name": "chainer"}'),
], ids=["filter-running", "filter-not-running", "text-between", "wildcard-joined", "number", "bool",
        "missing-is-empty", "no-braces", "object-as-json"])
def test_jsonpath_templates_print_as_kubectl_does(template, expected):
    assert kubectl.render_jsonpath(template, POD) == expected


def test_range_is_refused_with_a_message():
    with pytest.raises(SystemExit, match="not emulated"):
        kubectl.render_jsonpath("{range .items[*]}{.metadata.name}{end}", POD)


@pytest.mark.parametrize(("argv", "expected"), [
    (["pod", "w-0", "-o", "jsonpath={.a}"], ("", ["w-0"], "jsonpath={.a}")),
    (["pods/w-0", "-n", "team", "-ojson"], ("team", ["w-0"], "json")),
    (["po", "a", "b", "--namespace=x", "--output=name"], ("x", ["a", "b"], "name")),
    (["pods"], ("", [], "")),
], ids=["jsonpath", "slash-form", "several-names", "list"])
def test_get_flags_are_read_as_kubectl_reads_them(argv, expected):
    assert kubectl.parse_get(argv) == expected


@pytest.mark.parametrize("argv", [["services", "x"], [], ["pod", "x", "--watch"]], ids=["other-resource", "nothing", "unknown-flag"])
def test_what_get_cannot_do_is_refused_with_usage(argv):
    with pytest.raises(SystemExit, match="usage: kubectl"):
        kubectl.parse_get(argv)


def record(pods_dir: Path, pod: dict) -> None:
    folder = pods_dir / pod["metadata"]["namespace"] / pod["metadata"]["name"]
    folder.mkdir(parents=True)
    (folder / "pod.json").write_text(json.dumps(pod))


def run_get(tmp_path: Path, *args: str) -> int:
    return kubectl.main(["kubectl", "--pods-dir", str(tmp_path), "--namespace-default", "default", "get", *args])


def test_get_prints_the_recorded_pod_in_its_namespace(tmp_path, capsys):
    record(tmp_path, POD)
    assert run_get(tmp_path, "pod", "w-0", "-n", "team", "-o", "jsonpath={.status.phase}") == 0
    assert capsys.readouterr().out == "Running"
    assert run_get(tmp_path, "pods", "-n", "team") == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].split() == ["NAME", "READY", "STATUS", "RESTARTS"]
    assert table[1].split() == ["w-0", "1/2", "CrashLoopBackOff", "2"]


def test_get_of_a_pod_that_is_not_there_is_not_found(tmp_path, capsys):
    record(tmp_path, POD)
    assert run_get(tmp_path, "pod", "w-0", "-o", "name") == 1  # the default namespace has no w-0
    assert 'pods "w-0" not found' in capsys.readouterr().err


def test_an_unknown_output_format_is_refused(tmp_path, capsys):
    record(tmp_path, POD)
    assert run_get(tmp_path, "pod", "w-0", "-n", "team", "-o", "custom-columns=N:.metadata.name") == 1
    assert "allowed formats" in capsys.readouterr().err
