from __future__ import annotations

import uuid
from datetime import date, datetime

from sqlalchemy import (
    BigInteger,
    CheckConstraint,
    Date,
    DateTime,
    Float,
    ForeignKey,
    Integer,
    String,
)
from sqlalchemy.orm import Mapped, mapped_column

from shared.infra.db.base import Base, created_at_column


class Org(Base):
    __tablename__ = "orgs"
    __table_args__ = (
        CheckConstraint("requests_per_s >= 0", name="requests_per_s"),
        CheckConstraint("request_burst >= 1", name="request_burst"),
        CheckConstraint("llm_rpm >= 0", name="llm_rpm"),
        CheckConstraint("monthly_tokens >= 0", name="monthly_tokens"),
    )

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True, default=uuid.uuid4)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    created_at: Mapped[datetime] = created_at_column()
    # The org's own request rate limit (`driftless orgs set`); NULL: the fleet's default
    # (DRIFTLESS_ORG_REQUESTS_PER_S, DRIFTLESS_ORG_REQUEST_BURST). 0 requests a second: none.
    requests_per_s: Mapped[float | None] = mapped_column(Float)
    request_burst: Mapped[int | None] = mapped_column(Integer)
    # Its LLM budget (shared/orgs/budget.py): model calls a minute and tokens a calendar
    # month (UTC); NULL: DRIFTLESS_ORG_LLM_RPM, DRIFTLESS_ORG_MONTHLY_TOKENS. 0: none.
    llm_rpm: Mapped[int | None] = mapped_column(Integer)
    monthly_tokens: Mapped[int | None] = mapped_column(BigInteger)
    # The first day of the month it last ran out of tokens in: org.budget_exhausted is
    # sent when this moves, so once a month.
    budget_exhausted_month: Mapped[date | None] = mapped_column(Date)


class ApiKey(Base):
    __tablename__ = "api_keys"

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True, default=uuid.uuid4)
    org_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("orgs.id", ondelete="CASCADE"), index=True)
    # sha256 of the key: keys are 256-bit random, so a fast hash is enough and the
    # lookup stays an index probe. The key itself is shown once and never stored.
    key_hash: Mapped[str] = mapped_column(String(64), unique=True)
    prefix: Mapped[str] = mapped_column(String(16))
    created_at: Mapped[datetime] = created_at_column()
    revoked_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
