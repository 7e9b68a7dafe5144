"""The silent fork (R6): one transaction moves the new subject's messages to a new active
topic, closes the prior topic with its summary and archives its notes (R24, R25).

A session writer like posting a message: it takes the session's lock first (R4). The
record it leaves is `shared.topics.models.Fork`."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from sqlalchemy import func, select, update

from shared.infra.db.uow import UnitOfWork
from shared.infra.metrics import FORKS, count_on_commit
from shared.sessions.models import ChatSession, Message
from shared.sessions.service import active_topic
from shared.topics.models import Fork, Topic
from shared.webhooks.events import TOPIC_FORKED, record_event


@dataclass(frozen=True)
class ForkedTopics:
    prior: Topic
    new: Topic
    session: ChatSession  # row-locked: whose memory scope the prior's summary is in
    moved: int


def messages_from(
    *, uow: UnitOfWork, topic_id: uuid.UUID, first_message_id: int
) -> list[tuple[int, str]]:
    """(id, role) of the topic's messages from `first_message_id` on: the window's tail
    plus any posted since, so a bounded set."""
    return [
        (row.id, row.role)
        for row in uow.session.execute(
            select(Message.id, Message.role)
            .where(Message.topic_id == topic_id, Message.id >= first_message_id)
            .order_by(Message.id)
        )
    ]


def fork_topic(
    *, uow: UnitOfWork, topic_id: uuid.UUID, first_message_id: int, new_title: str | None
) -> ForkedTopics | None:
    """Fork the active topic at `first_message_id`; None if it is no longer active.

    Takes the session's row lock first, like every writer of the session: a message
    posted meanwhile either committed before (it is moved along, being newer than the
    boundary) or waits and then lands in the new active topic (R6).
    """
    session = uow.session.scalar(
        select(ChatSession)
        .join(Topic, Topic.session_id == ChatSession.id)
        .where(Topic.id == topic_id)
        .with_for_update(of=ChatSession)
    )
    if session is None:
        return None
    prior = active_topic(uow=uow, session_id=session.id)
    if prior.id != topic_id:
        return None
    uow.session.refresh(prior, with_for_update=True)
    moving = messages_from(uow=uow, topic_id=prior.id, first_message_id=first_message_id)
    if not moving:
        return None
    moved_ua = sum(1 for _, role in moving if role != "tool")
    prior.status, prior.closed_at = "closed", func.now()
    uow.session.flush()  # the partial unique index sees one active topic at a time
    new = Topic(
        session_id=session.id,
        status="active",
        title=new_title,
        message_count=moved_ua,
        tool_message_count=len(moving) - moved_ua,
        last_message_id=moving[-1][0],
    )
    uow.session.add(new)
    uow.session.flush()
    uow.session.execute(
        update(Message)
        .where(Message.topic_id == prior.id, Message.id >= first_message_id)
        .values(topic_id=new.id)
    )
    prior.message_count -= moved_ua
    prior.tool_message_count -= len(moving) - moved_ua
    prior.last_message_id = uow.session.scalar(
        select(func.max(Message.id)).where(Message.topic_id == prior.id)
    )
    uow.session.flush()
    uow.session.refresh(new)
    return ForkedTopics(prior=prior, new=new, session=session, moved=len(moving))


def record_fork(*, uow: UnitOfWork, forked: ForkedTopics, first_message_id: int) -> None:
    """The session's drift result (R1): titles as they stand once the prior is summarized."""
    uow.session.add(
        Fork(
            session_id=forked.prior.session_id,
            from_topic_id=forked.prior.id,
            to_topic_id=forked.new.id,
            from_title=forked.prior.title,
            to_title=forked.new.title,
            first_message_id=first_message_id,
        )
    )
    count_on_commit(uow.session, FORKS)
    session = forked.session
    record_event(
        uow,
        org_id=session.org_id,
        type=TOPIC_FORKED,
        data={
            "sessionId": str(session.id),
            "agentId": session.agent_id,
            "userId": session.user_id,
            "fromTopicId": str(forked.prior.id),
            "fromTitle": forked.prior.title,
            "toTopicId": str(forked.new.id),
            "toTitle": forked.new.title,
        },
    )
