"""A re-evaluation campaign (its filter, rate, counters and state) and its topics."""

from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import CheckConstraint, DateTime, Double, ForeignKey, Index, String, Text, text
from sqlalchemy.orm import Mapped, mapped_column

from shared.infra.db.base import Base, created_at_column

STATES = ("running", "finished", "cancelled")
ORIGINS = ("api", "cli", "cron")  # who started it: an org's key, an operator, beat
ITEM_STATUSES = ("enqueued", "done", "failed")


class ReevaluationCampaign(Base):
    """Matching topics, enqueued in id order from `cursor` at `rate` topics a second by the
    pump (shared/reevaluations/pump.py); each one's job settles its item when it ends."""

    __tablename__ = "reevaluation_campaigns"
    __table_args__ = (
        CheckConstraint(f"state IN {STATES}", name="state"),
        CheckConstraint(f"origin IN {ORIGINS}", name="origin"),
        # GET /agents-api/reevaluations: an org's campaigns, newest first.
        Index("ix_reevaluation_campaigns_org_id_created_at", "org_id", "created_at"),
        # The pump's scan every second: the running ones, a few rows.
        Index(
            "ix_reevaluation_campaigns_running",
            "created_at",
            postgresql_where=text("state = 'running'"),
        ),
        # Beat starts no cron campaign while one runs: the database holds it to that.
        Index(
            "uq_reevaluation_campaigns_one_running_cron",
            "origin",
            unique=True,
            postgresql_where=text("origin = 'cron' AND state = 'running'"),
        ),
    )

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True, default=uuid.uuid4)
    # NULL: an operator's campaign (the CLI without --org, beat's) across every org.
    org_id: Mapped[uuid.UUID | None] = mapped_column(ForeignKey("orgs.id", ondelete="CASCADE"))
    origin: Mapped[str] = mapped_column(String(16))
    # The filter (shared/reevaluations/selection.py); NULL matches everything.
    agent_id: Mapped[str | None] = mapped_column(Text)
    user_id: Mapped[str | None] = mapped_column(Text)
    since: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    # Only topics whose summary came from another prompt version or model than these
    # (the ones current when the campaign started).
    stale_only: Mapped[bool] = mapped_column(default=False)
    current_prompt_version: Mapped[str | None] = mapped_column(String(32))
    current_model: Mapped[str | None] = mapped_column(Text)
    rate: Mapped[float] = mapped_column(Double)  # topics a second
    # Matching topics when it started; once every one was enqueued, how many were.
    total: Mapped[int]
    enqueued: Mapped[int] = mapped_column(default=0)
    done: Mapped[int] = mapped_column(default=0)
    failed: Mapped[int] = mapped_column(default=0)
    # The last topic enqueued (topics go in id order), and whether none is left after it.
    cursor: Mapped[uuid.UUID | None]
    exhausted: Mapped[bool] = mapped_column(default=False)
    # The pump's clock: the topics owed since then at `rate` are enqueued next.
    advanced_at: Mapped[datetime] = created_at_column()
    state: Mapped[str] = mapped_column(String(16), default="running")
    created_at: Mapped[datetime] = created_at_column()
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class ReevaluationItem(Base):
    """One topic of a campaign, from the moment its job is sent until the job ends.

    The primary key makes settling idempotent: a job that runs twice moves it (and the
    campaign's counters) once. A topic skipped (current already, or in flight for another
    campaign) is recorded done at once, with no job. No foreign key to the topic: a topic
    erased meanwhile still has its item settled (its job finds nothing to do).
    """

    __tablename__ = "reevaluation_items"
    __table_args__ = (
        CheckConstraint(f"status IN {ITEM_STATUSES}", name="status"),
        # The pump's look for jobs that never came back (a lost send, a killed worker).
        Index(
            "ix_reevaluation_items_overdue",
            "enqueued_at",
            postgresql_where=text("status = 'enqueued'"),
        ),
        # The topic's claim: one job in flight for it across every campaign. Another
        # campaign's pump finds it taken and settles its own item as skipped, with no
        # model call; the claim goes when the job settles (or times out, pump.py).
        Index(
            "uq_reevaluation_items_in_flight",
            "topic_id",
            unique=True,
            postgresql_where=text("status = 'enqueued'"),
        ),
    )

    campaign_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("reevaluation_campaigns.id", ondelete="CASCADE"), primary_key=True
    )
    topic_id: Mapped[uuid.UUID] = mapped_column(primary_key=True)
    status: Mapped[str] = mapped_column(String(16), default="enqueued")
    attempts: Mapped[int] = mapped_column(default=1)  # jobs sent for it
    enqueued_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
