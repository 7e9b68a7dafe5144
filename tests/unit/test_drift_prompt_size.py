"""The drift prompt is bounded like the summary's, and the rate limiter is charged that.

Ten 99,000-character messages once made one drift call of 247,799 prompt tokens while the
summary of the same topic stayed near 10,000: the window went to the model uncut.
"""

from __future__ import annotations

from shared.drift.rules import build_drift_request, parse_drift_answer
from shared.llm.base import Completion, DriftRequest, SummaryRequest, TranscriptLine
from shared.llm.bounds import MAX_LINE_CHARS, MAX_TRANSCRIPT_CHARS
from shared.llm.prompts import DRIFT_INSTRUCTIONS, drift_messages
from shared.llm.ratelimit import (
    DRIFT_COMPLETION_TOKENS,
    Acquired,
    RateLimitedLLM,
    estimate_tokens,
)
from shared.llm.tokens import CHARS_PER_TOKEN, approx_tokens

HUGE = 99_000
SUMMARY = "Billing: PostgreSQL, Alembic migrations, ship Friday. " * 20  # ~1,000 chars
# The summary's bound as tokens, with room for the instructions and each line's tag.
BOUND = approx_tokens(DRIFT_INSTRUCTIONS) + MAX_TRANSCRIPT_CHARS // CHARS_PER_TOKEN + 300


def _huge(first: int, count: int) -> list[TranscriptLine]:
    """`count` messages of 99,000 characters, ids from `first`, alternating roles."""
    return [
        TranscriptLine(
            id=i, role="user" if i % 2 else "assistant", content=(f"{i:06d} " * HUGE)[:HUGE]
        )
        for i in range(first, first + count)
    ]


def _request(recent: list[TranscriptLine], scan_back: int = 10) -> DriftRequest:
    return build_drift_request(
        topic_title="Billing", topic_summary=SUMMARY, recent=recent, scan_back=scan_back
    )


def _shown(request: DriftRequest) -> list[TranscriptLine]:
    return [*request.earlier, *request.window]


def _prompt_tokens(request: DriftRequest) -> int:
    return estimate_tokens(drift_messages(request), completion_tokens=0)


def test_r6_each_drift_message_is_cut_like_a_summary_line() -> None:
    recent = _huge(1, 30)
    request = _request(recent)
    shown = _shown(request)
    assert shown
    by_id = {line.id: line.content for line in recent}
    for line in shown:
        assert line.content == by_id[line.id][:MAX_LINE_CHARS] + " […]"


def test_r6_ten_huge_messages_make_a_drift_prompt_within_the_summarys_bound() -> None:
    request = _request(_huge(1, 10))
    # All ten are still judged: the cut shortens messages, it does not drop the window.
    assert [line.id for line in request.window] == list(range(1, 11))
    assert _prompt_tokens(request) <= BOUND  # was 247,799 tokens


def test_r6_a_long_topic_of_huge_messages_stays_within_the_bound_too() -> None:
    request = _request(_huge(1, 30))
    assert [line.id for line in request.window] == list(range(21, 31))
    assert _prompt_tokens(request) <= BOUND


def test_r6_a_window_larger_than_the_bound_keeps_its_newest_messages() -> None:
    request = _request(_huge(1, 40), scan_back=40)
    ids = [line.id for line in request.window]
    assert ids and ids == list(range(41 - len(ids), 41))  # the newest, in order
    assert list(request.earlier) == []  # nothing older than a message left out
    assert _prompt_tokens(request) <= BOUND
    # Messages before the window were left out, so its first message may start a new
    # subject: the old topic keeps what was left out.
    answer = f'{{"drift": true, "first_message_id": {ids[0]}, "new_title": "Hiking"}}'
    decision = parse_drift_answer(answer, request)
    assert decision is not None and decision.first_message_id == ids[0]


class _Bucket:
    """A bucket that grants everything and records what each call takes."""

    def __init__(self) -> None:
        self.taken: list[int] = []

    def try_acquire(self, tokens: int, *, apply: bool = True) -> Acquired:
        self.taken.append(tokens)
        return Acquired(granted=True, wait_ms=0, request_level=0.0, token_level=0.0)

    def adjust_tokens(self, delta: int) -> None:
        raise AssertionError("no usage was reported: nothing to true up")


class _NoDrift:
    model = "test-model"

    def summarize(self, request: SummaryRequest) -> Completion:
        raise AssertionError("not asked")

    def detect_drift(self, request: DriftRequest) -> Completion:
        return Completion(text='{"drift": false}', model=self.model)


def test_r6_the_rate_limiter_is_charged_the_bounded_drift_prompt() -> None:
    bucket = _Bucket()
    llm = RateLimitedLLM(_NoDrift(), bucket)  # type: ignore[arg-type]
    request = _request(_huge(1, 10))
    llm.detect_drift(request)
    assert bucket.taken == [
        estimate_tokens(drift_messages(request), completion_tokens=DRIFT_COMPLETION_TOKENS)
    ]
    assert bucket.taken[0] <= BOUND + DRIFT_COMPLETION_TOKENS
