"""The domain's caps on what a client may store (shared/domain/limits.py), without a database.

The HTTP, tool and MCP paths are tested against them in tests/integration
(test_json_limits.py, test_size_limits.py); these pin the functions' own edges.
"""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from shared.domain.errors import Invalid, TooLarge
from shared.domain.limits import (
    DEFAULT_MAX_JSON_DEPTH,
    MAX_MESSAGE_CHARS,
    Limits,
    check_json,
    check_message_content,
    check_size,
    json_size,
    loads_checked,
    raw_json_depth,
)

LIMITS = Limits()


def _nested(depth: int, leaf: Any = 1) -> Any:
    """`leaf` inside `depth` alternating objects and lists, built without recursion."""
    value = leaf
    for level in range(depth):
        value = {"a": value} if level % 2 else [value]
    return value


def _nested_text(depth: int, leaf: str = "1") -> str:
    return '{"a":' * depth + leaf + "}" * depth


# --- json_size -----------------------------------------------------------------------------


def test_json_size_counts_utf8_bytes_without_padding() -> None:
    assert json_size({"a": "é"}) == len('{"a":"é"}'.encode()) == 10
    assert json_size({"k": [1, 2]}) == len('{"k":[1,2]}')
    assert json_size("€") == 5  # quotes plus three bytes, not \u20ac's eight


# --- check_json ----------------------------------------------------------------------------


def test_check_json_accepts_a_document_exactly_at_the_depth_limit() -> None:
    assert DEFAULT_MAX_JSON_DEPTH == 32
    check_json(_nested(32), field="facts", limits=LIMITS)
    check_json(_nested(32, leaf={}), field="facts", limits=Limits(max_json_depth=33))


def test_check_json_refuses_one_level_past_the_limit_and_names_the_field() -> None:
    with pytest.raises(Invalid, match=r"^skills: nested deeper than 32 levels"):
        check_json(_nested(33), field="skills", limits=LIMITS)
    with pytest.raises(Invalid):
        check_json(_nested(32, leaf=[]), field="skills", limits=LIMITS)  # an empty list counts


def test_check_json_scalars_do_not_count_as_a_level() -> None:
    check_json({"a": "b", "c": [1, 2.5, None, True, "x"]}, field="f", limits=Limits(2))
    check_json("a string", field="f", limits=Limits(max_json_depth=1))
    with pytest.raises(Invalid):
        check_json({"c": [[1]]}, field="f", limits=Limits(max_json_depth=2))


def test_check_json_follows_a_configured_limit() -> None:
    check_json(_nested(5), field="f", limits=Limits(max_json_depth=5))
    with pytest.raises(Invalid, match="deeper than 4 levels"):
        check_json(_nested(5), field="f", limits=Limits(max_json_depth=4))


def test_check_json_refuses_a_hundred_thousand_levels_without_recursing() -> None:
    with pytest.raises(Invalid):
        check_json(_nested(100_000), field="f", limits=LIMITS)


@pytest.mark.parametrize("number", [math.nan, math.inf, -math.inf, float("1e999")])
def test_check_json_refuses_non_finite_numbers_wherever_they_are(number: float) -> None:
    for value in (number, [1, number], {"a": {"b": [number]}}):
        with pytest.raises(Invalid, match="is not a JSON number"):
            check_json(value, field="f", limits=LIMITS)


def test_check_json_accepts_large_but_finite_numbers() -> None:
    check_json([1.7e308, -1.7e308, 10**400, 0.0, -0.0], field="f", limits=LIMITS)


# --- check_size and check_message_content ---------------------------------------------------


def test_check_size_allows_exactly_the_limit_and_refuses_one_byte_more() -> None:
    value = {"k": "v" * 10}
    check_size(value, what="the facts document", max_bytes=json_size(value))
    with pytest.raises(TooLarge, match="the facts document would exceed 17 bytes"):
        check_size(value, what="the facts document", max_bytes=json_size(value) - 1)


def test_check_size_counts_bytes_not_characters() -> None:
    with pytest.raises(TooLarge):
        check_size("é" * 10, what="x", max_bytes=12 + 1)  # 10 characters, 22 bytes


def test_a_message_at_the_limit_is_accepted_and_one_character_more_is_invalid() -> None:
    assert MAX_MESSAGE_CHARS == 100_000
    check_message_content("x" * MAX_MESSAGE_CHARS)
    check_message_content("é" * MAX_MESSAGE_CHARS)  # characters, not bytes
    with pytest.raises(Invalid, match="100001 characters"):
        check_message_content("x" * (MAX_MESSAGE_CHARS + 1))


