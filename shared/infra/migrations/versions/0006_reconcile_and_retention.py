"""reconcile and retention: memory versions, purge marker, their indexes, retention trigger

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-03
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

OLD_TRIGGERS = (
    "'topic_closed', 'heartbeat', 'navigation', 'visibility', 'disconnect', 'manual',"
    " 'reevaluate', 'reconcile', 'sweep'"
)


def upgrade() -> None:
    op.create_table(
        "memory_versions",
        sa.Column("org_id", sa.Uuid(), nullable=False),
        sa.Column("agent_id", sa.String(length=200), nullable=False),
        sa.Column("user_id", sa.String(length=200), nullable=False),
        sa.Column("version", sa.BigInteger(), nullable=False),
        sa.Column(
            "changed_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.ForeignKeyConstraint(
            ["org_id"],
            ["orgs.id"],
            name=op.f("fk_memory_versions_org_id_orgs"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("org_id", "agent_id", "user_id", name=op.f("pk_memory_versions")),
    )
    op.create_index("ix_memory_versions_changed_at", "memory_versions", ["changed_at"])
    op.add_column("sessions", sa.Column("purged_through", sa.DateTime(timezone=True)))
    op.create_index(
        "ix_sessions_awaiting_purge",
        "sessions",
        ["last_activity_at"],
        postgresql_where=sa.text("purged_through IS NULL OR purged_through < last_activity_at"),
    )
    op.create_index(
        "ix_topics_awaiting_summary",
        "topics",
        ["closed_at"],
        postgresql_where=sa.text(
            "status = 'closed' AND summarized_through_id IS DISTINCT FROM last_message_id"
        ),
    )
    # Check constraints are not compared by autogenerate: the new trigger is added by hand.
    op.drop_constraint(op.f("ck_evaluations_trigger"), "evaluations", type_="check")
    op.create_check_constraint(
        op.f("ck_evaluations_trigger"), "evaluations", f"trigger IN ({OLD_TRIGGERS}, 'retention')"
    )


def downgrade() -> None:
    op.execute("UPDATE evaluations SET trigger = 'reconcile' WHERE trigger = 'retention'")
    op.drop_constraint(op.f("ck_evaluations_trigger"), "evaluations", type_="check")
    op.create_check_constraint(
        op.f("ck_evaluations_trigger"), "evaluations", f"trigger IN ({OLD_TRIGGERS})"
    )
    op.drop_index("ix_topics_awaiting_summary", table_name="topics")
    op.drop_index("ix_sessions_awaiting_purge", table_name="sessions")
    op.drop_column("sessions", "purged_through")
    op.drop_index("ix_memory_versions_changed_at", table_name="memory_versions")
    op.drop_table("memory_versions")
