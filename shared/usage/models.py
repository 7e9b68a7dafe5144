from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import BigInteger, CheckConstraint, ForeignKey, Identity, Index, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from shared.infra.db.base import Base, created_at_column

OUTCOMES = ("ok", "error")


class LLMUsage(Base):
    """One LLM call a worker made, answered or failed, charged to the org of its topic."""

    __tablename__ = "llm_usage"
    __table_args__ = (
        CheckConstraint(f"outcome IN {OUTCOMES}", name="outcome"),
        # GET /agents-api/usage: one org's rows since a moment.
        Index("ix_llm_usage_org_id_created_at", "org_id", "created_at"),
    )

    id: Mapped[int] = mapped_column(BigInteger, Identity(), primary_key=True)
    org_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("orgs.id", ondelete="CASCADE"))
    model: Mapped[str] = mapped_column(Text)  # as configured (DRIFTLESS_LLM_MODEL, or local)
    purpose: Mapped[str] = mapped_column(Text)  # summarize | detect_drift, as the metrics say
    outcome: Mapped[str] = mapped_column(String(16))
    # 64-bit, as their sums: a call counts at most base.MAX_CALL_TOKENS of each.
    prompt_tokens: Mapped[int] = mapped_column(BigInteger)  # 0 for a failed call
    completion_tokens: Mapped[int] = mapped_column(BigInteger)
    created_at: Mapped[datetime] = created_at_column()
