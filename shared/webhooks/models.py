from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import (
    ARRAY,
    BigInteger,
    CheckConstraint,
    DateTime,
    ForeignKey,
    Identity,
    Index,
    String,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.orm import Mapped, mapped_column

from shared.infra.db.base import Base, created_at_column
from shared.infra.sealing import SEALED

DELIVERY_STATUSES = ("pending", "delivered", "failed", "dead")


class Webhook(Base):
    """An org's subscription: where to POST which event types, and the signing secret."""

    __tablename__ = "webhooks"

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True, default=uuid.uuid4)
    org_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("orgs.id", ondelete="CASCADE"), index=True)
    url: Mapped[str] = mapped_column(Text)
    events: Mapped[list[str]] = mapped_column(ARRAY(Text))
    # The signing secret as shared/infra/sealing.py seals it: never in the clear; marked,
    # so that `driftless secrets reseal` finds it.
    sealed_secret: Mapped[str] = mapped_column(Text, info={SEALED: True})
    created_at: Mapped[datetime] = created_at_column()


class WebhookEvent(Base):
    """The outbox: one event, written in the transaction of the change it reports."""

    __tablename__ = "webhook_events"
    __table_args__ = (
        # Erasure of a scope removes the events that name it (their bodies hold its words).
        Index("ix_webhook_events_scope", "org_id", "agent_id", "user_id"),
        # The dispatcher's purge of events past WEBHOOK_EVENT_RETENTION.
        Index("ix_webhook_events_created_at", "created_at"),
    )

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True, default=uuid.uuid4)
    org_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("orgs.id", ondelete="CASCADE"))
    # The scope the event is about; null for an org-wide one (reevaluation.finished).
    agent_id: Mapped[str | None] = mapped_column(Text)
    user_id: Mapped[str | None] = mapped_column(Text)
    type: Mapped[str] = mapped_column(Text)
    # The delivered body, {type, timestamp, data}, serialized once so every attempt
    # sends (and signs) the same bytes.
    body: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = created_at_column()


class WebhookDelivery(Base):
    """One event on its way to one subscription: its status, attempts, and when it is next due.

    `next_attempt_at` doubles as the lease of an attempt in flight: claiming a delivery
    moves it past the attempt's deadline, so a second job for it finds nothing due, and
    a worker killed mid-attempt leaves it due again once the lease ends (the dispatcher).
    """

    __tablename__ = "webhook_deliveries"
    __table_args__ = (
        CheckConstraint(f"status IN {DELIVERY_STATUSES}", name="status"),
        UniqueConstraint("webhook_id", "event_id", name="uq_webhook_deliveries_webhook_event"),
        # GET …/webhooks/{id}/deliveries, newest first.
        Index("ix_webhook_deliveries_webhook_id_id", "webhook_id", "id"),
        # The dispatcher: deliveries still owed, by when they are due.
        Index(
            "ix_webhook_deliveries_due",
            "next_attempt_at",
            postgresql_where=text("status IN ('pending', 'failed')"),
        ),
    )

    id: Mapped[int] = mapped_column(BigInteger, Identity(), primary_key=True)
    webhook_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("webhooks.id", ondelete="CASCADE"))
    event_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("webhook_events.id", ondelete="CASCADE"), index=True
    )
    status: Mapped[str] = mapped_column(String(16), server_default="pending")
    attempts: Mapped[int] = mapped_column(server_default="0")
    last_status_code: Mapped[int | None]
    last_error: Mapped[str | None] = mapped_column(Text)
    next_attempt_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), server_default=text("now()")
    )
    created_at: Mapped[datetime] = created_at_column()
    delivered_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
