"""Creating sessions, reading them, opening and reading their topics, and posting and
listing messages. Every writer takes the session's row lock first (R4)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import func, select, update

from shared.domain.errors import NotFound
from shared.domain.limits import check_message_content
from shared.infra.db.uow import UnitOfWork
from shared.infra.queue import SUMMARIZE_TOPIC, Job
from shared.sessions.models import ChatSession, Message
from shared.sessions.posting import NewMessage, PostedMessages, post_messages
from shared.topics.models import Topic


@dataclass(frozen=True)
class SessionView:
    session: ChatSession
    topics: Sequence[Topic]

    @property
    def active_topic_id(self) -> uuid.UUID | None:
        return next((t.id for t in self.topics if t.status == "active"), None)


def create_session(
    *, uow: UnitOfWork, org_id: uuid.UUID, agent_id: str, user_id: str
) -> SessionView:
    """A new session with its first topic already active."""
    session = ChatSession(org_id=org_id, agent_id=agent_id, user_id=user_id)
    uow.session.add(session)
    uow.session.flush()
    topic = Topic(session_id=session.id, status="active")
    uow.session.add(topic)
    uow.session.flush()
    uow.session.refresh(session)
    uow.session.refresh(topic)
    return SessionView(session=session, topics=[topic])


def load_session(
    *, uow: UnitOfWork, org_id: uuid.UUID, session_id: uuid.UUID, lock: bool = False
) -> ChatSession:
    """The session if it belongs to the org; `lock` takes its row lock for the transaction.

    Everything that changes which topic is active, or adds to the active topic, locks
    the session row first. That one lock serializes a session's writers, so a message
    lands in the topic that is active when it commits (R6) and ids follow commit order.
    """
    query = select(ChatSession).where(ChatSession.id == session_id, ChatSession.org_id == org_id)
    if lock:
        query = query.with_for_update()
    session = uow.session.scalar(query)
    if session is None:
        raise NotFound(f"session {session_id} not found")
    return session


def get_session(*, uow: UnitOfWork, org_id: uuid.UUID, session_id: uuid.UUID) -> SessionView:
    session = load_session(uow=uow, org_id=org_id, session_id=session_id)
    topics = uow.session.scalars(
        select(Topic).where(Topic.session_id == session.id).order_by(Topic.created_at, Topic.id)
    ).all()
    return SessionView(session=session, topics=topics)


def active_topic(*, uow: UnitOfWork, session_id: uuid.UUID) -> Topic:
    topic = uow.session.scalar(
        select(Topic).where(Topic.session_id == session_id, Topic.status == "active")
    )
    if topic is None:  # the partial unique index allows zero; the services never leave zero
        raise NotFound(f"session {session_id} has no active topic")
    return topic


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
        kwargs = {"topic_id": str(prior.id), "trigger": "topic_closed"}
        uow.enqueue(Job(SUMMARIZE_TOPIC, kwargs, org=str(org_id)))
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


def append_message(
    *,
    uow: UnitOfWork,
    session: ChatSession,
    topic: Topic,
    role: str,
    content: str,
    tool_name: str | None = None,
    tool_call_id: str | None = None,
) -> Message:
    """Insert a message into `topic` and keep its counters; the caller holds the session lock."""
    check_message_content(content)
    message = Message(
        session_id=session.id,
        topic_id=topic.id,
        role=role,
        content=content,
        tool_name=tool_name,
        tool_call_id=tool_call_id,
    )
    uow.session.add(message)
    uow.session.flush()
    counter = Topic.tool_message_count if role == "tool" else Topic.message_count
    # RETURNING refreshes `topic` in the same round trip (populate_existing); the
    # message's server defaults came back with its INSERT.
    uow.session.execute(
        update(Topic)
        .where(Topic.id == topic.id)
        .values({counter: counter + 1, Topic.last_message_id: message.id})
        .returning(Topic),
        execution_options={"populate_existing": True},
    ).scalar_one()
    uow.session.execute(
        update(ChatSession).where(ChatSession.id == session.id).values(last_activity_at=func.now())
    )
    return message


def post_message(
    *,
    uow: UnitOfWork,
    org_id: uuid.UUID,
    session_id: uuid.UUID,
    role: str,
    content: str,
    tool_name: str | None = None,
    tool_call_id: str | None = None,
    drift_interval: int = 10,
) -> PostedMessages:
    """Append one message to the session's active topic (a batch of one, R26)."""
    message = NewMessage(role=role, content=content, tool_name=tool_name, tool_call_id=tool_call_id)
    return post_messages(
        uow=uow,
        org_id=org_id,
        session_id=session_id,
        messages=[message],
        drift_interval=drift_interval,
    )


def list_messages(
    *,
    uow: UnitOfWork,
    org_id: uuid.UUID,
    session_id: uuid.UUID,
    topic_id: uuid.UUID | None,
    after_id: int | None,
    limit: int,
) -> Sequence[Message]:
    """Messages oldest first, one page at a time (`after_id` is the cursor)."""
    session = load_session(uow=uow, org_id=org_id, session_id=session_id)
    query = select(Message).where(Message.session_id == session.id)
    if topic_id is not None:
        owned = uow.session.scalar(
            select(Topic.id).where(Topic.id == topic_id, Topic.session_id == session.id)
        )
        if owned is None:
            raise NotFound(f"topic {topic_id} not found in session {session_id}")
        query = select(Message).where(Message.topic_id == topic_id)
    if after_id is not None:
        query = query.where(Message.id > after_id)
    return uow.session.scalars(query.order_by(Message.id).limit(limit)).all()


@dataclass(frozen=True)
class ScopeSummary:
    agent_id: str
    user_id: str
    sessions: int
    last_activity_at: datetime


MAX_LISTED = 100


def list_scopes(*, uow: UnitOfWork, org_id: uuid.UUID) -> list[ScopeSummary]:
    """The org's agent + user pairs, most recently active first (for the console)."""
    rows = uow.session.execute(
        select(
            ChatSession.agent_id,
            ChatSession.user_id,
            func.count(ChatSession.id),
            func.max(ChatSession.last_activity_at).label("last"),
        )
        .where(ChatSession.org_id == org_id)
        .group_by(ChatSession.agent_id, ChatSession.user_id)
        .order_by(func.max(ChatSession.last_activity_at).desc())
        .limit(MAX_LISTED * 2)
    ).all()
    return [ScopeSummary(a, u, n, last) for a, u, n, last in rows]


def list_sessions(
    *, uow: UnitOfWork, org_id: uuid.UUID, agent_id: str, user_id: str
) -> list[SessionView]:
    """A scope's sessions, newest first, each with its active topic only."""
    sessions = uow.session.scalars(
        select(ChatSession)
        .where(
            ChatSession.org_id == org_id,
            ChatSession.agent_id == agent_id,
            ChatSession.user_id == user_id,
        )
        .order_by(ChatSession.created_at.desc(), ChatSession.id)
        .limit(MAX_LISTED)
    ).all()
    active = {
        t.session_id: t
        for t in uow.session.scalars(
            select(Topic).where(
                Topic.session_id.in_([s.id for s in sessions]), Topic.status == "active"
            )
        )
    }
    return [
        SessionView(session=s, topics=[active[s.id]] if s.id in active else []) for s in sessions
    ]
