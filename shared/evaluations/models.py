from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import BigInteger, CheckConstraint, DateTime, ForeignKey, Identity, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from shared.infra.db.base import Base

TRIGGERS = (
    "topic_closed",
    "heartbeat",
    "navigation",
    "visibility",
    "disconnect",
    "manual",
    "reevaluate",
    "reconcile",
    "sweep",
    "retention",
    # A chat history's summary (shared/portability/chat.py): paid for by the import, in
    # the bulk lane, and told apart from live work in the evaluations and the usage.
    "import",
)
OUTCOMES = ("fork", "refresh", "skipped", "fallback")


class Evaluation(Base):
    __tablename__ = "evaluations"
    __table_args__ = (
        CheckConstraint(f"trigger IN {TRIGGERS}", name="trigger"),
        CheckConstraint(f"outcome IN {OUTCOMES}", name="outcome"),
    )

    id: Mapped[int] = mapped_column(BigInteger, Identity(), primary_key=True)
    topic_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("topics.id", ondelete="CASCADE"), index=True
    )
    trigger: Mapped[str] = mapped_column(String(32))
    outcome: Mapped[str] = mapped_column(String(16))
    llm_calls: Mapped[int] = mapped_column(default=0)
    # 64-bit: the sums of the evaluation's calls' tokens (shared/llm/base.py bounds each).
    prompt_tokens: Mapped[int] = mapped_column(BigInteger, default=0)
    completion_tokens: Mapped[int] = mapped_column(BigInteger, default=0)
    model: Mapped[str | None] = mapped_column(String(200))
    error: Mapped[str | None] = mapped_column(Text)
    started_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    finished_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
