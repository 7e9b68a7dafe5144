"""reevaluation_items: one item in flight per topic across campaigns (the topic's claim)

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-05
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Campaigns running now may hold one topic in flight twice (what the index forbids from
# here on): all but the oldest such item are counted done, as the pump now skips them;
# their jobs still run, and settling them again is a no-op. The pump's next tick finishes
# a campaign this settled.
SETTLE_DUPLICATES = """
WITH ranked AS (
    SELECT campaign_id, topic_id,
           row_number() OVER (PARTITION BY topic_id ORDER BY enqueued_at, campaign_id) AS n
    FROM reevaluation_items WHERE status = 'enqueued'
), moved AS (
    UPDATE reevaluation_items AS i SET status = 'done'
    FROM ranked AS r
    WHERE i.campaign_id = r.campaign_id AND i.topic_id = r.topic_id AND r.n > 1
    RETURNING i.campaign_id
)
UPDATE reevaluation_campaigns AS c SET done = c.done + m.n
FROM (SELECT campaign_id, count(*) AS n FROM moved GROUP BY campaign_id) AS m
WHERE c.id = m.campaign_id
"""


def upgrade() -> None:
    op.execute(SETTLE_DUPLICATES)
    op.create_index(
        "uq_reevaluation_items_in_flight",
        "reevaluation_items",
        ["topic_id"],
        unique=True,
        postgresql_where=sa.text("status = 'enqueued'"),
    )


def downgrade() -> None:
    op.drop_index(
        "uq_reevaluation_items_in_flight",
        table_name="reevaluation_items",
        postgresql_where=sa.text("status = 'enqueued'"),
    )