# --- raw_json_depth ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "depth"),
    [
        ("1", 0),
        ('"a string"', 0),
        ("[]", 1),
        ("{}", 1),
        ('{"a": [1, {"b": 2}]}', 3),
        ("[[], [[]], []]", 3),
        ('{"a": "[[[[{{{{"}', 1),
        ('{"a": "\\"[[[["}', 1),  # an escaped quote does not end the string
        ('{"a": "\\\\", "b": [[]]}', 3),  # an escaped backslash does
        ("[[[", 3),  # unbalanced: the deepest point is what counts
        ("]]][", 0),  # closers before openers hide nothing: see below
    ],
)
def test_raw_json_depth_counts_brackets_outside_strings(text: str, depth: int) -> None:
    assert raw_json_depth(text) == depth


def test_raw_json_depth_agrees_with_the_parsed_depth() -> None:
    text = _nested_text(40)
    assert raw_json_depth(text) == 40
    with pytest.raises(Invalid):
        check_json(json.loads(text), field="f", limits=Limits(max_json_depth=39))
    check_json(json.loads(text), field="f", limits=Limits(max_json_depth=40))


def test_raw_json_depth_reads_a_hundred_thousand_brackets() -> None:
    assert raw_json_depth("[" * 100_000 + "]" * 100_000) == 100_000


# --- loads_checked -------------------------------------------------------------------------


def test_loads_checked_parses_ordinary_json() -> None:
    text = '{"a": [1, 2.5, "é", null, true], "b": {"c": -1e10}}'
    assert loads_checked(text, limits=LIMITS) == json.loads(text)


def test_loads_checked_allows_exactly_the_depth_limit() -> None:
    assert loads_checked(_nested_text(32), limits=LIMITS) == json.loads(_nested_text(32))
    with pytest.raises(Invalid, match=r"^body: nested deeper than 32 levels"):
        loads_checked(_nested_text(33), limits=LIMITS)


def test_loads_checked_refuses_deep_nesting_before_the_parser_recurses() -> None:
    with pytest.raises(Invalid):
        loads_checked("[" * 100_000 + "]" * 100_000, limits=LIMITS)


def test_loads_checked_stray_closers_cannot_smuggle_deep_nesting_to_the_parser() -> None:
    # raw_json_depth reads 0 here, but the parser stops at the first stray `]` or after
    # the first complete value, before it could recurse into the brackets that follow.
    for text in ("]" * 100_000 + "[" * 100_000, "[1]" + "]" * 100_000 + "[" * 100_000):
        assert raw_json_depth(text) <= 1
        with pytest.raises(ValueError) as raised:
            loads_checked(text, limits=LIMITS)
        assert not isinstance(raised.value, Invalid)


def test_loads_checked_does_not_count_brackets_inside_strings() -> None:
    text = json.dumps({"a": "[" * 1000})
    assert loads_checked(text, limits=LIMITS) == {"a": "[" * 1000}


@pytest.mark.parametrize(
    "text",
    ['{"a": NaN}', '{"a": Infinity}', '{"a": -Infinity}', "[1e999]", "[-1e999]"],
)
def test_loads_checked_refuses_non_finite_numbers(text: str) -> None:
    with pytest.raises(Invalid, match=r"^body: "):
        loads_checked(text, limits=LIMITS)


def test_loads_checked_keeps_large_finite_numbers_and_big_integers() -> None:
    assert loads_checked("[1.7e308, 12345678901234567890]", limits=LIMITS) == [
        1.7e308,
        12345678901234567890,
    ]


@pytest.mark.parametrize("text", ["", "{", "{'a': 1}", "[1,]", "nope"])
def test_loads_checked_raises_value_error_for_malformed_json(text: str) -> None:
    with pytest.raises(ValueError) as raised:
        loads_checked(text, limits=LIMITS)
    assert not isinstance(raised.value, Invalid)


def test_loads_checked_accepts_more_brackets_than_the_depth_limit_when_none_nest_deep() -> None:
    # Past the limit's number of brackets the full scan runs (the count is only a bound).
    flat = json.dumps([[i] for i in range(1000)])
    assert loads_checked(flat, limits=LIMITS) == json.loads(flat)
