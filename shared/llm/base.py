"""The LLM protocol the domain depends on. Providers return raw JSON text; the pure
rules in `shared.summaries.rules` (and drift's) decide what an answer means, so a
malformed answer is handled the same way whichever provider produced it."""

from __future__ import annotations

import math
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol


@dataclass(frozen=True)
class TranscriptLine:
    """One message as the LLM sees it."""

    id: int
    role: str  # user | assistant | tool
    content: str
    tool_name: str | None = None


@dataclass(frozen=True)
class SummaryRequest:
    """Everything one summarization call sees (R9): the topic's history and its notes.

    `omitted` counts messages left out of `lines` to bound the prompt; when it is > 0,
    `previous_summary` (if any) stands in for what was omitted.
    """

    lines: Sequence[TranscriptLine]
    notes: str | None = None
    omitted: int = 0
    previous_summary: str | None = None
    org_id: uuid.UUID | None = None  # whose call it is, for accounting; never sent


@dataclass(frozen=True)
class DriftRequest:
    """One drift-detection call: the topic so far, and the scan-back window to judge.

    `omitted` counts the messages before the shown ones that were left out to bound the
    prompt (shared/llm/bounds.py): when it is > 0 the topic began before what is shown.
    """

    topic_title: str | None
    topic_summary: str | None
    earlier: Sequence[TranscriptLine]  # the topic's messages before the window (bounded)
    window: Sequence[TranscriptLine]  # the last DRIFTLESS_SCAN_BACK messages, oldest first
    org_id: uuid.UUID | None = None  # whose call it is, for accounting; never sent
    omitted: int = 0


# The most tokens one call is counted for, prompt or completion. Above any model's
# context window (the largest hold 10M), so an honest count is never cut; below what a
# 64-bit sum of an org's calls could overflow for billions of calls. A server reports
# what it likes (an org's own one above all): 4e9, -5 or "lots" must not break an org's
# usage and limits, or the metrics counter (which refuses a negative).
MAX_CALL_TOKENS = 2**24


def _counted(tokens: object) -> int:
    """A server's token count, as accounting takes it: a whole number in 0..MAX_CALL_TOKENS
    (a fraction, its whole part; anything else, 0)."""
    if isinstance(tokens, float) and math.isfinite(tokens):
        tokens = int(tokens)
    if isinstance(tokens, bool) or not isinstance(tokens, int):
        return 0
    return min(max(tokens, 0), MAX_CALL_TOKENS)


@dataclass(frozen=True)
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0

    @classmethod
    def reported(cls, prompt_tokens: object, completion_tokens: object) -> Usage:
        """The usage a server reported, each count clamped to 0..MAX_CALL_TOKENS."""
        return cls(_counted(prompt_tokens), _counted(completion_tokens))


@dataclass(frozen=True)
class Completion:
    """The raw text of one answer (meant to be a JSON object) and what it cost."""

    text: str
    model: str
    usage: Usage = field(default_factory=Usage)


@dataclass(frozen=True)
class LLMCall:
    """One call a provider made, answered or failed, as accounting records it."""

    org_id: uuid.UUID | None  # the org of the topic it was made for (None: no topic's)
    model: str  # as configured, not the answer's dated variant
    purpose: str  # summarize | detect_drift
    failed: bool
    usage: Usage = field(default_factory=Usage)  # zero for a failed call
    # Made with the org's own model (PUT /agents-api/provider): its name is the org's to
    # choose, so the metrics label the call "own" (shared/infra/metrics.py); the ledger
    # keeps the name.
    own_model: bool = False


# Told of every call a provider makes, right after it returns or fails (the usage
# ledger, shared/usage/). It must not raise: accounting never fails the caller's work.
CallListener = Callable[[LLMCall], None]


class LLMError(Exception):
    """The call failed entirely: after the client's own retries, or past its time limit.

    `retryable`: another attempt may succeed (a timeout, a dropped connection, 429, 5xx).
    """

    def __init__(self, message: str, *, retryable: bool = False) -> None:
        super().__init__(message)
        self.retryable = retryable


class LLM(Protocol):
    model: str

    def summarize(self, request: SummaryRequest) -> Completion:
        """One call: title, summary and include_in_memory for the topic (R9, R10)."""
        ...

    def detect_drift(self, request: DriftRequest) -> Completion:
        """One call: {drift, first_message_id, new_title} for the window (R30)."""
        ...
