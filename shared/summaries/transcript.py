"""What a summarization call reads: the topic's history, bounded.

The complete history can outgrow any model's context. A topic that fits in
MAX_TRANSCRIPT_CHARS is sent whole (each message cut to MAX_LINE_CHARS: the caps of
shared/llm/bounds.py, which drift detection shares). A longer one is sent as its opening
messages (how the topic began: its subject) and as many of its newest messages as fit,
with a marker saying how many were left out between them; the previous summary, written
when the omitted messages were still in view, stands in for them. It stays one LLM call
(R9), its cost is bounded, and the reads are two index range scans, never the whole topic.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from sqlalchemy import Row, bindparam, select

from shared.infra.db.uow import UnitOfWork
from shared.llm.base import SummaryRequest, TranscriptLine
from shared.llm.bounds import MAX_TRANSCRIPT_CHARS, cap_line, line_size, newest_that_fit
from shared.llm.prompts import OMISSION_AFTER_LINES
from shared.sessions.models import Message

# The prompt puts its omission marker after this many lines (shared.llm.prompts).
HEAD_MESSAGES = OMISSION_AFTER_LINES
MAX_TAIL_MESSAGES = 400


@dataclass(frozen=True)
class TopicSnapshot:
    """What the summary is made from, read in a short transaction before the LLM call."""

    request: SummaryRequest
    last_message_id: int
    message_count: int  # user + assistant, for R12
    first_user_message: str | None
    # What the topic was when read, so the write can tell whether it still is (a fork
    # may commit while the LLM answers): its status and its rows up to last_message_id.
    topic_status: str
    rows_through: int


# Read as plain rows with statements built once: every summary runs them, hundreds a
# second per worker, and ORM entities cost several times the query.
_COLUMNS = (Message.id, Message.role, Message.content, Message.tool_name)
_IN_TOPIC = (Message.topic_id == bindparam("topic"), Message.id <= bindparam("through"))
_HEAD = select(*_COLUMNS).where(*_IN_TOPIC).order_by(Message.id).limit(HEAD_MESSAGES)
_TAIL_NEWEST_FIRST = (
    select(*_COLUMNS)
    .where(*_IN_TOPIC, Message.id > bindparam("after"))
    .order_by(Message.id.desc())
    .limit(MAX_TAIL_MESSAGES)
)


def _line(message: Row[int, str, str, str | None]) -> TranscriptLine:
    return cap_line(
        TranscriptLine(
            id=message.id, role=message.role, content=message.content, tool_name=message.tool_name
        )
    )


def read_transcript(
    *,
    uow: UnitOfWork,
    topic_id: uuid.UUID,
    through_id: int,
    total_messages: int,
    notes: str | None,
    previous_summary: str | None,
    org_id: uuid.UUID | None = None,
) -> SummaryRequest:
    """The topic's messages up to `through_id`, bounded as the module says; `org_id`
    is the topic's org, whose call the summary will be."""
    connection = uow.session.connection()
    in_topic = {"topic": topic_id, "through": through_id}
    head = [_line(m) for m in connection.execute(_HEAD, in_topic)]
    if total_messages <= HEAD_MESSAGES or not head:
        # Fewer rows than the counters say: retention purged the older ones, and the
        # previous summary is all that is left of them.
        purged = max(0, total_messages - len(head))
        return SummaryRequest(
            lines=head,
            notes=notes,
            omitted=purged,
            previous_summary=previous_summary if purged else None,
            org_id=org_id,
        )
    budget = MAX_TRANSCRIPT_CHARS - sum(line_size(line) for line in head) - len(notes or "")
    newest_first = connection.execute(_TAIL_NEWEST_FIRST, {**in_topic, "after": head[-1].id})
    tail = newest_that_fit((_line(message) for message in newest_first), budget)
    omitted = max(0, total_messages - len(head) - len(tail))
    return SummaryRequest(
        lines=head + tail,
        notes=notes,
        omitted=omitted,
        previous_summary=previous_summary if omitted else None,
        org_id=org_id,
    )
