"""The message post as a function: append_messages(…), its statements planned once per connection

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-04
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Why a function (shared/sessions/posting.py): PostgreSQL parsed and planned the post's
# two statements on every call, over half of its CPU per post. PL/pgSQL keeps each
# statement's plan for the life of the connection, behind PgBouncer too (nothing of the
# client's session is used), and the call is one short statement.
#
# VOLATILE, so every statement reads a snapshot of its own start (READ COMMITTED): the
# active topic is read after the session's lock is held, and so sees what the writer it
# waited for committed (R6: a post lands in the topic a fork opened meanwhile).
APPEND_MESSAGES = """
CREATE FUNCTION append_messages(
    p_session uuid,
    p_org uuid,
    p_roles text[],
    p_contents text[],
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
    -- R4: the session's row lock before anything else; no row: no such session in the org.
    PERFORM 1 FROM sessions s WHERE s.id = p_session AND s.org_id = p_org FOR UPDATE;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    -- Activity to the second: rewriting the row on every post would also rewrite its
    -- index entries (last_activity_at is indexed for retention and the idle sweep).
    UPDATE sessions s SET last_activity_at = now()
     WHERE s.id = p_session AND s.last_activity_at < now() - interval '1 second';
    SELECT t.id INTO v_topic FROM topics t WHERE t.session_id = p_session AND t.status = 'active';
    IF NOT FOUND THEN
        RETURN;
    END IF;
    -- The ordered SELECT draws the ids in the batch's order.
    RETURN QUERY
    WITH stored AS (
        INSERT INTO messages (session_id, topic_id, role, content, tool_name, tool_call_id)
        SELECT p_session, v_topic, b.role, b.content, b.tool_name, b.tool_call_id
          FROM unnest(p_roles, p_contents, p_tool_names, p_tool_call_ids)
               WITH ORDINALITY AS b(role, content, tool_name, tool_call_id, position)
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


def upgrade() -> None:
    op.execute(APPEND_MESSAGES)


def downgrade() -> None:
    op.execute(
        "DROP FUNCTION append_messages"
        "(uuid, uuid, text[], text[], text[], text[], integer, integer)"
    )
