"""Celery tasks: each takes ids, opens one unit of work, calls one service function."""

from __future__ import annotations

import datetime as dt
import logging
import uuid

from celery import Task, shared_task
from redis.exceptions import RedisError
from sqlalchemy.exc import OperationalError

from shared.memory.cache import MemoryCache
from shared.memory.scope import Scope
from shared.queue import INVALIDATE_MEMORY, RECONCILE, SUMMARIZE_TOPIC, Job
from shared.summaries.service import summarize_topic as summarize
from shared.topics.reconcile import closed_topics_awaiting_summary
from worker.context import context_of, unit_of_work

log = logging.getLogger(__name__)

# A database blip is worth retrying; everything else is a bug to surface, not to loop on.
RETRYABLE = (OperationalError,)


@shared_task(
    name=SUMMARIZE_TOPIC,
    bind=True,
    autoretry_for=RETRYABLE,
    retry_backoff=True,
    retry_backoff_max=60,
    max_retries=8,
)
def summarize_topic(self: Task, topic_id: str, trigger: str = "topic_closed") -> str:
    """Summarize one topic; a repeat for an unchanged topic makes no LLM call, writes nothing."""
    outcome = summarize(
        new_uow=lambda: unit_of_work(self.app),
        llm=context_of(self.app).llm,
        topic_id=uuid.UUID(topic_id),
        trigger=trigger,
    )
    log.info("summarize_topic %s: %s", topic_id, outcome.outcome)
    return outcome.outcome


@shared_task(name=INVALIDATE_MEMORY, bind=True, autoretry_for=(RedisError,), retry_backoff=True)
def invalidate_memory(self: Task, org_id: str, agent_id: str, user_id: str) -> None:
    """Drop a scope's cached memory block after a curation change committed (R15)."""
    scope = Scope.from_job_kwargs(org_id=org_id, agent_id=agent_id, user_id=user_id)
    MemoryCache(context_of(self.app).redis).invalidate(scope)


@shared_task(name=RECONCILE, bind=True)
def reconcile(self: Task) -> int:
    """Re-enqueue summaries whose job was lost; runs on beat every DRIFTLESS_RECONCILE_S."""
    grace = dt.timedelta(seconds=context_of(self.app).settings.reconcile_s)
    with unit_of_work(self.app) as uow:
        topic_ids = closed_topics_awaiting_summary(uow=uow, older_than=grace)
        for topic_id in topic_ids:
            uow.enqueue(Job(SUMMARIZE_TOPIC, {"topic_id": str(topic_id), "trigger": "reconcile"}))
        uow.commit()
    if topic_ids:
        log.warning("reconcile: re-enqueued %d lost summaries", len(topic_ids))
    return len(topic_ids)
