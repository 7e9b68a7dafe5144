"""Purging idle sessions: a session is not a permanent record, its memory is.

A session idle for longer than the retention period loses its raw messages and its
archived notes. Its topics stay with their titles, summaries and memory flags (promoted
summaries are what the memory block is made of), and so do forks, the curation audit
and each topic's latest evaluation, which are small and per topic: the evaluation audit
otherwise grows with the messages (about one row per heartbeat), so older rows go with
them. Active notes stay too: they are the working notes of the topic a returning user
continues in.

Nothing a summary has not seen is deleted: a session with a topic whose summary is
behind its last message gets that summary enqueued and waits for a later run. Each
session is purged in its own short transaction, a bounded number per run, so one run
never holds long locks; the session row's lock keeps a message posted meanwhile safe.
"""

from __future__ import annotations

import datetime as dt
import logging
import uuid
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

from sqlalchemy import delete, func, or_, select, tuple_

from shared.evaluations.models import Evaluation
from shared.infra.db.uow import UnitOfWork
from shared.infra.queue import SUMMARIZE_TOPIC, Job
from shared.notes.models import NotesDocument
from shared.sessions.models import ChatSession, Message
from shared.topics.models import Topic

log = logging.getLogger(__name__)

RETENTION_BATCH = 500  # sessions read per query; each is purged in its own transaction
# Sessions one run may look at: with the hourly sweep, 120k sessions a day. A run walks
# the candidates with a cursor, so sessions waiting for a summary never block the rest.
MAX_SESSIONS_PER_RUN = 5000


@dataclass(frozen=True)
class Purged:
    sessions: int = 0  # sessions purged by this run
    messages: int = 0
    notes: int = 0
    evaluations: int = 0  # all but each topic's latest
    deferred: int = 0  # sessions left for a later run: a summary had to catch up first

    def __add__(self, other: Purged) -> Purged:
        return Purged(
            *(a + b for a, b in zip(asdict(self).values(), asdict(other).values(), strict=True))
        )

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


Cursor = tuple[dt.datetime, uuid.UUID]  # (last_activity_at, id) of the last session read


def awaiting_purge(
    *, uow: UnitOfWork, idle_before: dt.datetime, limit: int, after: Cursor | None = None
) -> Sequence[Cursor]:
    """Sessions idle since before `idle_before` with activity no purge has covered,
    longest idle first, from `after` on."""
    query = select(ChatSession.last_activity_at, ChatSession.id).where(
        # Spelled as ix_sessions_awaiting_purge's predicate, so the planner uses it.
        or_(
            ChatSession.purged_through.is_(None),
            ChatSession.purged_through < ChatSession.last_activity_at,
        ),
        ChatSession.last_activity_at < idle_before,
    )
    if after is not None:
        query = query.where(tuple_(ChatSession.last_activity_at, ChatSession.id) > tuple_(*after))
    rows = uow.session.execute(
        query.order_by(ChatSession.last_activity_at, ChatSession.id).limit(limit)
    ).all()
    return [(row.last_activity_at, row.id) for row in rows]


def purge_session(*, uow: UnitOfWork, session_id: uuid.UUID, idle_before: dt.datetime) -> Purged:
    """Purge one idle session (the caller commits); a no-op if it is busy, active again,
    already purged, or has a summary to catch up first (which it enqueues)."""
    # The lock every writer of the session takes first: no message can arrive meanwhile.
    # SKIP LOCKED: a session someone is writing to is not idle, retention need not wait.
    session = uow.session.scalar(
        select(ChatSession).where(ChatSession.id == session_id).with_for_update(skip_locked=True)
    )
    if session is None or session.last_activity_at >= idle_before:
        return Purged()
    if session.purged_through is not None and session.purged_through >= session.last_activity_at:
        return Purged()
    behind = uow.session.scalars(
        select(Topic.id).where(
            Topic.session_id == session.id,
            Topic.last_message_id.is_not(None),
            Topic.summarized_through_id.is_distinct_from(Topic.last_message_id),
        )
    ).all()
    if behind:
        for topic_id in behind:
            kwargs = {"topic_id": str(topic_id), "trigger": "retention"}
            uow.enqueue(Job(SUMMARIZE_TOPIC, kwargs, org=str(session.org_id)))
        return Purged(deferred=1)
    # No foreign key points at a message (forks keep a message id as a plain boundary,
    # tool results pair by tool_call_id), so the rows can go without touching others.
    messages = uow.session.execute(delete(Message).where(Message.session_id == session.id))
    notes = uow.session.execute(
        delete(NotesDocument).where(
            NotesDocument.status == "archived",
            NotesDocument.topic_id.in_(select(Topic.id).where(Topic.session_id == session.id)),
        )
    )
    session_topics = select(Topic.id).where(Topic.session_id == session.id)
    latest = (
        select(func.max(Evaluation.id))
        .where(Evaluation.topic_id.in_(session_topics))
        .group_by(Evaluation.topic_id)
    )
    evaluations = uow.session.execute(
        delete(Evaluation).where(
            Evaluation.topic_id.in_(session_topics), Evaluation.id.not_in(latest)
        )
    )
    # The activity purged through, not a clock reading: a message posted after this
    # commit moves last_activity_at past it and makes the session a candidate again.
    session.purged_through = session.last_activity_at
    return Purged(
        sessions=1,
        messages=int(messages.rowcount),  # type: ignore[attr-defined]
        notes=int(notes.rowcount),  # type: ignore[attr-defined]
        evaluations=int(evaluations.rowcount),  # type: ignore[attr-defined]
    )


def purge_idle_sessions(
    *,
    new_uow: Callable[[], UnitOfWork],
    now: dt.datetime,
    retention: dt.timedelta,
    batch: int = RETENTION_BATCH,
    max_sessions: int = MAX_SESSIONS_PER_RUN,
) -> Purged:
    """Purge sessions idle for longer than `retention`, at most `max_sessions` looked at,
    one transaction each."""
    idle_before = now - retention
    total, seen, cursor = Purged(), 0, None
    while seen < max_sessions:
        limit = min(batch, max_sessions - seen)
        with new_uow() as uow:
            page = awaiting_purge(uow=uow, idle_before=idle_before, limit=limit, after=cursor)
        for _, session_id in page:
            with new_uow() as uow:
                total += purge_session(uow=uow, session_id=session_id, idle_before=idle_before)
                uow.commit()  # also sends the summaries a deferred session waits for
        seen += len(page)
        if len(page) < limit:
            break
        cursor = page[-1]
    log.info("retention: %s", total.as_dict())
    return total
