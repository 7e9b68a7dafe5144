"""fact_versions: every value a durable fact held, from when until when, and who set it

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-27
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0019"
down_revision: str | None = "0018"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# The backfill gives each key of each existing document one current row, valid from the
# document's updated_at (the last change of any of its keys: the earliest moment known
# for sure to hold that value) and changed by 'user': who set a value before history
# was kept is not known, and the user is who owns the facts.


def upgrade() -> None:
    op.create_table(
        "fact_versions",
        sa.Column("id", sa.BigInteger(), autoincrement=True, nullable=False),
        sa.Column("org_id", sa.Uuid(), nullable=False),
        sa.Column("agent_id", sa.String(length=200), nullable=False),
        sa.Column("user_id", sa.String(length=200), nullable=False),
        sa.Column("key", sa.String(length=200), nullable=False),
        sa.Column("value", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column("valid_from", sa.DateTime(timezone=True), nullable=False),
        sa.Column("valid_to", sa.DateTime(timezone=True), nullable=True),
        sa.Column("changed_by", sa.String(length=10), nullable=False),
        sa.Column("removed_by", sa.String(length=10), nullable=True),
        sa.CheckConstraint(
            "changed_by IN ('user', 'agent', 'import')",
            name=op.f("ck_fact_versions_changed_by"),
        ),
        sa.CheckConstraint(
            "removed_by IN ('user', 'agent', 'import')",
            name=op.f("ck_fact_versions_removed_by"),
        ),
        sa.ForeignKeyConstraint(
            ["org_id"],
            ["orgs.id"],
            name=op.f("fk_fact_versions_org_id_orgs"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_fact_versions")),
        sa.UniqueConstraint(
            "org_id", "agent_id", "user_id", "key", "valid_from", name="uq_fact_versions_moment"
        ),
    )
    op.create_index(
        "uq_fact_versions_current",
        "fact_versions",
        ["org_id", "agent_id", "user_id", "key"],
        unique=True,
        postgresql_where=sa.text("valid_to IS NULL"),
    )
    op.execute(
        """
        INSERT INTO fact_versions
            (org_id, agent_id, user_id, key, value, valid_from, valid_to, changed_by)
        SELECT f.org_id, f.agent_id, f.user_id, entry.key, entry.value, f.updated_at, NULL, 'user'
        FROM facts AS f, jsonb_each(f.document) AS entry
        """
    )


def downgrade() -> None:
    op.drop_index("uq_fact_versions_current", table_name="fact_versions")
    op.drop_table("fact_versions")
