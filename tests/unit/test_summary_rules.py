"""Reading the summarizer's answer (R13) and the fallback (R14), without a database.

The answers below are the shapes real models produce: fenced JSON, the string "true",
extra keys, a missing title, an empty summary, prose around the object.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from shared.summaries.rules import (
    FALLBACK_SUMMARY_CHARS,
    FALLBACK_TITLE_CHARS,
    MAX_SUMMARY_CHARS,
    MAX_TITLE_CHARS,
    ParsedSummary,
    fallback_summary,
    parse_summary_answer,
)

GOOD = {
    "title": "Launch plan",
    "summary": "Launch Friday (beta, EU only).",
    "include_in_memory": True,
}


def _answer(**fields: Any) -> str:
    return json.dumps(GOOD | fields)


# --- parse_summary_answer: a usable answer -------------------------------------------------


def test_r13_a_complete_answer_is_read_as_it_is() -> None:
    assert parse_summary_answer(_answer()) == ParsedSummary(
        title="Launch plan", summary="Launch Friday (beta, EU only).", include_in_memory=True
    )


def test_r13_false_keeps_the_summary_and_does_not_promote() -> None:
    assert parse_summary_answer(_answer(include_in_memory=False)) == ParsedSummary(
        title="Launch plan", summary="Launch Friday (beta, EU only).", include_in_memory=False
    )


@pytest.mark.parametrize(
    "include",
    ["true", "True", "yes", 1, 1.0, None, [True], {"value": True}, "include_in_memory"],
    ids=["string true", "string True", "yes", "one", "float one", "null", "list", "object", "key"],
)
def test_r13_anything_but_boolean_true_is_a_usable_answer_that_does_not_promote(
    include: Any,
) -> None:
    parsed = parse_summary_answer(_answer(include_in_memory=include))
    assert parsed == ParsedSummary(
        title="Launch plan", summary="Launch Friday (beta, EU only).", include_in_memory=False
    )


def test_r13_a_missing_include_in_memory_does_not_promote() -> None:
    answer = json.dumps({"title": "Launch plan", "summary": "Launch Friday."})
    assert parse_summary_answer(answer) == ParsedSummary("Launch plan", "Launch Friday.", False)


def test_r13_extra_keys_are_ignored_and_cannot_promote() -> None:
    answer = _answer(
        include_in_memory=False, keepInMemory=True, keep=True, confidence=0.9, tags=["launch"]
    )
    assert parse_summary_answer(answer) == ParsedSummary(
        title="Launch plan", summary="Launch Friday (beta, EU only).", include_in_memory=False
    )


def test_r13_a_repeated_key_counts_once_as_json_says_the_last_one() -> None:
    answer = '{"title": "T", "summary": "S", "include_in_memory": true, "include_in_memory": false}'
    assert parse_summary_answer(answer) == ParsedSummary("T", "S", False)


def test_r9_the_title_is_one_line_and_the_summary_is_trimmed_but_keeps_its_lines() -> None:
    parsed = parse_summary_answer(
        _answer(title="  Launch\n\tplan  v2 ", summary="\n  Friday.\n- beta\n- EU only\n\n")
    )
    assert parsed is not None
    assert parsed.title == "Launch plan v2"
    assert parsed.summary == "Friday.\n- beta\n- EU only"


def test_r9_title_and_summary_are_bounded() -> None:
    parsed = parse_summary_answer(_answer(title="t" * 500, summary="s" * 5000))
    assert parsed is not None
    assert parsed.title == "t" * MAX_TITLE_CHARS and MAX_TITLE_CHARS == 120
    assert parsed.summary == "s" * MAX_SUMMARY_CHARS and MAX_SUMMARY_CHARS == 2000


def test_r9_the_json_may_be_surrounded_by_whitespace() -> None:
    assert parse_summary_answer("\n  " + _answer() + "\n") == parse_summary_answer(_answer())


# --- parse_summary_answer: unusable, so R14's fallback ---------------------------------------


@pytest.mark.parametrize(
    "answer",
    [
        json.dumps({"summary": "Launch Friday.", "include_in_memory": True}),
        json.dumps({"title": "Launch plan", "include_in_memory": True}),
        _answer(title=None),
        _answer(summary=None),
        _answer(title=""),
        _answer(summary=""),
        _answer(title=" \n\t "),
        _answer(summary="   \n"),
        _answer(title=42),
        _answer(summary=["Launch", "Friday"]),
        _answer(summary={"text": "Launch Friday."}),
        json.dumps({"Title": "Launch plan", "Summary": "Launch Friday."}),
    ],
    ids=[
        "missing title", "missing summary", "null title", "null summary", "empty title",
        "empty summary", "blank title", "blank summary", "number title", "list summary",
        "object summary", "capitalised keys",
    ],
)  # fmt: skip
def test_r14_an_answer_without_a_usable_title_and_summary_is_unusable(answer: str) -> None:
    assert parse_summary_answer(answer) is None


@pytest.mark.parametrize(
    "text",
    [
        "```json\n" + _answer() + "\n```",
        "```\n" + _answer() + "\n```",
        "Here is the summary: " + _answer(),
        _answer() + " Hope this helps!",
        _answer()[:-20],
        "",
        "null",
        "true",
        '"Launch plan"',
        json.dumps([GOOD]),
        "{'title': 'Launch plan', 'summary': 'x', 'include_in_memory': True}",
    ],
    ids=[
        "fenced json", "fenced", "prose first", "prose after", "truncated", "empty", "null",
        "true", "string", "array", "python dict",
    ],
)  # fmt: skip
def test_r13_r14_an_answer_that_is_not_one_json_object_is_unusable(text: str) -> None:
    # Fenced JSON included: the provider asks for JSON mode, and the parser does not
    # guess; the caller falls back (R14), which never promotes (R13).
    assert parse_summary_answer(text) is None


def test_r14_a_deeply_nested_answer_is_unusable() -> None:
    # json.loads recurses: a parser that caught only ValueError raised RecursionError here,
    # and the summary job failed instead of storing the fallback.
    assert parse_summary_answer('{"title": ' + "[" * 100_000 + "]" * 100_000 + "}") is None


# --- fallback_summary --------------------------------------------------------------------


def test_r14_the_fallback_is_the_first_user_message_with_its_whitespace_collapsed() -> None:
    assert fallback_summary("  Migrate   billing\nto Stripe  ") == (
        "Migrate billing to Stripe",
        "Migrate billing to Stripe",
    )


@pytest.mark.parametrize("first", [None, "", "   \n\t "])
def test_r14_without_a_user_message_the_fallback_says_so(first: str | None) -> None:
    assert fallback_summary(first) == ("Untitled topic", "(no user messages)")


def test_r14_a_long_first_message_is_clipped_at_a_word_and_marked() -> None:
    first = " ".join(f"word{i}" for i in range(200))  # 1,289 characters
    title, summary = fallback_summary(first)
    assert len(title) <= FALLBACK_TITLE_CHARS == 60
    assert len(summary) <= FALLBACK_SUMMARY_CHARS == 280
    for clipped in (title, summary):
        assert clipped.endswith("…")
        assert first.startswith(clipped[:-1])
        assert first[len(clipped) - 1] == " "  # cut at a word boundary, not inside a word
    assert len(title) > FALLBACK_TITLE_CHARS - 10  # as much as fits, not a stub


def test_r14_a_first_message_with_no_spaces_is_clipped_inside_the_word() -> None:
    title, summary = fallback_summary("x" * 1000)
    assert title == "x" * (FALLBACK_TITLE_CHARS - 1) + "…"
    assert summary == "x" * (FALLBACK_SUMMARY_CHARS - 1) + "…"


def test_r14_a_first_message_that_fits_is_kept_whole() -> None:
    first = "a" * FALLBACK_TITLE_CHARS
    assert fallback_summary(first) == (first, first)


def test_r14_the_fallback_is_deterministic() -> None:
    first = "Plan the launch of the EU beta. " * 20
    assert len({fallback_summary(first) for _ in range(5)}) == 1
