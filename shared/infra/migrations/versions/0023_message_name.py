"""message name: who spoke a message (OpenAI's `name`), stored, searched, and posted by
append_messages(…)

Revision ID: 0023
Revises: 0022
Create Date: 2026-12-07
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0023"
down_revision: str | None = "0022"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# The search vector holds the name's words before the text's: a question that names the
# speaker finds what they said. A message without a name gets the vector it had.
OLD_VECTOR = "to_tsvector('english'::regconfig, content)"
NEW_VECTOR = "to_tsvector('english'::regconfig, coalesce(name || ' ', '') || content)"

# The post (shared/sessions/posting.py) as migration 0008 made it, with the names: one
# more array, `p_names`, beside the others. Its statements and reasons are 0008's.
APPEND_NAMED_MESSAGES = """
CREATE FUNCTION append_messages(
    p_session uuid,
    p_org uuid,
    p_roles text[],
    p_contents text[],
    p_names text[],
    p_tool_names text[],
    p_tool_call_ids text[],
    p_counted integer,
    p_tools integer
) RETURNS TABLE (id bigint, topic_id uuid, created_at timestamptz, message_count integer)
LANGUAGE plpgsql VOLATILE AS $$
#variable_conflict use_column
DECLARE
    v_topic uuid;
BEGIN
    PERFORM 1 FROM sessions s WHERE s.id = p_session AND s.org_id = p_org FOR UPDATE;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    UPDATE sessions s SET last_activity_at = now()
     WHERE s.id = p_session AND s.last_activity_at < now() - interval '1 second';
    SELECT t.id INTO v_topic FROM topics t WHERE t.session_id = p_session AND t.status = 'active';
    IF NOT FOUND THEN
        RETURN;
    END IF;
    RETURN QUERY
    WITH stored AS (
        INSERT INTO messages (session_id, topic_id, role, content, name, tool_name, tool_call_id)
        SELECT p_session, v_topic, b.role, b.content, b.name, b.tool_name, b.tool_call_id
          FROM unnest(p_roles, p_contents, p_names, p_tool_names, p_tool_call_ids)
               WITH ORDINALITY AS b(role, content, name, tool_name, tool_call_id, position)
         ORDER BY b.position
        RETURNING messages.id, messages.topic_id, messages.created_at
    ), moved AS (
        UPDATE topics t
           SET message_count = t.message_count + p_counted,
               tool_message_count = t.tool_message_count + p_tools,
               last_message_id = (SELECT max(stored.id) FROM stored)
         WHERE t.id = v_topic
        RETURNING t.message_count
    )
    SELECT stored.id, stored.topic_id, stored.created_at, (SELECT moved.message_count FROM moved)
      FROM stored
     ORDER BY stored.id;
END
$$
"""
# The post without names, as a web process deployed before this migration still calls
# it during a rolling deploy: now the named one's, every name NULL (unnest pads a NULL
# array with NULLs), so the post's statements live in one function.
APPEND_MESSAGES_UNNAMED = """
CREATE OR REPLACE FUNCTION append_messages(
    p_session uuid,
    p_org uuid,
    p_roles text[],
    p_contents text[],
    p_tool_names text[],
    p_tool_call_ids text[],
    p_counted integer,
    p_tools integer
) RETURNS TABLE (id bigint, topic_id uuid, created_at timestamptz, message_count integer)
LANGUAGE sql VOLATILE AS $$
SELECT * FROM append_messages(
    p_session, p_org, p_roles, p_contents, CAST(NULL AS text[]), p_tool_names, p_tool_call_ids,
    p_counted, p_tools)
$$
"""
NAMED_SIGNATURE = "(uuid, uuid, text[], text[], text[], text[], text[], integer, integer)"
UNNAMED_SIGNATURE = "(uuid, uuid, text[], text[], text[], text[], integer, integer)"


def _search_vector(expression: str) -> None:
    """Replace the generated search vector of messages with one of `expression`."""
    # PostgreSQL 15 cannot change a generated column's expression: the column is made
    # anew, which rewrites the table (as 0012 did): on a large deployment, run it in a
    # maintenance window (docs/operations.md, "Search").
    op.drop_index("ix_messages_search_vector", table_name="messages", postgresql_using="gin")
    op.drop_column("messages", "search_vector")
    op.add_column(
        "messages",
        sa.Column(
            "search_vector",
            postgresql.TSVECTOR(),
            sa.Computed(expression, persisted=True),
            nullable=False,
        ),
    )
    op.create_index(
        "ix_messages_search_vector", "messages", ["search_vector"], postgresql_using="gin"
    )
    # A new column has no statistics, and the search reads them to tell common words
    # (shared/search/ranking.py): without them every word would find candidates.
    op.execute("ANALYZE messages (search_vector)")


def upgrade() -> None:
    op.add_column("messages", sa.Column("name", sa.String(length=64), nullable=True))
    _search_vector(NEW_VECTOR)
    op.execute(APPEND_NAMED_MESSAGES)
    op.execute(APPEND_MESSAGES_UNNAMED)


def downgrade() -> None:
    # The unnamed post gets its own body back (0008's) before the named one goes.
    from importlib import import_module

    first = import_module("shared.infra.migrations.versions.0008_append_messages_function")
    op.execute(f"DROP FUNCTION append_messages{UNNAMED_SIGNATURE}")
    op.execute(first.APPEND_MESSAGES)
    op.execute(f"DROP FUNCTION append_messages{NAMED_SIGNATURE}")
    _search_vector(OLD_VECTOR)
    op.drop_column("messages", "name")
