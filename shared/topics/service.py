"""Opening and reading topics."""

from __future__ import annotations

import uuid

from sqlalchemy import func, select

from shared.db.uow import UnitOfWork
from shared.errors import NotFound
from shared.queue import SUMMARIZE_TOPIC, Job
from shared.sessions.models import ChatSession
from shared.sessions.service import active_topic, load_session
from shared.topics.models import Topic


def open_topic(
    *, uow: UnitOfWork, org_id: uuid.UUID, session_id: uuid.UUID, title: str | None
) -> Topic:
    """Close the active topic, open a new active one, and summarize the closed one (R25).

    The session row lock makes concurrent calls queue up behind each other, so each
    closes the topic the previous one opened and exactly one stays active (R4).
    """
    session = load_session(uow=uow, org_id=org_id, session_id=session_id, lock=True)
    prior = active_topic(uow=uow, session_id=session.id)
    prior.status = "closed"
    prior.closed_at = func.now()
    # Flush the close before the insert: the partial unique index sees one statement at a time.
    uow.session.flush()
    topic = Topic(session_id=session.id, status="active", title=title)
    uow.session.add(topic)
    uow.session.flush()
    uow.session.refresh(topic)
    if prior.last_message_id is not None:  # an empty topic has nothing to summarize
        uow.enqueue(Job(SUMMARIZE_TOPIC, {"topic_id": str(prior.id), "trigger": "topic_closed"}))
    return topic


def get_topic(*, uow: UnitOfWork, org_id: uuid.UUID, topic_id: uuid.UUID) -> Topic:
    topic = uow.session.scalar(
        select(Topic)
        .join(ChatSession, ChatSession.id == Topic.session_id)
        .where(Topic.id == topic_id, ChatSession.org_id == org_id)
    )
    if topic is None:
        raise NotFound(f"topic {topic_id} not found")
    return topic
