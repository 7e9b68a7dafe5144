"""What the drift detector is shown (R6) and what its answer means (R6, R30), without a database.

The answers below are the shapes real models produce: fenced JSON, ids as strings, the
string "true", extra keys, an id from outside the window, no title.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from shared.drift.rules import (
    EARLIER_CONTEXT,
    MAX_NEW_TITLE_CHARS,
    DriftDecision,
    build_drift_request,
    parse_drift_answer,
)
from shared.llm.base import DriftRequest, TranscriptLine
from shared.llm.prompts import drift_messages


def _lines(first: int, last: int) -> list[TranscriptLine]:
    """Messages `first`..`last` (inclusive), alternating user and assistant."""
    return [
        TranscriptLine(id=i, role="user" if i % 2 else "assistant", content=f"message {i}")
        for i in range(first, last + 1)
    ]


def _request(recent: list[TranscriptLine], scan_back: int = 10) -> DriftRequest:
    return build_drift_request(
        topic_title="Billing", topic_summary=None, recent=recent, scan_back=scan_back
    )


# A topic of 30 messages (ids 101..130): the window is 121..130, 101..120 came before.
TOPIC = _request(_lines(101, 130))


def _answer(**fields: Any) -> str:
    return json.dumps({"drift": True, "first_message_id": 125, "new_title": "Hiking"} | fields)


# --- build_drift_request: the window -----------------------------------------------------


@pytest.mark.parametrize("count", [1, 5, 9, 10])
def test_r6_a_topic_shorter_than_the_scan_back_is_all_window_and_no_earlier(count: int) -> None:
    recent = _lines(1, count)
    request = _request(recent)
    assert [line.id for line in request.window] == [line.id for line in recent]
    assert list(request.earlier) == []


def test_r6_the_window_is_the_last_scan_back_messages_and_the_rest_came_earlier() -> None:
    request = _request(_lines(1, 14))
    assert [line.id for line in request.window] == list(range(5, 15))
    assert [line.id for line in request.earlier] == [1, 2, 3, 4]
    assert (request.topic_title, request.topic_summary) == ("Billing", None)


def test_r6_earlier_context_is_bounded_to_the_newest_messages_before_the_window() -> None:
    request = _request(_lines(1, 100), scan_back=7)
    assert [line.id for line in request.window] == list(range(94, 101))
    assert len(request.earlier) == EARLIER_CONTEXT == 20
    assert [line.id for line in request.earlier] == list(range(74, 94))


def test_r6_the_detector_is_shown_the_topics_summary() -> None:
    """What the topic is about so far is what a new subject differs from."""
    request = build_drift_request(
        topic_title="Billing", topic_summary="Chose PostgreSQL for invoices.",
        recent=_lines(1, 14), scan_back=10,
    )  # fmt: skip
    assert (request.topic_title, request.topic_summary) == (
        "Billing", "Chose PostgreSQL for invoices.",
    )  # fmt: skip
    assert "Topic summary: Chose PostgreSQL for invoices." in drift_messages(request)[1]["content"]


def test_r6_a_scan_back_of_one_judges_only_the_newest_message() -> None:
    request = _request(_lines(1, 3), scan_back=1)
    assert [line.id for line in request.window] == [3]
    assert [line.id for line in request.earlier] == [1, 2]


# --- parse_drift_answer: a fork ----------------------------------------------------------


def test_r30_drift_true_with_an_id_in_the_window_is_a_fork() -> None:
    assert parse_drift_answer(_answer(), TOPIC) == DriftDecision(125, "Hiking")


@pytest.mark.parametrize("first", [121, 130])
def test_r6_both_ends_of_the_window_are_in_it(first: int) -> None:
    decision = parse_drift_answer(_answer(first_message_id=first), TOPIC)
    assert decision is not None and decision.first_message_id == first


@pytest.mark.parametrize("first", ["125", " 125 ", "+125"])
def test_r6_an_id_sent_as_a_string_of_digits_is_read_as_the_id(first: str) -> None:
    assert parse_drift_answer(_answer(first_message_id=first), TOPIC) == DriftDecision(
        125, "Hiking"
    )


def test_r30_extra_keys_in_the_answer_are_ignored() -> None:
    answer = _answer(confidence=0.93, reasoning="the user moved on to hiking", drift_score=[1])
    assert parse_drift_answer(answer, TOPIC) == DriftDecision(125, "Hiking")


@pytest.mark.parametrize(
    "answer",
    [
        json.dumps({"drift": True, "first_message_id": 125}),
        _answer(new_title=None),
        _answer(new_title=""),
        _answer(new_title="   \n "),
        _answer(new_title=42),
        _answer(new_title=["Hiking"]),
    ],
    ids=["missing", "null", "empty", "blank", "number", "list"],
)
def test_r6_a_fork_without_a_usable_title_still_forks_with_no_title(answer: str) -> None:
    assert parse_drift_answer(answer, TOPIC) == DriftDecision(125, None)


def test_r6_the_new_title_is_one_line_and_bounded() -> None:
    decision = parse_drift_answer(_answer(new_title="  Dolomites\n\thike  plan "), TOPIC)
    assert decision is not None and decision.new_title == "Dolomites hike plan"
    decision = parse_drift_answer(_answer(new_title="word " * 100), TOPIC)
    assert decision is not None and decision.new_title is not None
    assert len(decision.new_title) == MAX_NEW_TITLE_CHARS == 120


def test_r6_the_first_message_of_the_window_forks_when_the_topic_began_before_it() -> None:
    assert parse_drift_answer(_answer(first_message_id=121), TOPIC) == DriftDecision(121, "Hiking")


# --- parse_drift_answer: anything else is no drift -----------------------------------------


@pytest.mark.parametrize(
    "first",
    [101, 120, 100, 131, 10**9, -125, 0],
    ids=["topic start", "just before", "before topic", "after", "huge", "negative", "zero"],
)
def test_r6_an_id_outside_the_window_is_no_drift(first: int) -> None:
    assert parse_drift_answer(_answer(first_message_id=first), TOPIC) is None


@pytest.mark.parametrize(
    "first",
    [None, "six", "", "12 5", "125.0", 125.0, [125], {"id": 125}, "0x7d"],
    ids=["null", "word", "empty", "spaced", "decimal string", "float", "list", "object", "hex"],
)
def test_r6_an_id_that_is_not_an_integer_is_no_drift(first: Any) -> None:
    assert parse_drift_answer(_answer(first_message_id=first), TOPIC) is None


def test_r6_a_boolean_id_is_not_taken_for_message_1() -> None:
    # true == 1 in Python: without the bool check this would fork at message 1.
    request = _request(_lines(-8, 1))  # ids -8..1: message 1 is the newest of the window
    assert parse_drift_answer(_answer(first_message_id=1), request) == DriftDecision(1, "Hiking")
    assert parse_drift_answer(_answer(first_message_id=True), request) is None


def test_r6_a_fork_that_would_move_the_whole_topic_is_no_drift() -> None:
    # The topic is only the window: its first message starting a new subject means the
    # topic itself is that subject, and the old topic would be left empty.
    request = _request(_lines(1, 8))
    assert list(request.earlier) == []
    assert parse_drift_answer(_answer(first_message_id=1), request) is None
    assert parse_drift_answer(_answer(first_message_id=2), request) == DriftDecision(2, "Hiking")


@pytest.mark.parametrize(
    "drift",
    ["true", "True", "yes", 1, None, [True], {"value": True}],
    ids=["string true", "string True", "yes", "one", "null", "list", "object"],
)
def test_r30_only_a_json_boolean_true_is_drift(drift: Any) -> None:
    assert parse_drift_answer(_answer(drift=drift), TOPIC) is None


def test_r30_drift_false_is_no_drift_even_with_an_id_in_the_window() -> None:
    assert parse_drift_answer(_answer(drift=False), TOPIC) is None
    assert parse_drift_answer(json.dumps({"first_message_id": 125}), TOPIC) is None


FENCED = "```json\n" + _answer() + "\n```"


@pytest.mark.parametrize(
    "text",
    [
        FENCED,
        "Sure! " + _answer(),
        _answer()[:-10],
        "",
        "null",
        "true",
        "125",
        json.dumps([{"drift": True, "first_message_id": 125}]),
        '"drift"',
    ],
    ids=[
        "fenced",
        "prose first",
        "truncated",
        "empty",
        "null",
        "true",
        "number",
        "array",
        "string",
    ],
)
def test_r30_an_answer_that_is_not_one_json_object_is_no_drift(text: str) -> None:
    # A fenced block is refused like any other non-JSON text: the provider asks for
    # JSON mode, and a model that ignores it gets no fork rather than a guessed one.
    assert parse_drift_answer(text, TOPIC) is None


def test_r30_a_deeply_nested_answer_is_no_drift() -> None:
    # json.loads recurses: a parser that caught only ValueError raised RecursionError here,
    # and the evaluation job failed instead of refreshing in place.
    assert parse_drift_answer("[" * 100_000 + "]" * 100_000, TOPIC) is None
