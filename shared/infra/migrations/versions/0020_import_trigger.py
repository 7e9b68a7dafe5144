"""evaluations.trigger: 'import', the summary of a chat history an import brought

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-07
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0020"
down_revision: str | None = "0019"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

OLD_TRIGGERS = (
    "'topic_closed', 'heartbeat', 'navigation', 'visibility', 'disconnect', 'manual',"
    " 'reevaluate', 'reconcile', 'sweep', 'retention'"
)


def upgrade() -> None:
    # Check constraints are not compared by autogenerate: the new trigger is added by hand.
    op.drop_constraint(op.f("ck_evaluations_trigger"), "evaluations", type_="check")
    op.create_check_constraint(
        op.f("ck_evaluations_trigger"), "evaluations", f"trigger IN ({OLD_TRIGGERS}, 'import')"
    )


def downgrade() -> None:
    op.execute("UPDATE evaluations SET trigger = 'topic_closed' WHERE trigger = 'import'")
    op.drop_constraint(op.f("ck_evaluations_trigger"), "evaluations", type_="check")
    op.create_check_constraint(
        op.f("ck_evaluations_trigger"), "evaluations", f"trigger IN ({OLD_TRIGGERS})"
    )
