"""Set-up as a newcomer meets it: the interpreter check, the tool check, and a fully pinned install."""

from __future__ import annotations

import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)$")


# The Makefile's settings, and what an outer make hands down (`make test KUEUE=run` puts KUEUE=run in
# MAKEFLAGS and in the tests' environment): left out, so each call here sees the Makefile's defaults.
MAKE_SETTINGS = ("PY", "EXAMPLE", "CONTROLPLANE", "KUEUE", "IMAGE_CHECK", "TEST_WORKERS", "MAKEFLAGS", "MFLAGS",
                 "MAKELEVEL")


def make(*args: str, path: str | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in MAKE_SETTINGS}
    if path is not None:
        env = {"PATH": path}
    return subprocess.run([shutil.which("make") or "make", "-f", str(ROOT / "Makefile"), "--no-print-directory", *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=60, env=env)


def fake_python(folder: Path, version: str) -> Path:
    """An executable that claims to be Python `version` to the Makefile's checks."""
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / "python"
    major_minor = tuple(int(part) for part in version.split(".")[:2])
    script.write_text(f"#!/bin/sh\nif [ \"$1\" = --version ]; then echo 'Python {version}'; exit 0; fi\n"
                      f"exit {0 if major_minor == (3, 11) else 1}\n")
    script.chmod(0o755)
    return script


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pins(path: Path) -> dict[str, str]:
    found = {}
    for line in path.read_text().splitlines():
        match = PIN.match(line.split("#")[0].strip())
        if match:
            found[normalize(match.group(1))] = match.group(2)
    return found


@pytest.mark.parametrize("version", ["3.12.4", "3.10.14"])
def test_setup_refuses_another_python_with_a_clear_message(tmp_path: Path, version: str):
    result = make("check-python", f"PY={fake_python(tmp_path, version)}")
    assert result.returncode != 0
    assert "Python 3.11 is required" in result.stderr and f"Python {version}" in result.stderr
    assert "make PY=" in result.stderr


def test_a_venv_made_by_another_python_is_rebuilt(tmp_path: Path):
    venv = tmp_path / "venv"
    fake_python(venv / "bin", "3.12.4")
    result = make("check-python", f"PY={sys.executable}", f"VENV={venv}", f"BIN={venv}/bin")
    assert result.returncode == 0, result.stderr
    assert "made by Python 3.12.4: rebuilding it" in result.stdout
    assert not venv.exists()


def test_a_venv_made_by_python_3_11_is_kept(tmp_path: Path):
    venv = tmp_path / "venv"
    fake_python(venv / "bin", "3.11.9")
    result = make("check-python", f"PY={sys.executable}", f"VENV={venv}", f"BIN={venv}/bin")
    assert result.returncode == 0 and venv.exists(), result.stderr


def test_missing_tools_are_named_at_set_up(tmp_path: Path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("sh", "awk"):  # what make's recipe lines need, and not kubectl
        found = shutil.which(tool)
        if found:
            (bin_dir / tool).symlink_to(found)
    result = make("check-tools", path=str(bin_dir))
    assert result.returncode != 0 and "kubectl" in result.stderr and "git" in result.stderr


@pytest.mark.parametrize(("target", "module"), [("controlplane", "kubernetes"), ("kueue", "kueue")])
def test_without_go_the_control_plane_target_says_what_to_install(tmp_path: Path, target: str, module: str):
    """`make run` and `make test` build the control plane first (make controlplane; make test also make kueue);
    with no Go on PATH that step fails, naming the Go version the pinned go.mod files ask for and the target to run."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("sh", "bash", "dirname", "mkdir", "sed"):
        found = shutil.which(tool)
        if found:
            (bin_dir / tool).symlink_to(found)
    result = make(target, f"CONTROLPLANE_BIN={tmp_path / 'cp'}", path=str(bin_dir))
    go = re.search(r"^go (\S+)$", (ROOT / "controlplane" / module / "go.mod").read_text(), re.M)
    assert go is not None
    assert result.returncode != 0
    assert f"Go {go.group(1)} or newer" in result.stderr and f"make {target}" in result.stderr, result.stderr


@pytest.mark.parametrize(("setting", "builds"), [((), True), (("KUEUE=skip",), False)], ids=["default", "KUEUE=skip"])
def test_make_test_builds_kueue_unless_told_not_to_and_says_so(setting: tuple[str, ...], builds: bool):
    test = make("-n", "test", "STAMP=/dev/null", "IMAGE_CHECK=skip", "CONTROLPLANE=run", *setting).stdout
    assert ("build-kueue.sh" in test) is builds, test
    assert ("KUEUE=skip: nothing was checked against a real Kueue" in test) is not builds, test
    assert "KUEUE=" in test[test.index("pytest") - 80:test.index("pytest")], "pytest is told whether Kueue was built"


def test_every_installed_package_is_pinned_in_the_constraints_file():
    constraints = pins(ROOT / "constraints.txt")
    installed = {normalize(dist.metadata["Name"]): dist.version for dist in importlib.metadata.distributions()
                 if normalize(dist.metadata["Name"]) != "mxjob-operator"}
    unpinned = sorted(set(installed) - set(constraints))
    differ = {name: (installed[name], constraints[name]) for name in installed if name in constraints
              and installed[name] != constraints[name]}
    assert not unpinned and not differ, (
        f"not in constraints.txt: {unpinned}; installed vs pinned: {differ}. After changing a requirements "
        "file, run `make setup` then `make constraints`, and commit constraints.txt")


@pytest.mark.parametrize("requirements", [
    "requirements.txt", "requirements-localcluster.txt", "requirements-dev.txt", "requirements-mxnet.txt"])
def test_requirement_pins_agree_with_the_constraints(requirements: str):
    constraints = pins(ROOT / "constraints.txt")
    for name, version in pins(ROOT / requirements).items():
        assert constraints.get(name) == version, f"{requirements} pins {name}=={version}, constraints.txt {constraints.get(name)}"


def test_the_project_is_installed_with_its_command():
    scripts = {entry.name: entry.value for entry in importlib.metadata.entry_points(group="console_scripts")}
    assert scripts.get("localcluster") == "localcluster.cli.commands:main"
    assert (Path(sys.executable).parent / "localcluster").exists()


def test_make_help_lists_every_documented_target():
    result = make("help")
    listed = {line.split()[1] for line in result.stdout.splitlines() if line.strip().startswith("make ")}
    assert {"setup", "run", "test", "lint", "bench", "clean", "constraints"} <= listed, result.stdout


def test_make_lint_runs_ruff_and_mypy_and_make_test_runs_lint_first():
    lint = make("-n", "lint", "STAMP=/dev/null").stdout
    assert "ruff check ." in lint and "mypy" in lint
    test = make("-n", "test", "STAMP=/dev/null").stdout
    assert test.index("ruff check") < test.index("pytest")


def test_make_clean_removes_every_cache_and_state_folder(tmp_path: Path):
    made = [".venv", ".pytest_cache", ".mypy_cache", ".ruff_cache", ".hypothesis", ".localcluster", "x.egg-info"]
    for name in made:
        (tmp_path / name).mkdir()
    (tmp_path / "keep.txt").write_text("mine")
    result = subprocess.run([shutil.which("make") or "make", "-f", str(ROOT / "Makefile"), "--no-print-directory",
                             "clean"], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keep.txt"]
