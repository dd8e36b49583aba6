"""Every image builds from the context Docker would send: each COPY source survives `.dockerignore`.

Computed without any engine, with Docker's own rules (moby's patternmatcher; `make image-check` also
builds the images with buildah, which reads the same .dockerignore): patterns are cleaned paths matched with `*`, `?` and `**`; a pattern
that matches a parent directory matches everything below it; `!` re-includes; the last pattern
that matches a path decides.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
IMAGES = ["Dockerfile", "examples/digits/Dockerfile"]  # every Dockerfile, built from the repository root


def read_patterns(text: str) -> list[tuple[bool, re.Pattern[str]]]:
    """(is an exception, regex) per line of a .dockerignore, as Docker reads it."""
    patterns = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        exception = line.startswith("!")
        line = os.path.normpath(line[1:].strip() if exception else line).lstrip("/")
        patterns.append((exception, re.compile(glob_regex(line))))
    return patterns


def glob_regex(pattern: str) -> str:
    out, i = "^", 0
    while i < len(pattern):
        char = pattern[i]
        if pattern.startswith("**/", i):
            out, i = out + "(.*/)?", i + 3
        elif pattern.startswith("**", i):
            out, i = out + ".*", i + 2
        elif char == "*":
            out, i = out + "[^/]*", i + 1
        elif char == "?":
            out, i = out + "[^/]", i + 1
        elif char == "[":
            end = pattern.index("]", i)
            out, i = out + pattern[i:end + 1], end + 1
        else:
            out, i = out + re.escape(char), i + 1
    return out + "$"


def excluded(path: str, patterns: list[tuple[bool, re.Pattern[str]]]) -> bool:
    """Docker's MatchesOrParentMatches: the path or one of its parent directories decides."""
    parents = path.split("/")[:-1]
    candidates = [path] + ["/".join(parents[:n]) for n in range(1, len(parents) + 1)]
    matched = False
    for exception, regex in patterns:
        if exception != matched:
            continue  # an include that already matched, or an exception with nothing to undo
        if any(regex.match(candidate) for candidate in candidates):
            matched = not exception
    return matched


def context(ignore_text: str) -> set[str]:
    """The files (of those git tracks) that Docker would send as the build context."""
    tracked = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                             capture_output=True, text=True, check=True).stdout.split()
    patterns = read_patterns(ignore_text)
    return {path for path in tracked if (ROOT / path).is_file() and not excluded(path, patterns)}


def copy_sources(dockerfile: Path) -> list[str]:
    """The context paths every COPY/ADD of a Dockerfile reads (not those copied from another stage)."""
    sources = []
    joined = re.sub(r"\\\n", " ", dockerfile.read_text())
    for line in joined.splitlines():
        words = shlex.split(line.strip(), comments=True) if line.strip() else []
        if not words or words[0].upper() not in ("COPY", "ADD"):
            continue
        args = words[1:]
        if any(arg.startswith("--from") for arg in args):
            continue
        args = [arg for arg in args if not arg.startswith("--")]
        sources += [os.path.normpath(src).lstrip("/") for src in args[:-1]]
    return sources


def provided(source: str, files: set[str]) -> bool:
    return source in files or any(path.startswith(source.rstrip("/") + "/") for path in files)


@pytest.mark.parametrize(("pattern", "path", "expected"), [
    ("*", "examples/digits/train.py", True),           # a parent directory matches
    ("*\n!hooks/", "hooks/shared/k8s.py", False),     # an exception re-includes a whole folder
    ("*\n!hooks/\n**/__pycache__", "hooks/__pycache__/a.pyc", True),
    ("*\n!examples/digits/train.py", "examples/digits/train.py", False),
    ("*\n!examples/digits/train.py", "examples/digits/Dockerfile", True),
    ("docs/*.md", "docs/a.md", True),
    ("docs/*.md", "docs/x/a.md", False),             # * does not cross a /
    ("/docs", "docs/a.md", True),                     # a leading / is dropped
], ids=["star-parent", "exception-folder", "pycache", "exception-file", "sibling-still-out", "star", "star-no-slash", "leading-slash"])
def test_patterns_follow_dockers_rules(pattern: str, path: str, expected: bool):
    assert excluded(path, read_patterns(pattern)) is expected


@pytest.mark.parametrize("dockerfile", IMAGES)
def test_every_copy_source_is_in_the_build_context(dockerfile: str):
    files = context((ROOT / ".dockerignore").read_text())
    sources = copy_sources(ROOT / dockerfile)
    assert sources, f"{dockerfile} copies nothing"
    missing = [src for src in sources if not provided(src, files)]
    assert not missing, f"{dockerfile}: .dockerignore leaves {missing} out of the context"


def test_without_constraints_txt_in_the_context_no_image_builds():
    ignore = (ROOT / ".dockerignore").read_text().replace("!constraints.txt\n", "")
    files = context(ignore)
    for dockerfile in IMAGES:
        assert "constraints.txt" in copy_sources(ROOT / dockerfile)
        assert not provided("constraints.txt", files)


def test_the_old_allow_list_would_have_broken_the_digits_image():
    old = "*\n!requirements.txt\n!hooks/\n**/__pycache__\n**/*.pyc\n"
    files = context(old)
    assert not provided("requirements-mxnet.txt", files) and not provided("examples/digits/train.py", files)


def test_the_context_carries_no_tests_docs_or_local_state():
    files = context((ROOT / ".dockerignore").read_text())
    assert files, "the context is empty"
    assert not [path for path in files if path.split("/")[0] in ("tests", "docs", ".git", ".venv", ".localcluster", "localcluster")]
    assert not [path for path in files if "__pycache__" in path or path.endswith(".pyc")]
