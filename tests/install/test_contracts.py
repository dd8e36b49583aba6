"""Import contracts, read from the source with `ast` (no module is imported, so nothing can hide behind
an import-time side effect or a lazy import inside a function):

- purity: a core module (hooks/shared/, and every kind's package hooks/<kind>/) imports only the
  standard library, minus the modules that do I/O, read the clock, the environment or randomness,
  or touch process state (IMPURE_STDLIB, with the reason for each), and among this project's code
  only hooks.shared and its own kind; and it calls no I/O builtin (open, print, ...) nor a clock
  (`datetime.now()`, `date.today()`): time is passed in;
- kinds never import each other, and hooks.shared imports no kind;
- localcluster (the stand-in cluster) imports nothing from hooks: it drives the hooks server over
  HTTP as Metacontroller does.

The shells are hooks/server/ (HTTP) and hooks/cli/ (commands); hooks/kinds.py is the composition
root that puts the kinds in one table. A kind is any other package directly under hooks/, so a new
kind is covered by these rules the moment it exists. Every rule is also run on a synthetic module
that breaks it, so a checker that cannot fail would fail here.
"""
from __future__ import annotations

import ast
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
HOOKS = REPO / "hooks"

# Packages under hooks/ that are not job kinds: the shared core and the shells.
SHARED = "shared"
SHELLS = frozenset({"server", "cli"})

# Standard-library modules a core module may not import, and why. Everything else in the standard
# library is allowed (collections, dataclasses, datetime as a type and for arithmetic, re, json,
# math, fractions, pickle for in-memory copies, ...).
IMPURE_STDLIB: dict[str, str] = {
    **dict.fromkeys(("os", "sys", "io", "pathlib", "shutil", "tempfile", "glob", "fnmatch", "fileinput",
                     "filecmp", "mmap", "sqlite3", "dbm", "shelve", "zipfile", "tarfile", "gzip", "bz2", "lzma",
                     "zoneinfo", "linecache", "tokenize", "importlib", "pkgutil", "runpy", "zipimport"),
                    "files, the environment or the import system: the shell reads input"),
    **dict.fromkeys(("socket", "ssl", "select", "selectors", "asyncio", "http", "urllib", "ftplib", "smtplib",
                     "imaplib", "poplib", "xmlrpc", "socketserver", "wsgiref", "webbrowser", "ipaddress"),
                    "the network: Metacontroller does all I/O"),
    **dict.fromkeys(("subprocess", "multiprocessing", "threading", "_thread", "concurrent", "signal", "atexit",
                     "sched", "pty", "tty", "termios", "resource", "pwd", "grp", "getpass", "platform",
                     "ctypes", "gc", "faulthandler", "tracemalloc", "locale"),
                    "processes, threads or process-wide state"),
    **dict.fromkeys(("time", "random", "secrets", "uuid"),
                    "the clock or randomness: time is passed in, and the same input must give the same bytes"),
    **dict.fromkeys(("logging", "warnings", "argparse", "getopt", "builtins", "inspect", "traceback", "pdb"),
                    "logs, the terminal, the command line or the interpreter: the shell logs"),
}
# Built-in functions that do I/O or run code, and attribute calls that read the clock.
IMPURE_BUILTINS = frozenset({"open", "print", "input", "eval", "exec", "compile", "__import__", "breakpoint"})
CLOCK_CALLS = frozenset({"now", "utcnow", "today"})


