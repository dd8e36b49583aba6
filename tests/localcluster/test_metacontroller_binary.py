"""`--metacontroller PATH`: what the local cluster hands a real Metacontroller binary, checked without one
(the runs under a real binary are the e2e tests that take the `metacontroller` fixture)."""

from __future__ import annotations

import re
import stat
from pathlib import Path

import pytest

from localcluster.cli import commands as cli
from localcluster.config import load_controller_configs
from localcluster.metacontroller.binary import SELF_RULES, check_binary, controller_manifest, self_rbac

ROOT = Path(__file__).resolve().parents[2]


def executable(tmp_path: Path) -> Path:
    path = tmp_path / "metacontroller"
    path.write_text("#!/bin/sh\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


@pytest.mark.parametrize("command", [["up"], ["run", "job.yaml"]], ids=["up", "run"])
def test_a_path_that_is_no_executable_is_an_argument_error_that_says_how_to_build_one(command, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.parser().parse_args([*command, "--metacontroller", str(tmp_path / "missing")])
    assert exit_.value.code == 2
    said = capsys.readouterr().err
    assert f"argument --metacontroller: {tmp_path / 'missing'}: no executable file there" in said
    assert "go build -o metacontroller ./pkg/cmd/metacontroller" in said


@pytest.mark.parametrize(("command", "names"), [(["up"], ("emulation", "none")), (["run", "job.yaml"], ("emulation",))],
                         ids=["up", "run"])
def test_the_engine_is_a_name_or_an_executable_path(command, names, tmp_path):
    for name in names:
        assert cli.parser().parse_args([*command, "--metacontroller", name]).metacontroller == name
    binary = executable(tmp_path)
    assert cli.parser().parse_args([*command, "--metacontroller", str(binary)]).metacontroller == str(binary.resolve())
    assert check_binary(binary) == binary.resolve()


def test_run_has_no_none_engine_since_nothing_would_sync_its_job():
    with pytest.raises(SystemExit):
        cli.parser().parse_args(["run", "job.yaml", "--metacontroller", "none"])


def test_metacontrollers_own_rights_are_the_table_in_the_operations_guide():
    """The role the local cluster gives a real binary is what docs/operations.md tells an admin who
    narrows Metacontroller's role (leases only with --leader-election, which the local cluster does not use)."""
    text = (ROOT / "docs" / "operations.md").read_text().split("## RBAC if Metacontroller's role is narrowed")[1]
    rows = re.findall(r"^\| `(\w+)` (?:\(`([\w.]+)`\) )?\| ([a-z, ]+) \|", text, re.M)
    documented = {(group, resource): set(verbs.split(", ")) for resource, group, verbs in rows if resource != "leases"}
    granted = {(group, resource): set(rule["verbs"]) for rule in SELF_RULES
               for group in rule["apiGroups"] for resource in rule["resources"]}
    assert granted == documented
    kinds = [obj["kind"] for obj in self_rbac()]
    assert kinds == ["Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding"]


def test_the_installed_controllers_call_the_local_hooks_server_by_url():
    for config in load_controller_configs():
        manifest = controller_manifest(config, "http://127.0.0.1:1234/")
        hooks = manifest["spec"]["hooks"]
        assert hooks["sync"]["webhook"] == {"url": f"http://127.0.0.1:1234{config.hook_path}", "timeout": "10s"}
        if config.customize_path:
            assert hooks["customize"]["webhook"]["url"] == f"http://127.0.0.1:1234{config.customize_path}"
        assert config.raw["spec"]["hooks"]["sync"]["webhook"].get("service"), "the shipped manifest is left as it is"
