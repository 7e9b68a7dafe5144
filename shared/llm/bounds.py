"""How much of a conversation one LLM call is shown: the caps both prompts share.

A topic's messages can outgrow any model's context, and one pasted document can crowd
out the rest of a conversation. The summary's transcript (shared/summaries/transcript.py)
and the drift request (shared/drift/rules.py) are cut by these same functions, so the two
calls of an evaluation cost the same bounded amount, and the rate limiter, which charges
the prompt it is given, is charged that bound.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from shared.llm.base import TranscriptLine

MAX_TRANSCRIPT_CHARS = 48_000  # ≈ 12k tokens: fits small models with room to answer
MAX_LINE_CHARS = 4_000  # one pasted document must not crowd out the conversation
_CUT_MARK = " […]"
_LINE_OVERHEAD = 16  # the line's tag: its role, and for drift its id


def cap_line(line: TranscriptLine) -> TranscriptLine:
    """`line` with its content cut to MAX_LINE_CHARS characters, marked where cut."""
    if len(line.content) <= MAX_LINE_CHARS:
        return line
    return replace(line, content=line.content[:MAX_LINE_CHARS] + _CUT_MARK)


def line_size(line: TranscriptLine) -> int:
    """What a line costs of a transcript's MAX_TRANSCRIPT_CHARS."""
    return len(line.content) + _LINE_OVERHEAD


def newest_that_fit(newest_first: Iterable[TranscriptLine], budget: int) -> list[TranscriptLine]:
    """The newest lines whose sizes fit in `budget` characters, oldest first.

    Stops at the first line that does not fit: what is shown is one unbroken run of the
    newest messages, never a newer and an older one with a gap between them.
    """
    fitting: list[TranscriptLine] = []
    for line in newest_first:
        budget -= line_size(line)
        if budget < 0:
            break
        fitting.append(line)
    fitting.reverse()
    return fitting
