"""Pure rules of drift detection: what the detector is shown, and what its answer means.

The pipeline and `bench/drift_quality.py` both build requests and read answers through
these two functions, so the benchmark measures exactly what production runs.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from shared.llm.base import DriftRequest, TranscriptLine
from shared.llm.bounds import MAX_TRANSCRIPT_CHARS, cap_line, line_size, newest_that_fit

# Messages before the scan-back window shown as the topic's context.
EARLIER_CONTEXT = 20
MAX_NEW_TITLE_CHARS = 120


@dataclass(frozen=True)
class DriftDecision:
    first_message_id: int  # the first message of the new subject; it and all after move
    new_title: str | None


def build_drift_request(
    *,
    topic_title: str | None,
    topic_summary: str | None,
    recent: Sequence[TranscriptLine],
    scan_back: int,
    org_id: uuid.UUID | None = None,
) -> DriftRequest:
    """`recent` is the topic's newest messages, oldest first (at least `scan_back` +
    EARLIER_CONTEXT when the topic has them): the last `scan_back` are the window.
    `org_id` is the topic's org, whose call the detection will be.

    Bounded as the summary's transcript is (shared/llm/bounds.py): each message is cut,
    and the window, then the earlier context, keep their newest messages that fit in
    what the title and summary leave of MAX_TRANSCRIPT_CHARS.
    """
    window = [cap_line(line) for line in recent[-scan_back:]]
    before = [cap_line(line) for line in recent[:-scan_back][-EARLIER_CONTEXT:]]
    budget = MAX_TRANSCRIPT_CHARS - len(topic_title or "") - len(topic_summary or "")
    shown = newest_that_fit(reversed(window), budget)
    budget -= sum(line_size(line) for line in shown)
    # Once the window lost a message, an older one shown would leave a gap before it.
    earlier = newest_that_fit(reversed(before), budget) if len(shown) == len(window) else []
    return DriftRequest(
        topic_title=topic_title, topic_summary=topic_summary, earlier=earlier, window=shown,
        org_id=org_id, omitted=len(window) - len(shown) + len(before) - len(earlier),
    )  # fmt: skip


def parse_drift_answer(text: str, request: DriftRequest) -> DriftDecision | None:
    """The fork the answer asks for, or None for no drift.

    Anything but a JSON object with `"drift": true` and a `first_message_id` naming a
    message of the window is no drift (R30). A fork that would leave the old topic
    empty (the id is the topic's very first message) is no drift either.
    """
    try:
        answer = json.loads(text)
    except (ValueError, RecursionError):  # a model can answer `[[[[…` too
        return None
    if not isinstance(answer, dict) or answer.get("drift") is not True:
        return None
    first = answer.get("first_message_id")
    if isinstance(first, bool) or not isinstance(first, int | str):
        return None
    try:
        first_id = int(first)
    except ValueError:
        return None
    window_ids = [line.id for line in request.window]
    if first_id not in window_ids:
        return None
    if first_id == window_ids[0] and not request.earlier and not request.omitted:
        return None  # everything would move: the topic itself is the new subject
    title = answer.get("new_title")
    new_title = " ".join(title.split())[:MAX_NEW_TITLE_CHARS] if isinstance(title, str) else None
    return DriftDecision(first_message_id=first_id, new_title=new_title or None)
