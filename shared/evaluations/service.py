"""Reading a topic's evaluation audit rows."""

from __future__ import annotations

import uuid

from sqlalchemy import select

from shared.db.uow import UnitOfWork
from shared.evaluations.models import Evaluation
from shared.topics.service import get_topic


def list_evaluations(
    *, uow: UnitOfWork, org_id: uuid.UUID, topic_id: uuid.UUID
) -> list[Evaluation]:
    topic = get_topic(uow=uow, org_id=org_id, topic_id=topic_id)
    return list(
        uow.session.scalars(
            select(Evaluation).where(Evaluation.topic_id == topic.id).order_by(Evaluation.id)
        )
    )
