"""Summarizing a topic: the stand-in that [2/6] replaces with the LLM call.

The stand-in keeps the real shape — locked topic row, watermark check, one audit row,
notes archived in the same transaction — so the pipeline web → commit → broker →
worker → PostgreSQL is exercised end to end before any LLM is involved.
"""

from __future__ import annotations

import datetime as dt
import logging
import uuid
from dataclasses import dataclass

from sqlalchemy import func, select, update

from shared.db.uow import UnitOfWork
from shared.evaluations.models import Evaluation
from shared.notes.models import NotesDocument
from shared.sessions.models import Message
from shared.topics.models import Topic

log = logging.getLogger(__name__)

PROMPT_VERSION = "standin-1"
TITLE_CHARS = 60


@dataclass(frozen=True)
class SummaryOutcome:
    topic_id: uuid.UUID
    outcome: str  # "refresh", or "skipped" when nothing changed since the last summary


def summarize_topic(*, uow: UnitOfWork, topic_id: uuid.UUID, trigger: str) -> SummaryOutcome:
    """Store a summary of the topic's messages unless its watermark says it is current."""
    started_at = dt.datetime.now(dt.UTC)
    # The row lock makes a redelivered job wait for the first, then see its watermark.
    topic = uow.session.scalar(select(Topic).where(Topic.id == topic_id).with_for_update())
    if topic is None:
        log.info("topic %s is gone; nothing to summarize", topic_id)
        return SummaryOutcome(topic_id, "skipped")
    if not topic.summary_pending and topic.summary_prompt_version == PROMPT_VERSION:
        return SummaryOutcome(topic_id, "skipped")

    first_user_message = uow.session.scalar(
        select(Message.content)
        .where(Message.topic_id == topic.id, Message.role == "user")
        .order_by(Message.id)
        .limit(1)
    )
    text = " ".join((first_user_message or "").split())
    topic.title = topic.title or (text[:TITLE_CHARS] or "Untitled topic")
    topic.summary = text or "(no user messages)"
    topic.summary_source = "fallback"
    topic.summarized_through_id = topic.last_message_id
    topic.summary_prompt_version = PROMPT_VERSION
    topic.summarized_at = func.now()
    if topic.status == "closed":
        # R24: archived in the transaction that stores the summary, never before.
        uow.session.execute(
            update(NotesDocument)
            .where(NotesDocument.topic_id == topic.id, NotesDocument.status == "active")
            .values(status="archived", archived_at=func.now())
        )
    uow.session.add(
        Evaluation(
            topic_id=topic.id,
            trigger=trigger,
            outcome="refresh",
            llm_calls=0,
            started_at=started_at,
            finished_at=dt.datetime.now(dt.UTC),
        )
    )
    return SummaryOutcome(topic_id, "refresh")
