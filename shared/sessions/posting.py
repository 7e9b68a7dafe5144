"""Posting messages to a session's active topic: one message or a batch, in one transaction.

This is the hottest path of the service (every agent turn, every history import), so it
costs two statements whatever the batch size:

1. `UPDATE sessions … RETURNING` takes the session's row lock (R4: every writer of a
   session takes it first) and records the activity.
2. One statement with three parts: it finds the active topic, inserts the batch in
   order, and moves the topic's counters and `last_message_id`.

They cannot be one statement. Under READ COMMITTED a statement reads the snapshot of
its start; a statement that waited for the lock would then see the active topic as it
was before the writer it waited for (a fork, a new topic) committed, and the messages
would land in a closed topic, against R6. The second statement starts after the lock
is held, so it sees every change of the writers before it.

They are one round trip, though: sent as one query string, which PostgreSQL runs
statement by statement, each with a snapshot of its own start. A post is then three
round trips (BEGIN, these two, COMMIT) instead of four: a quarter of the time a post
waits on a database across a network, and of the web worker's `send()` calls to
PostgreSQL, over a quarter of its CPU on one host (py-spy --native). Only the second
statement's rows come back, so it checks the org itself: no rows means no such session
in this org.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import (
    ARRAY,
    ClauseElement,
    Integer,
    Select,
    Text,
    bindparam,
    func,
    insert,
    select,
    true,
    update,
)
from sqlalchemy.dialects.postgresql import psycopg2

from shared.db.uow import UnitOfWork
from shared.errors import Invalid, NotFound
from shared.limits import MAX_BATCH_MESSAGES, check_message_content
from shared.queue import EVALUATE_TOPIC, Job
from shared.sessions.models import ChatSession, Message
from shared.topics.models import Topic
from shared.triggers.rules import crosses_heartbeat

ROLES = ("user", "assistant", "tool")


@dataclass(frozen=True)
class NewMessage:
    role: str
    content: str
    tool_name: str | None = None
    tool_call_id: str | None = None


@dataclass(frozen=True)
class StoredMessage:
    id: int
    topic_id: uuid.UUID
    created_at: datetime


@dataclass(frozen=True)
class PostedMessages:
    """The stored messages in the order given, and whether a heartbeat was enqueued."""

    messages: Sequence[StoredMessage]
    drift_evaluation_enqueued: bool

    @property
    def message(self) -> StoredMessage:
        """The last message stored: the only one of a single post."""
        return self.messages[-1]

    @property
    def topic_id(self) -> uuid.UUID:
        return self.messages[-1].topic_id


def check_batch(messages: Sequence[NewMessage]) -> None:
    """The limits of a batch, for every writer (HTTP, tools, MCP); nothing is written."""
    if not 1 <= len(messages) <= MAX_BATCH_MESSAGES:
        raise Invalid(f"messages: a batch holds 1 to {MAX_BATCH_MESSAGES} messages")
    for index, message in enumerate(messages):
        if message.role not in ROLES:
            raise Invalid(f"messages.{index}.role: must be one of {', '.join(ROLES)}")
        if message.role != "tool" and (message.tool_name or message.tool_call_id):
            raise Invalid(
                f"messages.{index}: toolName and toolCallId are only allowed when role is 'tool'"
            )
        check_message_content(message.content)


def post_messages(
    *,
    uow: UnitOfWork,
    org_id: uuid.UUID,
    session_id: uuid.UUID,
    messages: Sequence[NewMessage],
    drift_interval: int = 10,
) -> PostedMessages:
    """Append `messages`, in order, to the session's active topic, all or none.

    R26 with its batch decision: when the topic's count of user + assistant messages
    crosses one or more multiples of `drift_interval`, one drift evaluation is enqueued,
    after the whole batch is stored (the job goes out after the commit).
    """
    check_batch(messages)
    # Core statements on the session's connection: the same transaction, without the
    # ORM's bookkeeping for rows it does not track (half of this path's CPU before).
    counted = sum(1 for m in messages if m.role != "tool")  # tool messages are not counted (R7)
    rows = (
        uow.session.connection()
        .exec_driver_sql(
            _LOCK_THEN_INSERT.sql,
            {
                **_LOCK_THEN_INSERT.literals,
                "session": session_id,
                "org": org_id,
                "roles": [m.role for m in messages],
                "contents": [m.content for m in messages],
                "tool_names": [m.tool_name for m in messages],
                "tool_call_ids": [m.tool_call_id for m in messages],
                "counted": counted,
                "tools": len(messages) - counted,
            },
        )
        .all()
    )
    # ORM objects this unit of work already holds of this session are stale now (the
    # writes were Core): reload them, so a later read in the same transaction (open_topic)
    # sees the new counters. Reloaded, not expired: callers use them after the commit.
    for held in list(uow.session.identity_map.values()):
        if (isinstance(held, Topic) and held.session_id == session_id) or (
            isinstance(held, ChatSession) and held.id == session_id
        ):
            uow.session.refresh(held)
    if not rows:  # no such session in the org (a session always has an active topic)
        raise NotFound(f"session {session_id} not found")
    stored = [StoredMessage(id=r.id, topic_id=r.topic_id, created_at=r.created_at) for r in rows]
    after = rows[0].message_count
    heartbeat = crosses_heartbeat(before=after - counted, after=after, interval=drift_interval)
    if heartbeat:
        job = Job(EVALUATE_TOPIC, {"topic_id": str(stored[-1].topic_id), "trigger": "heartbeat"})
        uow.enqueue(job)
    return PostedMessages(messages=stored, drift_evaluation_enqueued=heartbeat)


# Both statements are built and compiled once, into one query string (OneRoundTrip
# below): building one costs more than running it.

# The session's row lock (as `load_session(lock=True)`) and its activity, in one statement.
_LOCK_SESSION = (
    update(ChatSession)
    .where(ChatSession.id == bindparam("session"), ChatSession.org_id == bindparam("org"))
    .values(last_activity_at=func.now())
    .returning(ChatSession.id)
)


# The batch's columns, one array parameter each.
COLUMNS = ("roles", "contents", "tool_names", "tool_call_ids")


def _insert_into_active_topic() -> Select[Any]:
    """WITH active, stored (INSERT … SELECT … ORDER BY), moved (UPDATE topics): one row
    per stored message, in order, each carrying the topic's new count.

    One array per column keeps the statement the same text whatever the batch size.
    PostgreSQL draws the ids as the ordered SELECT produces its rows, so they follow the
    batch's order (SQLAlchemy's own "insertmanyvalues" relies on the same behaviour).
    """
    text_array: ARRAY[Any] = ARRAY(Text)
    session_id = bindparam("session", type_=ChatSession.id.type)
    active = (
        select(Topic.id)
        .join(ChatSession, ChatSession.id == Topic.session_id)
        .where(
            Topic.session_id == session_id,
            Topic.status == "active",
            ChatSession.org_id == bindparam("org"),  # the lock's check, whose rows are not read
        )
        .cte("active")
    )
    batch = (
        func.unnest(
            *(bindparam(name, type_=text_array) for name in COLUMNS),
        )
        .table_valued("role", "content", "tool_name", "tool_call_id", with_ordinality="position")
        .render_derived(name="batch")
    )
    stored = (
        insert(Message)
        .from_select(
            ["session_id", "topic_id", "role", "content", "tool_name", "tool_call_id"],
            select(
                session_id,
                active.c.id,
                batch.c.role,
                batch.c.content,
                batch.c.tool_name,
                batch.c.tool_call_id,
            )
            .select_from(active.join(batch, true()))  # every row of the batch, into the topic
            .order_by(batch.c.position),
        )
        .returning(Message.id, Message.topic_id, Message.created_at)
        .cte("stored")
    )
    moved = (
        update(Topic)
        .where(Topic.id == active.c.id)
        .values(
            message_count=Topic.message_count + bindparam("counted", type_=Integer),
            tool_message_count=Topic.tool_message_count + bindparam("tools", type_=Integer),
            last_message_id=select(func.max(stored.c.id)).scalar_subquery(),
        )
        .returning(Topic.message_count)
        .cte("moved")
    )
    count = select(moved.c.message_count).scalar_subquery()  # one row: the topic's new count
    return select(
        stored.c.id, stored.c.topic_id, stored.c.created_at, count.label("message_count")
    ).order_by(stored.c.id)


@dataclass(frozen=True)
class OneRoundTrip:
    """Statements as one query string for the driver, and the values they bind themselves
    (literals such as 'active'); the caller adds its own parameters."""

    sql: str
    literals: dict[str, Any]

    @classmethod
    def of(cls, *statements: ClauseElement) -> OneRoundTrip:
        # The engine's driver (shared/db/engine.py): its parameter style and casts.
        dialect = psycopg2.dialect()  # type: ignore[no-untyped-call, unused-ignore]
        compiled = [statement.compile(dialect=dialect) for statement in statements]
        literals: dict[str, Any] = {}
        for name, value in (p for c in compiled for p in c.params.items() if p[1] is not None):
            # Each statement names its own literals (status_1, …): one name, two values
            # would bind the wrong one in the other statement.
            if literals.setdefault(name, value) != value:
                raise ValueError(f"the statements bind {name!r} to different values")
        return cls(sql=";\n".join(str(c) for c in compiled), literals=literals)


_LOCK_THEN_INSERT = OneRoundTrip.of(_LOCK_SESSION, _insert_into_active_topic())
