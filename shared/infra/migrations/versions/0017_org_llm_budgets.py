"""orgs: per-org LLM budgets, calls a minute and tokens a month (NULL: the fleet's default)

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-06
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0017"
down_revision: str | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Nullable columns without a default, as in 0014: adding them rewrites nothing.
# budget_exhausted_month is the first day of the last month the org ran out of tokens in:
# the compare-and-set that sends org.budget_exhausted once a month.


def upgrade() -> None:
    op.add_column("orgs", sa.Column("llm_rpm", sa.Integer(), nullable=True))
    op.add_column("orgs", sa.Column("monthly_tokens", sa.BigInteger(), nullable=True))
    op.add_column("orgs", sa.Column("budget_exhausted_month", sa.Date(), nullable=True))
    op.create_check_constraint(op.f("ck_orgs_llm_rpm"), "orgs", "llm_rpm >= 0")
    op.create_check_constraint(op.f("ck_orgs_monthly_tokens"), "orgs", "monthly_tokens >= 0")


def downgrade() -> None:
    op.drop_constraint(op.f("ck_orgs_monthly_tokens"), "orgs", type_="check")
    op.drop_constraint(op.f("ck_orgs_llm_rpm"), "orgs", type_="check")
    op.drop_column("orgs", "budget_exhausted_month")
    op.drop_column("orgs", "monthly_tokens")
    op.drop_column("orgs", "llm_rpm")
