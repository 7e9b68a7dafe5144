"""Pure rules of summarization: reading the model's answer (R13), the fallback (R14)."""

from __future__ import annotations

import json
from dataclasses import dataclass

from shared.curation.rules import strict_include_in_memory
from shared.domain.limits import MAX_SUMMARY_CHARS
from shared.llm.text import clip

MAX_TITLE_CHARS = 120
FALLBACK_TITLE_CHARS = 60
FALLBACK_SUMMARY_CHARS = 280


@dataclass(frozen=True)
class ParsedSummary:
    title: str
    summary: str
    include_in_memory: bool


def parse_summary_answer(text: str) -> ParsedSummary | None:
    """The model's answer, or None when it is unusable (not a JSON object, no title/summary).

    include_in_memory is True only for a JSON boolean true (R13).
    """
    try:
        answer = json.loads(text)
    except (ValueError, RecursionError):  # a model can answer `[[[[…` too
        return None
    if not isinstance(answer, dict):
        return None
    title, summary = answer.get("title"), answer.get("summary")
    if not isinstance(title, str) or not isinstance(summary, str):
        return None
    title, summary = " ".join(title.split()), summary.strip()
    if not title or not summary:
        return None
    return ParsedSummary(
        title=title[:MAX_TITLE_CHARS],
        summary=summary[:MAX_SUMMARY_CHARS],
        include_in_memory=strict_include_in_memory(answer),
    )


def fallback_summary(first_user_message: str | None) -> tuple[str, str]:
    """R14: title and summary built deterministically from the first user message."""
    text = " ".join((first_user_message or "").split())
    if not text:
        return "Untitled topic", "(no user messages)"
    return clip(text, FALLBACK_TITLE_CHARS), clip(text, FALLBACK_SUMMARY_CHARS)
