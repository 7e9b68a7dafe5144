"""forks

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-02
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "forks",
        sa.Column("id", sa.BigInteger(), sa.Identity(always=False), nullable=False),
        sa.Column("session_id", sa.Uuid(), nullable=False),
        sa.Column("from_topic_id", sa.Uuid(), nullable=False),
        sa.Column("to_topic_id", sa.Uuid(), nullable=False),
        sa.Column("from_title", sa.Text(), nullable=True),
        sa.Column("to_title", sa.Text(), nullable=True),
        sa.Column("first_message_id", sa.BigInteger(), nullable=False),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.ForeignKeyConstraint(
            ["from_topic_id"],
            ["topics.id"],
            name=op.f("fk_forks_from_topic_id_topics"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["session_id"],
            ["sessions.id"],
            name=op.f("fk_forks_session_id_sessions"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["to_topic_id"],
            ["topics.id"],
            name=op.f("fk_forks_to_topic_id_topics"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_forks")),
    )
    op.create_index("ix_forks_session_id_id", "forks", ["session_id", "id"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_forks_session_id_id", table_name="forks")
    op.drop_table("forks")
