"""llm_usage and evaluations count tokens in 64 bits: two calls of 2e9 tokens overflowed
an org's int4 sum (GET /agents-api/limits and /usage answered 500)

Revision ID: 0021
Revises: 0020
Create Date: 2026-12-07
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0021"
down_revision: str | None = "0020"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# (table, column) of every token count that is added up. Widening rewrites each table
# under an exclusive lock: the ledger's rows are small, the time is in its size.
COLUMNS = [
    (table, column)
    for table in ("llm_usage", "evaluations")
    for column in ("prompt_tokens", "completion_tokens")
]


def upgrade() -> None:
    for table, column in COLUMNS:
        op.alter_column(table, column, type_=sa.BigInteger(), existing_type=sa.Integer())


def downgrade() -> None:
    for table, column in COLUMNS:
        op.alter_column(table, column, type_=sa.Integer(), existing_type=sa.BigInteger())
