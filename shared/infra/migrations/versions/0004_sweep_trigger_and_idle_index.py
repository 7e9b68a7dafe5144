"""sweep trigger and idle index

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-02
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


OLD_TRIGGERS = (
    "'topic_closed', 'heartbeat', 'navigation', 'visibility', 'disconnect', 'manual',"
    " 'reevaluate', 'reconcile'"
)


def upgrade() -> None:
    # Check constraints are not compared by autogenerate: the new trigger is added by hand.
    op.drop_constraint(op.f("ck_evaluations_trigger"), "evaluations", type_="check")
    op.create_check_constraint(
        op.f("ck_evaluations_trigger"), "evaluations", f"trigger IN ({OLD_TRIGGERS}, 'sweep')"
    )
    op.create_index("ix_sessions_last_activity_at", "sessions", ["last_activity_at"], unique=False)


def downgrade() -> None:
    op.drop_constraint(op.f("ck_evaluations_trigger"), "evaluations", type_="check")
    op.create_check_constraint(
        op.f("ck_evaluations_trigger"), "evaluations", f"trigger IN ({OLD_TRIGGERS})"
    )
    op.drop_index("ix_sessions_last_activity_at", table_name="sessions")
