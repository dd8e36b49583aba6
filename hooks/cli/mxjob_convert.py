"""The `mxjob-convert FILE|-` command: v1alpha1 MXJob manifests in, kubeflow.org/v1 YAML out.

The shell around hooks.mxjob.convert: reads a file or stdin (any number of YAML documents),
writes every document to stdout (converted MXJobs, everything else untouched) and each field it
could not carry to stderr. YAML is read and written with ruamel.yaml's round-trip mode, so
comments inside what is carried whole (metadata, pod templates) and at the top of a document
survive; comments on the restructured parts (the replica list, spec's own fields) do not.

Exit codes: 0 converted with nothing to report, 1 converted but something was reported, 2 the
input could not be read (no such file, not UTF-8, not YAML); nothing is written then.
"""
from __future__ import annotations

import argparse
import io
import sys
from collections.abc import Sequence
from typing import Any, TextIO

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap
from ruamel.yaml.error import YAMLError

from hooks.mxjob.convert import convert_document

EXIT_OK, EXIT_WARNINGS, EXIT_UNREADABLE = 0, 1, 2


def main(argv: Sequence[str] | None = None, *, stdin: TextIO | None = None,
         stdout: TextIO | None = None, stderr: TextIO | None = None) -> int:
    """Run the command; the streams are parameters so tests can drive it without a process."""
    stdin, stdout, stderr = stdin or sys.stdin, stdout or sys.stdout, stderr or sys.stderr
    parser = argparse.ArgumentParser(
        prog="mxjob-convert",
        description="Convert kubeflow.org/v1alpha1 MXJob manifests to kubeflow.org/v1. Writes "
                    "every document to stdout and what could not be carried to stderr.")
    parser.add_argument("file", metavar="FILE", help="a YAML file, or - for standard input")
    args = parser.parse_args(argv)
    source = "<stdin>" if args.file == "-" else args.file

    yaml = _yaml()
    try:
        text = stdin.read() if args.file == "-" else _read(args.file)
        documents = [d for d in yaml.load_all(text) if d is not None]
    except (OSError, UnicodeDecodeError, YAMLError) as err:
        print(f"mxjob-convert: cannot read {source}: {err}", file=stderr)
        return EXIT_UNREADABLE

    out, reported = [], False
    if not documents:
        print(f"mxjob-convert: {source} holds no YAML document; nothing to convert", file=stderr)
        return EXIT_WARNINGS
    for number, doc in enumerate(documents, start=1):
        where = f"{source}: document {number}"
        items = doc.get("items") if isinstance(doc, dict) and doc.get("kind") == "List" else None
        if isinstance(items, list):
            # `kubectl get -o yaml` writes several objects as one List: convert the MXJobs in it.
            for index, item in enumerate(items):
                items[index], warned = _convert(item, f"{where}, items[{index}]", stderr)
                reported = reported or warned
            out.append(doc)
            continue
        document, warned = _convert(doc, where, stderr)
        out.append(document)
        reported = reported or warned

    buffer = io.StringIO()
    yaml.dump_all(out, buffer)
    stdout.write(buffer.getvalue())
    return EXIT_WARNINGS if reported else EXIT_OK


def _convert(doc: Any, where: str, stderr: TextIO) -> tuple[Any, bool]:
    """One object converted (or left as it is), what happened said on stderr; and whether it warned."""
    result = convert_document(doc)
    where += _named(doc)
    if result.converted:
        print(f"{where}: converted to kubeflow.org/v1", file=stderr)
    for warning in result.warnings:
        print(f"{where}: {warning}", file=stderr)
    document = _with_comments_of(doc, result.document) if result.converted else result.document
    return document, bool(result.warnings)


def _yaml() -> YAML:
    yaml = YAML(typ="rt")
    yaml.preserve_quotes = True
    yaml.width = 4096  # never fold long strings (commands, args) into several lines
    yaml.indent(mapping=2, sequence=4, offset=2)
    yaml.explicit_start = True
    return yaml


def _read(path: str) -> str:
    with open(path, encoding="utf-8") as handle:
        return handle.read()


def _named(doc: Any) -> str:
    meta = doc.get("metadata") if isinstance(doc, dict) else None
    name = meta.get("name") if isinstance(meta, dict) else None
    return f" (MXJob {name})" if name else ""


def _with_comments_of(original: Any, converted: dict[str, Any]) -> Any:
    """The converted document as a round-trip map that keeps the original's top-level comments."""
    result = CommentedMap(converted)
    if isinstance(original, CommentedMap):
        # The comment block above the document, and those after the keys that keep their place.
        result.ca.comment = original.ca.comment
        for key in ("apiVersion", "kind"):
            if key in original.ca.items:
                result.ca.items[key] = original.ca.items[key]
    return result


if __name__ == "__main__":
    sys.exit(main())
