"""Asking for an evaluation of a session's active topic without a heartbeat: an exit
trigger (R27–R29) or the idle sweep. Both go through the debounce of shared/triggers."""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Callable, Sequence

from sqlalchemy import func, select

from shared.infra.db.uow import UnitOfWork
from shared.infra.queue import JobQueue
from shared.sessions.models import ChatSession
from shared.sessions.service import active_topic, load_session
from shared.topics.models import Topic
from shared.triggers.debounce import Debouncer
from shared.triggers.service import EvaluateStatus, debounce_trigger

# Sessions idle for longer than this were swept long ago; the sweep looks no further back.
SWEEP_HORIZON = dt.timedelta(days=7)
SWEEP_BATCH = 500


def request_evaluation(
    *,
    uow: UnitOfWork,
    debouncer: Debouncer,
    queue: JobQueue,
    org_id: uuid.UUID,
    session_id: uuid.UUID,
    trigger: str,
) -> EvaluateStatus:
    """POST /sessions/{id}/evaluate: debounce an exit trigger for the active topic."""
    session = load_session(uow=uow, org_id=org_id, session_id=session_id)
    topic = active_topic(uow=uow, session_id=session.id)
    return debounce_trigger(
        debouncer=debouncer,
        queue=queue,
        topic_id=topic.id,
        last_message_id=topic.last_message_id,
        trigger=trigger,
        org_id=org_id,
    )


def idle_topics(
    *, uow: UnitOfWork, idle: dt.timedelta
) -> Sequence[tuple[uuid.UUID, int, uuid.UUID]]:
    """(topic, last message, org) of active topics with messages no summary has seen, in
    sessions idle for `idle`: users who walked away without any exit trigger."""
    rows = uow.session.execute(
        select(Topic.id, Topic.last_message_id, ChatSession.org_id)
        .join(ChatSession, ChatSession.id == Topic.session_id)
        .where(
            ChatSession.last_activity_at < func.now() - idle,
            ChatSession.last_activity_at > func.now() - idle - SWEEP_HORIZON,
            Topic.status == "active",
            Topic.last_message_id.is_not(None),
            Topic.summarized_through_id.is_distinct_from(Topic.last_message_id),
        )
        .order_by(ChatSession.last_activity_at)
        .limit(SWEEP_BATCH)
    ).all()
    return [(row.id, row.last_message_id, row.org_id) for row in rows]


def sweep_idle(
    *,
    new_uow: Callable[[], UnitOfWork],
    debouncer: Debouncer,
    queue: JobQueue,
    idle: dt.timedelta,
) -> int:
    """The idle sweep: a `sweep` trigger for each idle topic; how many were scheduled."""
    with new_uow() as uow:
        topics = idle_topics(uow=uow, idle=idle)
    scheduled = 0
    for topic_id, last_message_id, org_id in topics:
        status = debounce_trigger(
            debouncer=debouncer, queue=queue, topic_id=topic_id,
            last_message_id=last_message_id, trigger="sweep", org_id=org_id,
        )  # fmt: skip
        scheduled += status == "scheduled"
    return scheduled
