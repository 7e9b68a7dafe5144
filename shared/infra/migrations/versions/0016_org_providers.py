"""org_providers: an org's own OpenAI-compatible model (bring your own key)

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-06
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0016"
down_revision: str | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# One row per org at most: the org is the key. The API key is stored sealed (as webhook
# secrets are) and never leaves the database in clear; base_url NULL means the fleet's.


def upgrade() -> None:
    op.create_table(
        "org_providers",
        sa.Column("org_id", sa.Uuid(), nullable=False),
        sa.Column("base_url", sa.Text(), nullable=True),
        sa.Column("model", sa.Text(), nullable=False),
        sa.Column("sealed_api_key", sa.Text(), nullable=False),
        sa.Column(
            "updated_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.ForeignKeyConstraint(
            ["org_id"], ["orgs.id"], name=op.f("fk_org_providers_org_id_orgs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("org_id", name=op.f("pk_org_providers")),
    )


def downgrade() -> None:
    op.drop_table("org_providers")
