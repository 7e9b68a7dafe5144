"""memory state set by

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-02
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.alter_column("sessions", "created_at", server_default=sa.text("clock_timestamp()"))
    op.add_column("topics", sa.Column("memory_state_set_by", sa.String(length=16), nullable=True))


def downgrade() -> None:
    op.alter_column("sessions", "created_at", server_default=sa.text("now()"))
    op.drop_column("topics", "memory_state_set_by")
