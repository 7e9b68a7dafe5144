"""tool calls: an index of messages by (session_id, tool_call_id), for retried calls

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-04
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# A tool call that names its toolCallId looks up whether the session already ran it
# (shared/tools/service.py). Not unique: a call and its result share their id, and so
# may messages an agent posts. Only tool messages carry an id, hence the partial index.


def upgrade() -> None:
    # CONCURRENTLY: building the index must not block posts to a large messages table.
    with op.get_context().autocommit_block():
        op.create_index(
            "ix_messages_session_id_tool_call_id",
            "messages",
            ["session_id", "tool_call_id"],
            postgresql_where=sa.text("tool_call_id IS NOT NULL"),
            postgresql_concurrently=True,
        )


def downgrade() -> None:
    op.drop_index("ix_messages_session_id_tool_call_id", table_name="messages")
