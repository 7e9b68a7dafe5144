"""Topics: coherent lines of work inside a session, and the record of forks between them."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Literal

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

from shared.infra.db.base import SEARCH_CONFIG, Base, created_at_column

STATUSES = ("active", "closed")
SUMMARY_SOURCES = ("llm", "fallback")

MemoryState = Literal["none", "promoted", "deprecated"]


def memory_state(*, keep: bool, deprecated: bool) -> MemoryState:
    """R17's three states, derived from the two flags: the one place that says which.

    Curation (shared/curation/rules.py, `MemoryFlags.state`) asks it too; it lives here,
    beside the flags, because curation builds on topics and not the other way round.
    """
    if deprecated:
        return "deprecated"
    return "promoted" if keep else "none"


class Topic(Base):
    __tablename__ = "topics"
    __table_args__ = (
        CheckConstraint(f"status IN {STATUSES}", name="status"),
        CheckConstraint(f"summary_source IN {SUMMARY_SOURCES}", name="summary_source"),
        # R4: exactly one active topic per session, enforced by the database itself.
        Index(
            "uq_topics_one_active_per_session",
            "session_id",
            unique=True,
            postgresql_where=text("status = 'active'"),
        ),
        Index("ix_topics_session_id_created_at", "session_id", "created_at"),
        # The reconciler's "closed but unsummarized": a few rows, not every closed topic.
        Index(
            "ix_topics_awaiting_summary",
            "closed_at",
            postgresql_where=text(
                "status = 'closed' AND summarized_through_id IS DISTINCT FROM last_message_id"
            ),
        ),
        # The memory block reads only promoted and deprecated topics of a scope's sessions.
        Index(
            "ix_topics_in_memory",
            "session_id",
            postgresql_where=text("keep_in_memory OR deprecated"),
        ),
        # Recall (shared/search/): full-text search of a scope's topics.
        Index("ix_topics_search_vector", "search_vector", postgresql_using="gin"),
        # The embedding sweep's cursor: topics summarized since it last looked.
        Index(
            "ix_topics_summarized_at",
            "summarized_at",
            postgresql_where=text("summarized_at IS NOT NULL"),
        ),
    )

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True, default=uuid.uuid4)
    session_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("sessions.id", ondelete="CASCADE"))
    title: Mapped[str | None] = mapped_column(Text)
    summary: Mapped[str | None] = mapped_column(Text)
    summary_source: Mapped[str | None] = mapped_column(String(16))
    status: Mapped[str] = mapped_column(String(16), default="active")
    keep_in_memory: Mapped[bool] = mapped_column(default=False)
    keep_in_memory_manually_set: Mapped[bool] = mapped_column(default=False)
    deprecated: Mapped[bool] = mapped_column(default=False)
    deprecated_manually_set: Mapped[bool] = mapped_column(default=False)
    # Who moved the memory state last (user, agent, summarizer): shown beside the toggle.
    memory_state_set_by: Mapped[str | None] = mapped_column(String(16))
    # Counters kept in the transaction that inserts a message, so nothing counts rows.
    message_count: Mapped[int] = mapped_column(default=0)  # user + assistant (R12, R26)
    tool_message_count: Mapped[int] = mapped_column(default=0)
    last_message_id: Mapped[int | None] = mapped_column(BigInteger)
    # Watermark of the last summary: the last message it saw and the prompt that made it.
    # A job that finds both unchanged has nothing to do (idempotent summarization).
    summarized_through_id: Mapped[int | None] = mapped_column(BigInteger)
    summary_prompt_version: Mapped[str | None] = mapped_column(String(32))
    # The model (as configured) that made the summary; NULL for summaries made before it
    # was recorded, which count as made by the current model (shared/summaries/service.py).
    summary_model: Mapped[str | None] = mapped_column(Text)
    # clock_timestamp, not now(): topics opened in one transaction still order by creation.
    created_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), server_default=func.clock_timestamp()
    )
    closed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    summarized_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    # What search matches: the title above the summary (shared/search/); deferred, so
    # reading a topic never loads it.
    search_vector: Mapped[str] = mapped_column(
        TSVECTOR,
        Computed(
            f"setweight(to_tsvector({SEARCH_CONFIG}, coalesce(title, '')), 'A')"
            f" || setweight(to_tsvector({SEARCH_CONFIG}, coalesce(summary, '')), 'B')",
            persisted=True,
        ),
        deferred=True,
    )

    @property
    def memory_state(self) -> MemoryState:
        """R17's tri-state (`memory_state`)."""
        return memory_state(keep=self.keep_in_memory, deprecated=self.deprecated)

    @property
    def summary_pending(self) -> bool:
        """True while the topic has messages its summary has not seen."""
        return (
            self.last_message_id is not None and self.summarized_through_id != self.last_message_id
        )


def history_topic_id(session_id: uuid.UUID) -> uuid.UUID:
    """The id of the closed topic that holds an imported chat history's messages
    (shared/portability/chat.py): by it the reconciler knows, with no query, that the
    topic's summary is bulk work (shared/reconcile/service.py)."""
    return uuid.uuid5(session_id, "history")


# The record of silent forks: the latest one is a session's drift result (R1, R6). The
# fork itself, which moves messages between topics, is shared/sessions/fork.py.
class Fork(Base):
    __tablename__ = "forks"
    __table_args__ = (Index("ix_forks_session_id_id", "session_id", "id"),)

    id: Mapped[int] = mapped_column(BigInteger, Identity(), primary_key=True)
    session_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("sessions.id", ondelete="CASCADE"))
    from_topic_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("topics.id", ondelete="CASCADE"))
    to_topic_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("topics.id", ondelete="CASCADE"))
    # Titles as they were at the fork: the drift result must not change when a later
    # summary renames a topic, or the stable prefix would change with it (R3).
    from_title: Mapped[str | None] = mapped_column(Text)
    to_title: Mapped[str | None] = mapped_column(Text)
    first_message_id: Mapped[int] = mapped_column(BigInteger)
    created_at: Mapped[datetime] = created_at_column()
