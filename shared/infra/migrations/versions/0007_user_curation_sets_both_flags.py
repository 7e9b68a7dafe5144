"""R21's decision: a user's curation sets both manual flags; backfill earlier choices

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-03
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Every user curation has always set keep_in_memory_manually_set, so such a row is a
    # topic the user curated: under the decision, that also took deprecation from the agent.
    op.execute(
        "UPDATE topics SET deprecated_manually_set = true"
        " WHERE keep_in_memory_manually_set AND NOT deprecated_manually_set"
    )


def downgrade() -> None:
    # Which rows the backfill changed is not recorded; the flag stays (the safer side).
    pass
