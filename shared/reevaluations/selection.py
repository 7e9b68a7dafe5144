"""Which topics a re-evaluation covers, and the job that re-evaluates each one."""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeVarTuple

from sqlalchemy import ColumnElement, Select, and_, false, func, or_, select

from shared.infra.db.uow import UnitOfWork
from shared.infra.queue import EVALUATE_TOPIC, SUMMARIZE_TOPIC, Job
from shared.sessions.models import ChatSession
from shared.topics.models import Topic

Row = TypeVarTuple("Row")


@dataclass(frozen=True)
class Maker:
    """What makes a summary current: the prompt version and the model (as configured)."""

    prompt_version: str
    model: str


@dataclass(frozen=True)
class Selection:
    """Topics with messages, narrowed by every field that is set."""

    org_id: uuid.UUID | None = None
    agent_id: str | None = None
    user_id: str | None = None
    since: dt.datetime | None = None  # topics created at or after
    until: dt.datetime | None = None  # ...and at or before (a campaign's start)
    # Only topics whose summary another prompt version or model made. A topic never
    # summarized is not stale (nothing to redo), nor one whose model was not recorded.
    stale_for: Maker | None = None


def _filtered(query: Select[*Row], selection: Selection) -> Select[*Row]:
    query = query.join(ChatSession, ChatSession.id == Topic.session_id).where(
        Topic.last_message_id.is_not(None)
    )
    if selection.org_id is not None:
        query = query.where(ChatSession.org_id == selection.org_id)
    if selection.agent_id is not None:
        query = query.where(ChatSession.agent_id == selection.agent_id)
    if selection.user_id is not None:
        query = query.where(ChatSession.user_id == selection.user_id)
    if selection.since is not None:
        query = query.where(Topic.created_at >= selection.since)
    if selection.until is not None:
        query = query.where(Topic.created_at <= selection.until)
    if selection.stale_for is not None:
        current = selection.stale_for
        query = query.where(
            Topic.summary_prompt_version.is_not(None),
            or_(
                Topic.summary_prompt_version != current.prompt_version,
                and_(Topic.summary_model.is_not(None), Topic.summary_model != current.model),
            ),
        )
    return query


def count_topics(*, uow: UnitOfWork, selection: Selection) -> int:
    return int(uow.session.scalar(_filtered(select(func.count(Topic.id)), selection)) or 0)


def is_current(maker: Maker) -> ColumnElement[bool]:
    """The topic's summary covers its every message and `maker` made it: what the jobs'
    own check (shared/summaries/service.py is_summary_current) finds, as SQL."""
    return and_(
        Topic.last_message_id.is_not(None),
        Topic.summarized_through_id == Topic.last_message_id,
        Topic.summary_prompt_version == maker.prompt_version,
        or_(Topic.summary_model.is_(None), Topic.summary_model == maker.model),
    )


def topics_after(
    *,
    uow: UnitOfWork,
    selection: Selection,
    after: uuid.UUID | None,
    limit: int,
    current: Maker | None = None,
) -> Sequence[Any]:
    """(id, status, current) of the next `limit` matching topics in id order after `after`;
    `current`: whether `current` made the topic's summary of all it holds (never, if None)."""
    up_to_date = false() if current is None else is_current(current)
    query = _filtered(select(Topic.id, Topic.status, up_to_date.label("current")), selection)
    query = query.order_by(Topic.id).limit(limit)
    if after is not None:
        query = query.where(Topic.id > after)
    return uow.session.execute(query).all()


def reevaluation_job(
    *, topic_id: uuid.UUID, status: str | None, campaign_id: uuid.UUID, org_id: uuid.UUID | None
) -> Job:
    """A closed topic is re-summarized; the active one gets the full evaluation. Both skip
    work whose summary is current, so a re-run after no change costs no LLM call. A topic
    gone meanwhile (`status` None) gets the summary job, which finds nothing and ends.
    Both in the bulk lane, behind every live job, taking turns by the campaign's org (the
    fleet's own campaign as one more org: shared/infra/fair.py)."""
    task = EVALUATE_TOPIC if status == "active" else SUMMARIZE_TOPIC
    kwargs = {"topic_id": str(topic_id), "trigger": "reevaluate", "campaign_id": str(campaign_id)}
    org = None if org_id is None else str(org_id)
    return Job(task, kwargs, lane="bulk", org=org)  # behind live work: shared/infra/queue.py
