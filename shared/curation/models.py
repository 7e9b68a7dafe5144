from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import BigInteger, CheckConstraint, ForeignKey, Identity, Index, String
from sqlalchemy.orm import Mapped, mapped_column

from shared.infra.db.base import Base, created_at_column

ACTORS = ("user", "agent", "summarizer")
MEMORY_STATES = ("none", "promoted", "deprecated")


class MemoryChange(Base):
    """Audit: who moved a topic's memory, from what to what, and when."""

    __tablename__ = "memory_changes"
    __table_args__ = (
        CheckConstraint(f"actor IN {ACTORS}", name="actor"),
        CheckConstraint(f"from_state IN {MEMORY_STATES}", name="from_state"),
        CheckConstraint(f"to_state IN {MEMORY_STATES}", name="to_state"),
        Index("ix_memory_changes_topic_id_id", "topic_id", "id"),
    )

    id: Mapped[int] = mapped_column(BigInteger, Identity(), primary_key=True)
    topic_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("topics.id", ondelete="CASCADE"))
    actor: Mapped[str] = mapped_column(String(16))
    # The operation: set_state, cycle, promote, demote, deprecate or summarize.
    action: Mapped[str] = mapped_column(String(32))
    from_state: Mapped[str] = mapped_column(String(16))
    to_state: Mapped[str] = mapped_column(String(16))
    keep_in_memory_manually_set: Mapped[bool]
    deprecated_manually_set: Mapped[bool]
    created_at: Mapped[datetime] = created_at_column()
