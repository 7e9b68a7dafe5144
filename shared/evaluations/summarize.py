"""The summary job (R9): one topic summarized with one LLM call, and audited.

Run when a topic closes (R25), and by the reconciler, retention and re-evaluation. The
steps are summarization's (shared/summaries/service.py); the job and its audit row are
this package's, like the evaluation pipeline's beside it.
"""

from __future__ import annotations

import datetime as dt
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass

import redis

from shared.evaluations.service import record_evaluation
from shared.infra.db.uow import UnitOfWork
from shared.infra.live import publish
from shared.llm.base import LLM
from shared.memory.scope import lock_topic
from shared.summaries.service import (
    apply_summary,
    ask_summary,
    is_stored,
    still_describes,
    take_snapshot,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SummaryOutcome:
    topic_id: uuid.UUID
    outcome: str  # refresh | fallback | skipped
    keep_in_memory: bool | None = None
    session_id: uuid.UUID | None = None  # set when something was written


def summary_job(
    *,
    new_uow: Callable[[], UnitOfWork],
    llm: LLM,
    live: redis.Redis,
    topic_id: uuid.UUID,
    trigger: str,
) -> SummaryOutcome:
    """The summarize_topic job: the summary, then the live event."""
    outcome = summarize_topic(new_uow=new_uow, llm=llm, topic_id=topic_id, trigger=trigger)
    if outcome.session_id is not None:
        publish(live, outcome.session_id, "summary", topic_id)
    return outcome


def summarize_topic(
    *, new_uow: Callable[[], UnitOfWork], llm: LLM, topic_id: uuid.UUID, trigger: str
) -> SummaryOutcome:
    """Summarize the topic with one LLM call, unless its summary is already current."""
    started_at = dt.datetime.now(dt.UTC)
    with new_uow() as uow:
        snapshot = take_snapshot(uow=uow, topic_id=topic_id, model=llm.model)
    if snapshot is None:
        return SummaryOutcome(topic_id, "skipped")
    completion, error = ask_summary(llm, snapshot)
    with new_uow() as uow:
        locked = lock_topic(uow=uow, topic_id=topic_id)
        if locked is None:
            return SummaryOutcome(topic_id, "skipped")
        topic, scope = locked
        if is_stored(topic, snapshot, llm.model):
            return SummaryOutcome(topic_id, "skipped", topic.keep_in_memory)
        if not still_describes(uow=uow, topic=topic, snapshot=snapshot):
            # Whatever changed it (a fork) enqueued the summary of what it is now.
            log.info("topic %s changed during its summary call; answer discarded", topic_id)
            return SummaryOutcome(topic_id, "skipped", topic.keep_in_memory)
        outcome, error = apply_summary(
            uow=uow, topic=topic, scope=scope, snapshot=snapshot, completion=completion,
            error=error, model=llm.model,
        )  # fmt: skip
        record_evaluation(
            uow=uow, topic_id=topic_id, trigger=trigger, outcome=outcome,
            completions=[completion], llm_calls=1, error=error, started_at=started_at,
        )  # fmt: skip
        keep, session_id = topic.keep_in_memory, topic.session_id
        uow.commit()
    return SummaryOutcome(topic_id, outcome, keep, session_id)
