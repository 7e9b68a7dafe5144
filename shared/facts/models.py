from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    CheckConstraint,
    DateTime,
    ForeignKey,
    Index,
    String,
    UniqueConstraint,
    func,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import Mapped, mapped_column

from shared.infra.db.base import Base


class FactsDocument(Base):
    __tablename__ = "facts"
    # R22: one document per scope.
    __table_args__ = (UniqueConstraint("org_id", "agent_id", "user_id", name="uq_facts_scope"),)

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True, default=uuid.uuid4)
    org_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("orgs.id", ondelete="CASCADE"))
    agent_id: Mapped[str] = mapped_column(String(200))
    user_id: Mapped[str] = mapped_column(String(200))
    document: Mapped[dict[str, Any]] = mapped_column(JSONB, default=dict)
    updated_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), server_default=func.now(), onupdate=func.now()
    )


# Who made a change: the user (through the API), the agent (its important_info tool, by
# HTTP or MCP), or an import of another system's export.
CHANGED_BY = ("user", "agent", "import")


class FactVersion(Base):
    """One value a fact held, from valid_from until valid_to (NULL: it still holds).

    The document above stays the source of the current values; these rows are their
    history, written in the transaction of each change (shared/facts/history.py).
    """

    __tablename__ = "fact_versions"
    __table_args__ = (
        # The same version twice is one row: an import run twice adds nothing.
        UniqueConstraint(
            "org_id", "agent_id", "user_id", "key", "valid_from", name="uq_fact_versions_moment"
        ),
        # At most one current value per key, as in the document.
        Index(
            "uq_fact_versions_current",
            "org_id",
            "agent_id",
            "user_id",
            "key",
            unique=True,
            postgresql_where=text("valid_to IS NULL"),
        ),
        CheckConstraint(f"changed_by IN {CHANGED_BY}", name="changed_by"),
        CheckConstraint(f"removed_by IN {CHANGED_BY}", name="removed_by"),
    )

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    org_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("orgs.id", ondelete="CASCADE"))
    agent_id: Mapped[str] = mapped_column(String(200))
    user_id: Mapped[str] = mapped_column(String(200))
    key: Mapped[str] = mapped_column(String(200))
    # JSON null is a value a fact may hold: the column is never SQL NULL.
    value: Mapped[Any] = mapped_column(JSONB, nullable=False)
    valid_from: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    valid_to: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    changed_by: Mapped[str] = mapped_column(String(10))
    # Who removed the key at valid_to (NULL when a new value replaced it, or it holds).
    removed_by: Mapped[str | None] = mapped_column(String(10))
