"""How a message quotes what it was given: a user's value cut short, and a value's type by name.

A hostile value must not make a status, a 400 answer or a log line huge, so every message that
quotes a value goes through these.
"""
from __future__ import annotations

from typing import Any

# What Python decodes JSON into, named as a spec message says it ("must be a list, got an integer").
_TYPE_NAMES = {dict: "an object", list: "a list", int: "an integer", float: "a number", str: "a string"}
# The same named as JSON says it, for a request body read by the shell ("got an array").
_JSON_TYPE_NAMES = {**_TYPE_NAMES, list: "an array", int: "a number"}


def cut(text: str, limit: int) -> str:
    """The first `limit` characters of `text`, and "..." when there were more."""
    return text if len(text) <= limit else text[:limit] + "..."


def show(value: Any, *, quote: bool = True, width: int = 80) -> str:
    """A user value for a message, in at most `width` characters: its repr, or a string as it is
    when `quote` is false."""
    text = repr(value) if quote or not isinstance(value, str) else value
    return text if len(text) <= width else cut(text, width - 3)


def type_name(value: Any, *, json: bool = False) -> str:
    """A decoded value's type as a message names it (never the value itself); `json`: in JSON's words."""
    if value is None:
        return "null"
    if isinstance(value, bool):  # before int: a bool is an int to Python
        return "a boolean"
    return (_JSON_TYPE_NAMES if json else _TYPE_NAMES).get(type(value), type(value).__name__)
