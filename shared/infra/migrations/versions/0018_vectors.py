"""embeddings: message_vectors and topic_vectors in pgvector, when the server has it;
topics' summarized_at index (the embedding sweep's cursor)

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-20
"""

from collections.abc import Sequence

from alembic import op

from shared.embeddings.schema import VECTOR_TABLES, ensure_vector_schema

revision: str = "0018"
down_revision: str | None = "0017"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# The vector tables are not declared here but by an idempotent step that `driftless db
# upgrade` runs again after every upgrade: a server without pgvector passes this
# migration with none of them, and gets them at the first upgrade after it gains the
# extension (shared/embeddings/schema.py).


def upgrade() -> None:
    op.create_index(
        "ix_topics_summarized_at",
        "topics",
        ["summarized_at"],
        postgresql_where="summarized_at IS NOT NULL",
    )
    ensure_vector_schema(op.get_bind())


def downgrade() -> None:
    for table in sorted(VECTOR_TABLES):
        op.execute(f"DROP TABLE IF EXISTS {table}")
    op.drop_index("ix_topics_summarized_at", table_name="topics")
