"""How messages quote values (hooks.shared.messages): short, and a type by its name, never the value."""
from __future__ import annotations

import pytest

from hooks.shared.messages import cut, show, type_name


def test_show_quotes_a_value_and_fits_a_long_one_in_the_width():
    assert show("ab") == "'ab'"
    assert show("ab", quote=False) == "ab"
    assert show("x" * 100) == "'" + "x" * 76 + "..."
    assert len(show("x" * 100, width=40)) == 40


def test_cut_keeps_the_limit_and_says_there_was_more():
    assert cut("abc", 3) == "abc"
    assert cut("abcd", 3) == "abc..."


@pytest.mark.parametrize(("value", "spec", "json"), [
    (None, "null", "null"), (True, "a boolean", "a boolean"), (1, "an integer", "a number"),
    (1.5, "a number", "a number"), ("s", "a string", "a string"), ([], "a list", "an array"),
    ({}, "an object", "an object"),
])
def test_type_name_in_a_specs_words_and_in_jsons(value, spec, json):
    assert (type_name(value), type_name(value, json=True)) == (spec, json)
