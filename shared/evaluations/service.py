"""The audit rows of a topic's evaluations and summaries: writing one, reading them."""

from __future__ import annotations

import datetime as dt
import uuid

from sqlalchemy import insert, select

from shared.evaluations.models import Evaluation
from shared.infra.db.uow import UnitOfWork
from shared.llm.base import Completion
from shared.sessions.service import get_topic

# Every summary and evaluation writes one (the worker's hot path): a plain insert built
# once, not an ORM object and a flush, which cost several times the round trip.
_INSERT_EVALUATION = insert(Evaluation)


def record_evaluation(
    *,
    uow: UnitOfWork,
    topic_id: uuid.UUID,
    trigger: str,
    outcome: str,
    completions: list[Completion | None],
    llm_calls: int,
    error: str | None,
    started_at: dt.datetime,
) -> None:
    """The audit row of one evaluation or summarization: what ran, what it cost."""
    answered = [c for c in completions if c is not None]
    uow.session.connection().execute(
        _INSERT_EVALUATION,
        {
            "topic_id": topic_id,
            "trigger": trigger,
            "outcome": outcome,
            "llm_calls": llm_calls,
            "prompt_tokens": sum(c.usage.prompt_tokens for c in answered),
            "completion_tokens": sum(c.usage.completion_tokens for c in answered),
            "model": answered[-1].model if answered else None,
            "error": error,
            "started_at": started_at,
            "finished_at": dt.datetime.now(dt.UTC),
        },
    )


def list_evaluations(
    *, uow: UnitOfWork, org_id: uuid.UUID, topic_id: uuid.UUID
) -> list[Evaluation]:
    topic = get_topic(uow=uow, org_id=org_id, topic_id=topic_id)
    return list(
        uow.session.scalars(
            select(Evaluation).where(Evaluation.topic_id == topic.id).order_by(Evaluation.id)
        )
    )
