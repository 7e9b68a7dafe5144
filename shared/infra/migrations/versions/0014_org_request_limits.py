"""orgs: per-org overrides of the request rate limit (NULL: the fleet's default)

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-05
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Nullable columns without a default: adding them rewrites nothing and locks `orgs` only
# for the catalog change.


def upgrade() -> None:
    op.add_column("orgs", sa.Column("requests_per_s", sa.Float(), nullable=True))
    op.add_column("orgs", sa.Column("request_burst", sa.Integer(), nullable=True))
    op.create_check_constraint(op.f("ck_orgs_requests_per_s"), "orgs", "requests_per_s >= 0")
    op.create_check_constraint(op.f("ck_orgs_request_burst"), "orgs", "request_burst >= 1")


def downgrade() -> None:
    op.drop_constraint(op.f("ck_orgs_request_burst"), "orgs", type_="check")
    op.drop_constraint(op.f("ck_orgs_requests_per_s"), "orgs", type_="check")
    op.drop_column("orgs", "request_burst")
    op.drop_column("orgs", "requests_per_s")
