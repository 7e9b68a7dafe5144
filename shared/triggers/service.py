"""Exit triggers (R27–R29) and the idle sweep: everything goes through the debounce."""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import uuid
from collections.abc import Sequence
from typing import Literal

from redis.exceptions import RedisError
from sqlalchemy import func, select

from shared.db.uow import UnitOfWork
from shared.metrics import DEBOUNCE
from shared.queue import FIRE_DEBOUNCE, Job, JobQueue
from shared.sessions.models import ChatSession
from shared.sessions.service import active_topic, load_session
from shared.topics.models import Topic
from shared.triggers.debounce import Debouncer

log = logging.getLogger(__name__)

EvaluateStatus = Literal["scheduled", "coalesced", "suppressed", "dropped"]
# Sessions idle for longer than this were swept long ago; the sweep looks no further back.
SWEEP_HORIZON = dt.timedelta(days=7)
SWEEP_BATCH = 500


def debounce_trigger(
    *,
    debouncer: Debouncer,
    queue: JobQueue,
    topic_id: uuid.UUID,
    last_message_id: int | None,
    trigger: str,
) -> EvaluateStatus:
    """Register a trigger; on the first of a burst, send the one fire job for it.

    Best effort by design (R29): Redis or the broker being down is `dropped`, logged,
    never an error for the caller.
    """
    status = _debounce(
        debouncer=debouncer, queue=queue, topic_id=topic_id, last_message_id=last_message_id,
        trigger=trigger,
    )  # fmt: skip
    DEBOUNCE.labels(trigger, status).inc()
    return status


def _debounce(
    *,
    debouncer: Debouncer,
    queue: JobQueue,
    topic_id: uuid.UUID,
    last_message_id: int | None,
    trigger: str,
) -> EvaluateStatus:
    try:
        result = debouncer.trigger(topic_id, last_message_id=last_message_id)
    except RedisError:
        log.warning("debounce unavailable; trigger %s for topic %s dropped", trigger, topic_id)
        return "dropped"
    if result.status != "scheduled":
        return result.status
    job = Job(
        FIRE_DEBOUNCE,
        {"topic_id": str(topic_id), "token": result.token, "trigger": trigger},
        countdown=result.delay_ms / 1000,
    )
    try:
        queue.send(job)
    except Exception:
        log.warning("broker unavailable; trigger %s for topic %s dropped", trigger, topic_id)
        with contextlib.suppress(RedisError):  # if not, the state expires on its own
            debouncer.forget(topic_id, result.token)
        return "dropped"
    return "scheduled"


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
    )


def idle_topics(*, uow: UnitOfWork, idle: dt.timedelta) -> Sequence[tuple[uuid.UUID, int]]:
    """Active topics with messages no summary has seen, in sessions idle for `idle`:
    users who walked away without any exit trigger."""
    rows = uow.session.execute(
        select(Topic.id, Topic.last_message_id)
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
    return [(row.id, row.last_message_id) for row in rows]
