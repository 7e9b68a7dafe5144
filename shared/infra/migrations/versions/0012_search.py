"""search: full-text vectors of messages and topics, computed by PostgreSQL, GIN-indexed

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-04
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


MESSAGE_VECTOR = "to_tsvector('english'::regconfig, content)"
TOPIC_VECTOR = (
    "setweight(to_tsvector('english'::regconfig, coalesce(title, '')), 'A')"
    " || setweight(to_tsvector('english'::regconfig, coalesce(summary, '')), 'B')"
)


def upgrade() -> None:
    # Adding a stored generated column rewrites the table: on a large deployment, run it
    # in a maintenance window (docs/operations.md, "Search").
    op.add_column(
        "messages",
        sa.Column(
            "search_vector",
            postgresql.TSVECTOR(),
            sa.Computed(MESSAGE_VECTOR, persisted=True),
            nullable=False,
        ),
    )
    op.create_index(
        "ix_messages_search_vector", "messages", ["search_vector"], postgresql_using="gin"
    )
    op.add_column(
        "topics",
        sa.Column(
            "search_vector",
            postgresql.TSVECTOR(),
            sa.Computed(TOPIC_VECTOR, persisted=True),
            nullable=False,
        ),
    )
    op.create_index("ix_topics_search_vector", "topics", ["search_vector"], postgresql_using="gin")


def downgrade() -> None:
    op.drop_index("ix_topics_search_vector", table_name="topics", postgresql_using="gin")
    op.drop_column("topics", "search_vector")
    op.drop_index("ix_messages_search_vector", table_name="messages", postgresql_using="gin")
    op.drop_column("messages", "search_vector")
