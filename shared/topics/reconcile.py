"""Finding work whose job was lost (a broker outage after commit, a purged queue)."""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Sequence

from sqlalchemy import func, select

from shared.db.uow import UnitOfWork
from shared.topics.models import Topic


def closed_topics_awaiting_summary(
    *, uow: UnitOfWork, older_than: dt.timedelta, limit: int = 500
) -> Sequence[uuid.UUID]:
    """Closed topics whose summary has not caught up with their messages.

    `older_than` leaves the normal path time to finish, so the reconciler only
    re-enqueues work that really was lost; a duplicate is harmless anyway.
    """
    return uow.session.scalars(
        select(Topic.id)
        .where(
            Topic.status == "closed",
            Topic.last_message_id.is_not(None),
            Topic.summarized_through_id.is_distinct_from(Topic.last_message_id),
            Topic.closed_at < func.now() - older_than,
        )
        .order_by(Topic.closed_at)
        .limit(limit)
    ).all()
