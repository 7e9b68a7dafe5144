from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import DateTime, ForeignKey, String, Text, func
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import Mapped, mapped_column

from shared.infra.db.base import Base, created_at_column


class AgentProfile(Base):
    __tablename__ = "agents"

    org_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("orgs.id", ondelete="CASCADE"), primary_key=True
    )
    # The client's own agent id: agents are named by the platform that runs them.
    agent_id: Mapped[str] = mapped_column(String(200), primary_key=True)
    soul: Mapped[str] = mapped_column(Text, default="")
    skills: Mapped[list[Any]] = mapped_column(JSONB, default=list)
    tools: Mapped[list[Any]] = mapped_column(JSONB, default=list)
    created_at: Mapped[datetime] = created_at_column()
    updated_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), server_default=func.now(), onupdate=func.now()
    )
