"""The record of silent forks: the latest one is a session's drift result (R1, R6)."""

from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import BigInteger, ForeignKey, Identity, Index, Text
from sqlalchemy.orm import Mapped, mapped_column

from shared.db.base import Base, created_at_column


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
