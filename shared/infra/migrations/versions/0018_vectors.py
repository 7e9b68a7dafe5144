"""embeddings: message_vectors and topic_vectors in pgvector, when the server has it;
topics' summarized_at index (the embedding sweep's cursor)

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-20
"""

from collections.abc import Sequence

from alembic import op
from sqlalchemy import text

revision: str = "0018"
down_revision: str | None = "0017"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# The vector tables only where the server has pgvector: a server without it passes this
# migration with none of them, and gets them at the first `driftless db upgrade` after it
# gains the extension, which runs shared/embeddings/schema.py's idempotent step after every
# upgrade. The statements are that step's as of this revision, copied rather than
# imported: a migration stays what it was when the feature's module changes, and the
# plumbing (shared/infra) imports no feature.
_VECTOR_TABLES = ("message_vectors", "topic_vectors")
_LOCK = "SELECT pg_advisory_xact_lock(hashtext('driftless:vector-schema'))"
_DDL = (
    "CREATE EXTENSION IF NOT EXISTS vector",
    """CREATE TABLE IF NOT EXISTS message_vectors (
        message_id bigint PRIMARY KEY REFERENCES messages (id) ON DELETE CASCADE,
        session_id uuid NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
        model text NOT NULL,
        embedding vector NOT NULL,
        created_at timestamptz NOT NULL DEFAULT now()
    )""",
    "CREATE INDEX IF NOT EXISTS ix_message_vectors_session_id ON message_vectors (session_id)",
    """CREATE TABLE IF NOT EXISTS topic_vectors (
        topic_id uuid PRIMARY KEY REFERENCES topics (id) ON DELETE CASCADE,
        session_id uuid NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
        model text NOT NULL,
        source_hash text NOT NULL,
        embedding vector NOT NULL,
        created_at timestamptz NOT NULL DEFAULT now()
    )""",
    "CREATE INDEX IF NOT EXISTS ix_topic_vectors_session_id ON topic_vectors (session_id)",
)


def upgrade() -> None:
    op.create_index(
        "ix_topics_summarized_at",
        "topics",
        ["summarized_at"],
        postgresql_where="summarized_at IS NOT NULL",
    )
    connection = op.get_bind()
    available = connection.execute(
        text("SELECT 1 FROM pg_available_extensions WHERE name = 'vector'")
    ).first()
    if available is None:
        return  # embeddings off until the server has pgvector and `db upgrade` runs again
    connection.execute(text(_LOCK))
    for statement in _DDL:
        connection.execute(text(statement))


def downgrade() -> None:
    for table in _VECTOR_TABLES:
        op.execute(f"DROP TABLE IF EXISTS {table}")
    op.drop_index("ix_topics_summarized_at", table_name="topics")
