"""Reading what a fault test left in PostgreSQL: an org's topics, messages and audit rows."""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from shared.auth.service import org_for_key
from shared.evaluations.models import Evaluation
from shared.infra.db.engine import make_engine, make_session_factory
from shared.infra.db.uow import UnitOfWork
from shared.infra.queue import RecordingQueue
from shared.sessions.models import ChatSession, Message
from shared.topics.models import Topic


@contextmanager
def database(url: str) -> Iterator[Session]:
    engine = make_engine(url, pool_size=1, max_overflow=0)
    try:
        with make_session_factory(engine)() as session:
            yield session
    finally:
        engine.dispose()


def org_of(url: str, key: str) -> uuid.UUID:
    engine = make_engine(url, pool_size=1, max_overflow=0)
    try:
        with UnitOfWork(make_session_factory(engine), RecordingQueue()) as uow:
            org = org_for_key(uow=uow, key=key)
    finally:
        engine.dispose()
    assert org is not None
    return org


@dataclass(frozen=True)
class TopicRow:
    id: uuid.UUID
    status: str
    summary: str | None
    summary_source: str | None
    keep_in_memory: bool
    message_count: int
    last_message_id: int | None
    summarized_through_id: int | None

    @property
    def summarized(self) -> bool:
        """The summary has caught up with the topic's last message (the watermark)."""
        return self.last_message_id is not None and (
            self.summarized_through_id == self.last_message_id
        )


def topics_of(url: str, org_id: uuid.UUID) -> list[TopicRow]:
    with database(url) as db:
        rows = db.scalars(
            select(Topic)
            .join(ChatSession, ChatSession.id == Topic.session_id)
            .where(ChatSession.org_id == org_id)
        ).all()
        return [
            TopicRow(
                t.id,
                t.status,
                t.summary,
                t.summary_source,
                t.keep_in_memory,
                t.message_count,
                t.last_message_id,
                t.summarized_through_id,
            )
            for t in rows
        ]


def messages_of(url: str, org_id: uuid.UUID) -> dict[int, tuple[uuid.UUID, str]]:
    """Every stored message of the org: id -> (topic id, content)."""
    with database(url) as db:
        rows = db.execute(
            select(Message.id, Message.topic_id, Message.content)
            .join(ChatSession, ChatSession.id == Message.session_id)
            .where(ChatSession.org_id == org_id)
        ).all()
    return {row.id: (row.topic_id, row.content) for row in rows}


def evaluations_per_topic(url: str, org_id: uuid.UUID) -> Counter[uuid.UUID]:
    """Audit rows of summaries actually written (skipped runs write none), per topic."""
    with database(url) as db:
        rows = db.execute(
            select(Evaluation.topic_id, func.count())
            .join(Topic, Topic.id == Evaluation.topic_id)
            .join(ChatSession, ChatSession.id == Topic.session_id)
            .where(ChatSession.org_id == org_id, Evaluation.outcome != "skipped")
            .group_by(Evaluation.topic_id)
        ).all()
    return Counter({row[0]: row[1] for row in rows})


def written_by_trigger(url: str, org_id: uuid.UUID) -> Counter[str]:
    """Summaries and evaluations actually written, by what started them."""
    with database(url) as db:
        rows = db.execute(
            select(Evaluation.trigger, func.count())
            .join(Topic, Topic.id == Evaluation.topic_id)
            .join(ChatSession, ChatSession.id == Topic.session_id)
            .where(ChatSession.org_id == org_id, Evaluation.outcome != "skipped")
            .group_by(Evaluation.trigger)
        ).all()
    return Counter({row[0]: row[1] for row in rows})