@dataclass(frozen=True)
class Imported:
    module: str
    line: int


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(source: str, module: str, *, is_package: bool = False) -> list[Imported]:
    """Every module `module` imports, anywhere in its source, as absolute names. `from a import b` yields
    both `a` and `a.b` (b may be a sub-module)."""
    package = module if is_package else module.rpartition(".")[0]
    found: list[Imported] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [Imported(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - (node.level - 1)]
                origin = ".".join([*base, node.module] if node.module else base)
            else:
                origin = node.module or ""
            found.append(Imported(origin, node.lineno))
            found += [Imported(f"{origin}.{alias.name}", node.lineno) for alias in node.names if alias.name != "*"]
    return found


def kinds() -> frozenset[str]:
    """The job kinds: every package directly under hooks/ that is neither shared nor a shell."""
    return frozenset(p.parent.name for p in HOOKS.glob("*/__init__.py")) - SHELLS - {SHARED}


def top(name: str) -> str:
    return name.split(".")[0]


def in_package(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def core_problems(source: str, module: str, *, known_kinds: frozenset[str], is_package: bool = False) -> list[str]:
    """Why a module of hooks.shared or of a kind is not pure, or breaks the kind contracts; [] if it is fine."""
    own = module.split(".")[1]
    problems = []
    reported: set[int] = set()  # one problem per import statement (`from a import b` yields a and a.b)
    for imported in imports_of(source, module, is_package=is_package):
        if imported.line in reported:
            continue
        problem = core_import_problem(imported.module, own, known_kinds)
        if problem:
            problems.append(f"{module}:{imported.line} imports {imported.module}: {problem}")
            reported.add(imported.line)
    return problems + core_call_problems(source, module)


def core_import_problem(name: str, own: str, known_kinds: frozenset[str]) -> str | None:
    """Why the core of `own` (a kind, or shared) may not import `name`; None when it may."""
    if top(name) == "hooks":
        if name == "hooks" or any(in_package(name, p) for p in ("hooks.shared", f"hooks.{own}")):
            return None
        other = name.split(".")[1]
        if own == SHARED and other in known_kinds:
            return "hooks.shared imports no kind"
        if other in known_kinds:
            return "kinds never import each other"
        return "the core imports only hooks.shared and its own kind, never a shell or the kinds table"
    if name == "__future__":
        return None
    if top(name) not in sys.stdlib_module_names:
        return "the core imports only the standard library"
    if top(name) in IMPURE_STDLIB:
        return f"not pure ({IMPURE_STDLIB[top(name)]})"
    return None


def core_call_problems(source: str, module: str) -> list[str]:
    """The calls in a core module that do I/O or read the clock."""
    problems = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            if isinstance(node.func, ast.Name) and node.func.id in IMPURE_BUILTINS:
                problems.append(f"{module}:{node.lineno} calls {node.func.id}(): the core does no I/O")
            elif isinstance(node.func, ast.Attribute) and node.func.attr in CLOCK_CALLS:
                problems.append(f"{module}:{node.lineno} calls .{node.func.attr}(): time is passed in")
    return problems


def localcluster_problems(source: str, module: str, *, is_package: bool = False) -> list[str]:
    """Why a localcluster module breaks its contract (it imports from hooks); [] if it does not."""
    lines = {i.line: i.module for i in reversed(imports_of(source, module, is_package=is_package))
             if top(i.module) == "hooks"}  # one per statement, naming what it imports from
    return [f"{module}:{line} imports {name}: localcluster talks to the hooks over HTTP only"
            for line, name in sorted(lines.items())]


def sources(folder: Path) -> list[Path]:
    return sorted(folder.rglob("*.py"))


def core_sources() -> list[Path]:
    return [p for package in (SHARED, *sorted(kinds())) for p in sources(HOOKS / package)]


# --- the project as it is ------------------------------------------------------------------------

def test_the_kinds_are_found_and_the_shells_are_not_kinds():
    assert kinds() >= {"mxjob", "chainerjob"}
    assert not kinds() & (SHELLS | {SHARED})
    # The command-line shell moved out of the MXJob core (it reads files, stdin and uses ruamel.yaml).
    assert not (HOOKS / "mxjob" / "convert_cli.py").exists()


def test_every_core_module_is_pure_and_keeps_to_its_kind():
    checked = core_sources()
    assert len(checked) > 20
    problems = [problem for path in checked
                for problem in core_problems(path.read_text(), module_name(path), known_kinds=kinds(),
                                             is_package=path.name == "__init__.py")]
    assert problems == []


def test_localcluster_imports_nothing_from_hooks():
    checked = sources(REPO / "localcluster")
    assert len(checked) > 10
    problems = [problem for path in checked
                for problem in localcluster_problems(path.read_text(), module_name(path),
                                                     is_package=path.name == "__init__.py")]
    assert problems == []


def test_only_the_composition_root_and_the_shells_import_more_than_one_kind():
    """hooks.kinds puts the kinds in one table; the HTTP shell reaches them through it alone."""
    outside = [p for p in sources(HOOKS) if p.parent == HOOKS or p.parent.name in SHELLS]
    for path in outside:
        imported = {i.module.split(".")[1] for i in imports_of(path.read_text(), module_name(path))
                    if top(i.module) == "hooks" and i.module.count(".")}
        if module_name(path) != "hooks.kinds":
            assert len(imported & kinds()) <= 1, f"{module_name(path)} imports the kinds {sorted(imported & kinds())}"


# --- the checker itself fails on each kind of violation --------------------------------------------

KINDS = frozenset({"mxjob", "chainerjob"})


@pytest.mark.parametrize(
    ("module", "source", "expected"),
    [
        pytest.param("hooks.mxjob.bad", "import os\n", "imports os: not pure (files", id="os"),
        pytest.param("hooks.mxjob.bad", "def f():\n    import logging\n", "imports logging: not pure", id="lazy-logging"),
        pytest.param("hooks.mxjob.bad", "from time import time\n", "imports time: not pure (the clock", id="time"),
        pytest.param("hooks.mxjob.bad", "from ruamel.yaml import YAML\n", "only the standard library",
                     id="third-party"),
        pytest.param("hooks.mxjob.bad", "import flask\n", "only the standard library", id="flask"),
        pytest.param("hooks.mxjob.bad", "from hooks.chainerjob.spec import ChainerJob\n",
                     "kinds never import each other", id="other-kind"),
        pytest.param("hooks.mxjob.bad", "from ..chainerjob import names\n", "imports hooks.chainerjob: kinds never",
                     id="other-kind-relative"),
        pytest.param("hooks.chainerjob.bad", "from hooks import mxjob\n", "imports hooks.mxjob: kinds never",
                     id="other-kind-from-hooks"),
        pytest.param("hooks.shared.bad", "import hooks.mxjob.names\n", "hooks.shared imports no kind", id="shared"),
        pytest.param("hooks.shared.bad", "from hooks.server.app import create_app\n", "never a shell",
                     id="shared-imports-the-shell"),
        pytest.param("hooks.mxjob.bad", "import hooks.kinds\n", "never a shell", id="kind-imports-the-table"),
        pytest.param("hooks.mxjob.bad", "def f(x):\n    print(x)\n", "calls print()", id="print"),
        pytest.param("hooks.mxjob.bad", "def f(p):\n    return open(p).read()\n", "calls open()", id="open"),
        pytest.param("hooks.mxjob.bad", "from datetime import datetime\nNOW = datetime.now()\n", "calls .now()",
                     id="clock"),
    ],
)
def test_the_core_checker_finds_a_deliberate_violation(module, source, expected):
    problems = core_problems(source, module, known_kinds=KINDS)
    assert len(problems) == 1 and expected in problems[0], problems


def test_the_core_checker_accepts_what_the_core_may_import():
    source = ("from __future__ import annotations\nimport re\nfrom collections.abc import Mapping\n"
              "from datetime import datetime, timedelta\nimport pickle\nfrom hooks.shared.k8s import JSON\n"
              "from hooks.mxjob import names\nfrom . import spec\nfrom .env import env_for\n"
              "def later(now: datetime) -> datetime:\n    return now + timedelta(seconds=1)\n")
    assert core_problems(source, "hooks.mxjob.good", known_kinds=KINDS) == []


@pytest.mark.parametrize(
    "source",
    [
        pytest.param("from hooks.kinds import KINDS\n", id="from-import"),
        pytest.param("import hooks.mxjob.sync\n", id="import"),
        pytest.param("def f():\n    from hooks.shared import k8s\n", id="lazy"),
    ],
)
def test_the_localcluster_checker_finds_a_deliberate_violation(source):
    [problem] = localcluster_problems(source, "localcluster.bad")
    assert "localcluster talks to the hooks over HTTP only" in problem


def test_a_relative_import_inside_localcluster_is_not_the_hooks_package():
    assert localcluster_problems("from .hooks_server import HooksServer\n", "localcluster.cluster") == []


# --- typing -----------------------------------------------------------------------------------------

# The flags `mypy --strict` turns on that mypy accepts per module (the global ones, warn_unused_configs
# and warn_redundant_casts, sit in [tool.mypy]).
STRICT_PER_MODULE = {
    "disallow_any_generics": True, "disallow_subclassing_any": True, "disallow_untyped_calls": True,
    "disallow_untyped_defs": True, "disallow_incomplete_defs": True, "check_untyped_defs": True,
    "disallow_untyped_decorators": True, "warn_unused_ignores": True, "warn_return_any": True,
    "implicit_reexport": False, "strict_equality": True, "extra_checks": True,
}


def test_make_lint_type_checks_hooks_as_mypy_strict_does():
    import tomllib

    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["mypy"]
    assert "hooks" in config["packages"]
    assert config["warn_unused_configs"] is True and config["warn_redundant_casts"] is True
    [hooks_override] = [o for o in config["overrides"] if "hooks.*" in o["module"]]
    assert {key: hooks_override.get(key) for key in STRICT_PER_MODULE} == STRICT_PER_MODULE


TESTS = REPO / "tests"


def cross_test_imports(source: str, module: str) -> list[str]:
    """Why a test module breaks the test contract; [] if it keeps it. A test module can be reached by more than
    one name (tests/ is on sys.path, and the root is too): `mxjob.test_spec`, `tests.mxjob.test_spec` and a
    relative `.test_spec` all name one, so any imported name with a `test_` part is a test module. Shared code
    lives in tests/helpers/: importing a test module would collect and run its tests again, and couples two
    test files that should fail alone."""
    problems: dict[tuple[int, str], str] = {}
    for imported in imports_of(source, module):
        parts = imported.module.split(".")
        first = next((i for i, part in enumerate(parts) if part.startswith("test_")), None)
        if first is None:
            continue
        # `from a.test_x import b` also yields `a.test_x.b`: name the test module once per import.
        name = ".".join(parts[:first + 1])
        problems.setdefault((imported.line, name), f"{module}:{imported.line} imports {name}: a test module imports "
                                                   "no other test module; move what it shares to tests/helpers/")
    return list(problems.values())


def test_no_test_module_imports_another():
    found = sorted(TESTS.rglob("test_*.py"))
    assert len(found) > 40  # the glob found the test modules in every subject folder, not nothing
    assert {path.parent.name for path in found} >= {"mxjob", "chainerjob", "shared", "server", "install", "localcluster"}
    problems = [p for path in found for p in cross_test_imports(path.read_text(), module_name(path))]
    assert problems == []


SUBJECTS = {"mxjob", "chainerjob", "shared", "server", "install", "localcluster", "reporter"}


def test_every_test_module_sits_in_a_subject_folder():
    """tests/README.md: one folder per subject, so `pytest tests/<subject>` is that subject's whole spec."""
    found = [path.relative_to(TESTS) for path in TESTS.rglob("test_*.py")]
    assert len(found) > 40
    assert sorted(str(path) for path in found if len(path.parts) != 2 or path.parts[0] not in SUBJECTS) == []


@pytest.mark.parametrize(("source", "imported"), [
    ("from test_crd import SCHEMA\n", "test_crd"),
    ("import test_crd\n", "test_crd"),
    ("from install.test_crd import SCHEMA\n", "install.test_crd"),
    ("from tests.install.test_crd import SCHEMA\n", "tests.install.test_crd"),
    ("from .test_crd import SCHEMA\n", "tests.mxjob.test_crd"),
    ("from ..install.test_crd import SCHEMA\n", "tests.install.test_crd"),
    ("from ..install import test_crd\n", "tests.install.test_crd"),
    ("def helper():\n    from install.test_crd import SCHEMA\n", "install.test_crd"),
])
def test_the_test_module_checker_finds_a_deliberate_violation(source, imported):
    assert cross_test_imports(source, "tests.mxjob.test_bad") == [
        f"tests.mxjob.test_bad:{source.count(chr(10))} imports {imported}: a test module imports no other test "
        "module; move what it shares to tests/helpers/"]


def test_the_test_module_checker_accepts_helpers():
    assert cross_test_imports("from helpers.crd import SCHEMA\nfrom helpers import mcsim\nfrom hooks.mxjob import names\n",
                              "tests.mxjob.test_ok") == []
