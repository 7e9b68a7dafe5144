"""curation audit and memory index

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-02
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.alter_column("topics", "created_at", server_default=sa.text("clock_timestamp()"))
    op.create_table(
        "memory_changes",
        sa.Column("id", sa.BigInteger(), sa.Identity(always=False), nullable=False),
        sa.Column("topic_id", sa.Uuid(), nullable=False),
        sa.Column("actor", sa.String(length=16), nullable=False),
        sa.Column("action", sa.String(length=32), nullable=False),
        sa.Column("from_state", sa.String(length=16), nullable=False),
        sa.Column("to_state", sa.String(length=16), nullable=False),
        sa.Column("keep_in_memory_manually_set", sa.Boolean(), nullable=False),
        sa.Column("deprecated_manually_set", sa.Boolean(), nullable=False),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.CheckConstraint(
            "actor IN ('user', 'agent', 'summarizer')", name=op.f("ck_memory_changes_actor")
        ),
        sa.CheckConstraint(
            "from_state IN ('none', 'promoted', 'deprecated')",
            name=op.f("ck_memory_changes_from_state"),
        ),
        sa.CheckConstraint(
            "to_state IN ('none', 'promoted', 'deprecated')",
            name=op.f("ck_memory_changes_to_state"),
        ),
        sa.ForeignKeyConstraint(
            ["topic_id"],
            ["topics.id"],
            name=op.f("fk_memory_changes_topic_id_topics"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_memory_changes")),
    )
    op.create_index(
        "ix_memory_changes_topic_id_id", "memory_changes", ["topic_id", "id"], unique=False
    )
    op.create_index(
        "ix_topics_in_memory",
        "topics",
        ["session_id"],
        unique=False,
        postgresql_where=sa.text("keep_in_memory OR deprecated"),
    )


def downgrade() -> None:
    op.alter_column("topics", "created_at", server_default=sa.text("now()"))
    op.drop_index(
        "ix_topics_in_memory",
        table_name="topics",
        postgresql_where=sa.text("keep_in_memory OR deprecated"),
    )
    op.drop_index("ix_memory_changes_topic_id_id", table_name="memory_changes")
    op.drop_table("memory_changes")
