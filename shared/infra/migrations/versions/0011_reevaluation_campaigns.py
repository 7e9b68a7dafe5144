"""re-evaluation campaigns and their topics; the model that made a topic's summary

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-04
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "reevaluation_campaigns",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("org_id", sa.Uuid(), nullable=True),
        sa.Column("origin", sa.String(length=16), nullable=False),
        sa.Column("agent_id", sa.Text(), nullable=True),
        sa.Column("user_id", sa.Text(), nullable=True),
        sa.Column("since", sa.DateTime(timezone=True), nullable=True),
        sa.Column("stale_only", sa.Boolean(), nullable=False),
        sa.Column("current_prompt_version", sa.String(length=32), nullable=True),
        sa.Column("current_model", sa.Text(), nullable=True),
        sa.Column("rate", sa.Double(), nullable=False),
        sa.Column("total", sa.Integer(), nullable=False),
        sa.Column("enqueued", sa.Integer(), nullable=False),
        sa.Column("done", sa.Integer(), nullable=False),
        sa.Column("failed", sa.Integer(), nullable=False),
        sa.Column("cursor", sa.Uuid(), nullable=True),
        sa.Column("exhausted", sa.Boolean(), nullable=False),
        sa.Column(
            "advanced_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint(
            "origin IN ('api', 'cli', 'cron')", name=op.f("ck_reevaluation_campaigns_origin")
        ),
        sa.CheckConstraint(
            "state IN ('running', 'finished', 'cancelled')",
            name=op.f("ck_reevaluation_campaigns_state"),
        ),
        sa.ForeignKeyConstraint(
            ["org_id"],
            ["orgs.id"],
            name=op.f("fk_reevaluation_campaigns_org_id_orgs"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_reevaluation_campaigns")),
    )
    op.create_index(
        "ix_reevaluation_campaigns_org_id_created_at",
        "reevaluation_campaigns",
        ["org_id", "created_at"],
        unique=False,
    )
    op.create_index(
        "ix_reevaluation_campaigns_running",
        "reevaluation_campaigns",
        ["created_at"],
        unique=False,
        postgresql_where=sa.text("state = 'running'"),
    )
    op.create_index(
        "uq_reevaluation_campaigns_one_running_cron",
        "reevaluation_campaigns",
        ["origin"],
        unique=True,
        postgresql_where=sa.text("origin = 'cron' AND state = 'running'"),
    )
    op.create_table(
        "reevaluation_items",
        sa.Column("campaign_id", sa.Uuid(), nullable=False),
        sa.Column("topic_id", sa.Uuid(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("enqueued_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint(
            "status IN ('enqueued', 'done', 'failed')", name=op.f("ck_reevaluation_items_status")
        ),
        sa.ForeignKeyConstraint(
            ["campaign_id"],
            ["reevaluation_campaigns.id"],
            name=op.f("fk_reevaluation_items_campaign_id_reevaluation_campaigns"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("campaign_id", "topic_id", name=op.f("pk_reevaluation_items")),
    )
    op.create_index(
        "ix_reevaluation_items_overdue",
        "reevaluation_items",
        ["enqueued_at"],
        unique=False,
        postgresql_where=sa.text("status = 'enqueued'"),
    )
    op.add_column("topics", sa.Column("summary_model", sa.Text(), nullable=True))


def downgrade() -> None:
    op.drop_column("topics", "summary_model")
    op.drop_index(
        "ix_reevaluation_items_overdue",
        table_name="reevaluation_items",
        postgresql_where=sa.text("status = 'enqueued'"),
    )
    op.drop_table("reevaluation_items")
    op.drop_index(
        "uq_reevaluation_campaigns_one_running_cron",
        table_name="reevaluation_campaigns",
        postgresql_where=sa.text("origin = 'cron' AND state = 'running'"),
    )
    op.drop_index(
        "ix_reevaluation_campaigns_running",
        table_name="reevaluation_campaigns",
        postgresql_where=sa.text("state = 'running'"),
    )
    op.drop_index(
        "ix_reevaluation_campaigns_org_id_created_at", table_name="reevaluation_campaigns"
    )
    op.drop_table("reevaluation_campaigns")
