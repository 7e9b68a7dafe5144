"""org_providers_version: one number PostgreSQL raises at every write of org_providers, so
that each process re-reads the org-to-model map only when it changed

Revision ID: 0022
Revises: 0021
Create Date: 2026-12-07
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0022"
down_revision: str | None = "0021"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# A trigger, not the services, raises the number: an org's deletion (ON DELETE CASCADE)
# and `driftless secrets reseal` write org_providers too. One row, not a sequence: a
# sequence moves before the writer commits, so a process could read the new number with
# the old map and keep both; the row's new number is seen with the commit. Row-level for
# writes (an org deleted without a model of its own raises nothing), statement-level for
# TRUNCATE (the only level it has). The row's lock serializes writers of org_providers
# (a PUT or DELETE of a provider, rare), never readers.
_BUMP = """
CREATE FUNCTION org_providers_bump_version() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  UPDATE org_providers_version SET version = version + 1;
  RETURN NULL;
END
$$
"""
_ON_WRITE = """
CREATE TRIGGER org_providers_version_on_write
AFTER INSERT OR UPDATE OR DELETE ON org_providers
FOR EACH ROW EXECUTE FUNCTION org_providers_bump_version()
"""
_ON_TRUNCATE = """
CREATE TRIGGER org_providers_version_on_truncate
AFTER TRUNCATE ON org_providers
FOR EACH STATEMENT EXECUTE FUNCTION org_providers_bump_version()
"""


def upgrade() -> None:
    op.create_table(
        "org_providers_version",
        sa.Column("one", sa.Boolean(), nullable=False),
        sa.Column("version", sa.BigInteger(), nullable=False),
        sa.CheckConstraint("one", name=op.f("ck_org_providers_version_one_row")),
        sa.PrimaryKeyConstraint("one", name=op.f("pk_org_providers_version")),
    )
    op.execute("INSERT INTO org_providers_version (one, version) VALUES (true, 1)")
    op.execute(_BUMP)
    op.execute(_ON_WRITE)
    op.execute(_ON_TRUNCATE)


def downgrade() -> None:
    op.execute("DROP TRIGGER org_providers_version_on_truncate ON org_providers")
    op.execute("DROP TRIGGER org_providers_version_on_write ON org_providers")
    op.execute("DROP FUNCTION org_providers_bump_version()")
    op.drop_table("org_providers_version")
