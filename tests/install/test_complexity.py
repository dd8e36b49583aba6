"""The complexity ratchet: no function over ruff's C901 limit (12, pyproject.toml) but those listed in
DEBT, each marked `# noqa: C901 (N)` on its `def` line with its complexity N.

DEBT is the one list of the debt. The ratchet fails when a listed function grows, when a function over
the limit is not listed (a new `# noqa: C901` cannot hide one), when a mark and the list disagree, and
when a listed function got simpler or went away (strike it off: delete its line here and its mark).
A listed function whose file is gone is paid by the deletion.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tokenize
from pathlib import Path
from typing import NamedTuple

import pytest

REPO = Path(__file__).resolve().parents[2]

# "<file>::<function>": its complexity when it was listed. Lower a number when the function gets
# simpler; delete the line when it is at 12 or under.
DEBT: dict[str, int] = {
    "scripts/image_check.py::check_running_hooks": 24,
}

_TOO_COMPLEX = re.compile(r"^`(?P<name>[^`]+)` is too complex \((?P<n>\d+) > \d+\)$")
_MARK = re.compile(r"#\s*noqa:[^#\n]*\bC901\b(?:\s*\((?P<n>\d+)\))?")


class Finding(NamedTuple):
    """A function over the limit, as ruff's mccabe measures it (marks ignored)."""

    key: str  # <file>::<function>
    line: int  # the line where ruff reads its noqa comment
    complexity: int


class Mark(NamedTuple):
    path: str
    line: int
    number: int | None  # the (N) after C901, None when it is missing


def findings(root: Path = REPO) -> list[Finding]:
    result = subprocess.run([sys.executable, "-m", "ruff", "check", "--select", "C901", "--ignore-noqa", "--exit-zero",
                             "--output-format", "json", "--no-cache", "."], cwd=root, capture_output=True, text=True, check=True)
    found = []
    for item in json.loads(result.stdout):
        match = _TOO_COMPLEX.match(item["message"])
        assert match, f"ruff's C901 message changed: {item['message']!r}"
        path = Path(item["filename"]).relative_to(root).as_posix()
        found.append(Finding(f"{path}::{match['name']}", item["noqa_row"], int(match["n"])))
    return found


def marks(root: Path = REPO) -> list[Mark]:
    files = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "*.py"], cwd=root,
                           capture_output=True, text=True, check=True).stdout.split()
    found = []
    for name in files:
        path = root / name
        if not path.is_file():
            continue
        with path.open("rb") as handle:  # comments only: a string that spells a mark is not one
            comments = [t for t in tokenize.tokenize(handle.readline) if t.type == tokenize.COMMENT]
        for token in comments:
            if match := _MARK.search(token.string):
                found.append(Mark(name, token.start[0], int(match["n"]) if match["n"] else None))
    return found


def ratchet_problems(found: list[Finding], marked: list[Mark], debt: dict[str, int], exists: set[str]) -> list[str]:
    """Every way the code and DEBT disagree; [] when they agree."""
    problems = []
    by_key = {f.key: f for f in found}
    for f in found:
        listed = debt.get(f.key)
        if listed is None:
            problems.append(f"{f.key} has complexity {f.complexity} (> 12) and is not in DEBT: split it")
        elif f.complexity > listed:
            problems.append(f"{f.key} rose from {listed} to {f.complexity}: split it, it may not grow")
        elif f.complexity < listed:
            problems.append(f"{f.key} fell from {listed} to {f.complexity}: lower its number in DEBT and its mark")
    for key, listed in debt.items():
        if key not in by_key and key.split("::")[0] in exists:
            problems.append(f"{key} is at 12 or under now (listed {listed}): delete its line in DEBT and its mark")
    at = {(f.key.split("::")[0], f.line): f for f in found}
    for m in marked:
        f = at.get((m.path, m.line))
        if f is None:
            problems.append(f"{m.path}:{m.line}: a `# noqa: C901` where no function is over the limit: delete it")
        elif m.number != f.complexity:
            problems.append(f"{m.path}:{m.line}: the mark says ({m.number}), {f.key} is {f.complexity}: "
                            f"write `# noqa: C901 ({f.complexity})`")
    return problems


def test_the_code_and_the_debt_list_agree():
    exists = {key.split("::")[0] for key in DEBT if (REPO / key.split("::")[0]).exists()}
    assert ratchet_problems(findings(), marks(), DEBT, exists) == []


def test_every_function_over_the_limit_is_found(tmp_path: Path):
    """ruff measures with the project's configuration: complexity 14 is over the limit, 12 is not."""
    (tmp_path / "pyproject.toml").write_text((REPO / "pyproject.toml").read_text())

    def function(name: str, branches: int, mark: str = "") -> str:
        return f"def {name}(x):{mark}\n" + "".join(f"    if x == {i}:\n        return {i}\n" for i in range(branches)) + "    return -1\n"

    (tmp_path / "m.py").write_text(function("big", 13, "  # noqa: C901 (14)") + "\n\n" + function("small", 11))
    assert findings(tmp_path) == [Finding("m.py::big", 1, 14)]


F = Finding("a.py::f", 10, 15)
CASES = {
    "agree": ([F], [Mark("a.py", 10, 15)], {"a.py::f": 15}, []),
    "not-listed": ([F], [Mark("a.py", 10, 15)], {}, ["a.py::f has complexity 15 (> 12) and is not in DEBT: split it"]),
    "rose": ([F], [Mark("a.py", 10, 15)], {"a.py::f": 14},
             ["a.py::f rose from 14 to 15: split it, it may not grow",
              ]),
    "fell": ([F], [Mark("a.py", 10, 15)], {"a.py::f": 16},
             ["a.py::f fell from 16 to 15: lower its number in DEBT and its mark"]),
    "paid": ([], [], {"a.py::f": 15}, ["a.py::f is at 12 or under now (listed 15): delete its line in DEBT and its mark"]),
    "paid-by-deleting-the-file": ([], [], {"gone.py::f": 15}, []),
    "stray-mark": ([], [Mark("b.py", 3, 13)], {}, ["b.py:3: a `# noqa: C901` where no function is over the limit: delete it"]),
    "mark-without-a-number": ([F], [Mark("a.py", 10, None)], {"a.py::f": 15},
                              ["a.py:10: the mark says (None), a.py::f is 15: write `# noqa: C901 (15)`"]),
    "mark-with-a-stale-number": ([F], [Mark("a.py", 10, 17)], {"a.py::f": 15},
                                 ["a.py:10: the mark says (17), a.py::f is 15: write `# noqa: C901 (15)`"]),
}


@pytest.mark.parametrize(("found", "marked", "debt", "problems"), CASES.values(), ids=CASES.keys())
def test_the_ratchet_catches_each_disagreement(found, marked, debt, problems):
    assert ratchet_problems(found, marked, debt, exists={"a.py", "b.py"}) == problems
