"""Selecting topics for an operator's re-evaluation (after a prompt or model change)."""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TypeVarTuple

from sqlalchemy import Select, func, select

from shared.auth.models import Org
from shared.db.uow import UnitOfWork
from shared.queue import EVALUATE_TOPIC, SUMMARIZE_TOPIC, Job
from shared.sessions.models import ChatSession
from shared.topics.models import Topic

BATCH = 500
Row = TypeVarTuple("Row")


@dataclass(frozen=True)
class Selection:
    org: str | None = None
    agent_id: str | None = None
    user_id: str | None = None
    since: dt.datetime | None = None  # topics created at or after


def _filtered(query: Select[*Row], selection: Selection) -> Select[*Row]:
    query = query.join(ChatSession, ChatSession.id == Topic.session_id).where(
        Topic.last_message_id.is_not(None)
    )
    if selection.org is not None:
        query = query.join(Org, Org.id == ChatSession.org_id).where(Org.name == selection.org)
    if selection.agent_id is not None:
        query = query.where(ChatSession.agent_id == selection.agent_id)
    if selection.user_id is not None:
        query = query.where(ChatSession.user_id == selection.user_id)
    if selection.since is not None:
        query = query.where(Topic.created_at >= selection.since)
    return query


def count_topics(*, uow: UnitOfWork, selection: Selection) -> int:
    return int(uow.session.scalar(_filtered(select(func.count(Topic.id)), selection)) or 0)


def reevaluation_jobs(*, uow: UnitOfWork, selection: Selection) -> Iterator[Job]:
    """One job per matching topic, read in id-ordered batches (never all at once).

    A closed topic is re-summarized; the active one gets the full evaluation. Both skip
    work whose watermark is current, so a re-run after no change costs no LLM call.
    """
    after: uuid.UUID | None = None
    while True:
        query = _filtered(select(Topic.id, Topic.status), selection).order_by(Topic.id).limit(BATCH)
        if after is not None:
            query = query.where(Topic.id > after)
        rows = uow.session.execute(query).all()
        for topic_id, status in rows:
            task = EVALUATE_TOPIC if status == "active" else SUMMARIZE_TOPIC
            yield Job(task, {"topic_id": str(topic_id), "trigger": "reevaluate"})
        if len(rows) < BATCH:
            return
        after = rows[-1][0]
