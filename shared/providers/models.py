from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import BigInteger, Boolean, CheckConstraint, DateTime, ForeignKey, Text, func
from sqlalchemy.orm import Mapped, mapped_column

from shared.infra.db.base import Base
from shared.infra.sealing import SEALED


class OrgProvider(Base):
    """An org's own OpenAI-compatible model (bring your own key): its summaries and drift
    calls go there instead of the fleet's model. No row: the fleet's."""

    __tablename__ = "org_providers"

    org_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("orgs.id", ondelete="CASCADE"), primary_key=True
    )
    base_url: Mapped[str | None] = mapped_column(Text)  # NULL: the fleet's base URL
    model: Mapped[str] = mapped_column(Text)
    # As shared/infra/sealing.py seals it: never in the clear, never in an answer or a
    # log line; marked, so that `driftless secrets reseal` finds it.
    sealed_api_key: Mapped[str] = mapped_column(Text, info={SEALED: True})
    # Also what tells each process's router that its built client is out of date.
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())


class OrgProvidersVersion(Base):
    """One row: a number PostgreSQL raises (a trigger, migration 0022) whenever a row of
    org_providers is written or removed, so that each process re-reads the org-to-model
    map only when it changed (shared/providers/per_org.py)."""

    __tablename__ = "org_providers_version"

    # Always true: the primary key holds the table to one row.
    one: Mapped[bool] = mapped_column(
        Boolean, CheckConstraint("one", name="one_row"), primary_key=True
    )
    version: Mapped[int] = mapped_column(BigInteger)
