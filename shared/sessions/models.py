from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import (
    BigInteger,
    CheckConstraint,
    Computed,
    DateTime,
    ForeignKey,
    Identity,
    Index,
    String,
    Text,
    func,
    text,
)
from sqlalchemy.dialects.postgresql import TSVECTOR
from sqlalchemy.orm import Mapped, mapped_column

from shared.domain.limits import MAX_MESSAGE_NAME_CHARS
from shared.infra.db.base import SEARCH_CONFIG, Base, created_at_column

ROLES = ("user", "assistant", "tool")
# Migration 0023 writes the same expression: a change here needs a migration.
MESSAGE_SEARCH_VECTOR = f"to_tsvector({SEARCH_CONFIG}, coalesce(name || ' ', '') || content)"


class ChatSession(Base):
    """A conversation of one user with one agent, inside one org."""

    __tablename__ = "sessions"
    __table_args__ = (
        Index("ix_sessions_scope", "org_id", "agent_id", "user_id"),
        # The idle sweep walks sessions by their last activity.
        Index("ix_sessions_last_activity_at", "last_activity_at"),
        # Retention walks idle sessions with activity it has not purged yet.
        Index(
            "ix_sessions_awaiting_purge",
            "last_activity_at",
            postgresql_where=text("purged_through IS NULL OR purged_through < last_activity_at"),
        ),
    )

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True, default=uuid.uuid4)
    org_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("orgs.id", ondelete="CASCADE"))
    agent_id: Mapped[str] = mapped_column(String(200))
    user_id: Mapped[str] = mapped_column(String(200))
    # clock_timestamp, not now(): sessions opened in one transaction still order by creation.
    created_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), server_default=func.clock_timestamp()
    )
    last_activity_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), server_default=func.now()
    )
    # The last_activity_at retention purged through: later activity (a new message)
    # makes the session a candidate again. A value from the row, not a clock, so clock
    # skew between worker and database cannot hide a message.
    purged_through: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class Message(Base):
    __tablename__ = "messages"
    __table_args__ = (
        CheckConstraint(f"role IN {ROLES}", name="role"),
        # The thread of a topic, newest first, is the hot read (context window, drift scan).
        Index("ix_messages_topic_id_id", "topic_id", "id"),
        Index("ix_messages_session_id_id", "session_id", "id"),
        # A retried tool call finds its stored result by id (shared/tools/service.py).
        Index(
            "ix_messages_session_id_tool_call_id",
            "session_id",
            "tool_call_id",
            postgresql_where=text("tool_call_id IS NOT NULL"),
        ),
        # Recall (shared/search/): full-text search of a scope's messages.
        Index("ix_messages_search_vector", "search_vector", postgresql_using="gin"),
    )

    # One sequence for the whole service: ids increase in posting order, which drift
    # detection relies on. Posting takes the session's row lock before the insert, so
    # within a session the id order is also the commit order.
    id: Mapped[int] = mapped_column(BigInteger, Identity(), primary_key=True)
    session_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("sessions.id", ondelete="CASCADE"))
    topic_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("topics.id", ondelete="CASCADE"))
    role: Mapped[str] = mapped_column(String(16))
    content: Mapped[str] = mapped_column(Text)
    # Who spoke, as OpenAI's chat format names a message's speaker (check_message_name).
    name: Mapped[str | None] = mapped_column(String(MAX_MESSAGE_NAME_CHARS))
    tool_name: Mapped[str | None] = mapped_column(String(200))
    tool_call_id: Mapped[str | None] = mapped_column(String(200))
    created_at: Mapped[datetime] = created_at_column()
    # What search matches (shared/search/): the speaker's name and the text, computed by
    # PostgreSQL on insert, so no writer can forget it; deferred, so reading a thread
    # never loads it. A message without a name has the vector of its text alone.
    search_vector: Mapped[str] = mapped_column(
        TSVECTOR, Computed(MESSAGE_SEARCH_VECTOR, persisted=True), deferred=True
    )
