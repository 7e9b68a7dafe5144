"""Posting messages to a session's active topic: one message or a batch, in one transaction.

This is the hottest path of the service (every agent turn, every history import), so it
is one call of a database function whatever the batch size: `append_messages(…)`
(migrations 0008 and 0023) takes the session's row lock (R4: every writer of a session takes it
first), records the activity, finds the active topic, inserts the batch in order and
moves the topic's counters and `last_message_id`.

Why a function: PostgreSQL parsed and planned the post's statements on every call, more
CPU than running them (pgbench, one client: 1.2 ms per post as two statements, 0.6 ms
as the function). PL/pgSQL plans each of its statements once per connection, which works
behind PgBouncer's transaction mode too: no session state of the client is involved.

Why it is still correct under concurrency: the function is VOLATILE, so under READ
COMMITTED each of its statements reads a snapshot of its own start. The active topic is
read after the lock is held, so a post that waited for a fork sees the fork's new topic
(R6), as the two statements of earlier versions did.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from shared.domain.errors import Invalid, NotFound
from shared.domain.limits import MAX_BATCH_MESSAGES, check_message_content, check_message_name
from shared.infra.db.uow import UnitOfWork
from shared.infra.queue import EVALUATE_TOPIC, Job
from shared.sessions.models import ChatSession
from shared.topics.models import Topic
from shared.triggers.rules import crosses_heartbeat

ROLES = ("user", "assistant", "tool")


@dataclass(frozen=True)
class NewMessage:
    role: str
    content: str
    tool_name: str | None = None
    tool_call_id: str | None = None
    name: str | None = None  # who spoke (OpenAI's `name`): searched, embedded, in context


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
        check_message_name(message.name, role=message.role, field=f"messages.{index}.name")


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
    # A Core statement on the unit's connection (the session's transaction, or the one
    # statement's own), without the ORM's bookkeeping for rows it does not track.
    counted = sum(1 for m in messages if m.role != "tool")  # tool messages are not counted (R7)
    rows = (
        uow.connection()
        .exec_driver_sql(
            _APPEND_MESSAGES,
            {
                "session": session_id,
                "org": org_id,
                "roles": [m.role for m in messages],
                "contents": [m.content for m in messages],
                "names": [m.name for m in messages],
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
        kwargs = {"topic_id": str(stored[-1].topic_id), "trigger": "heartbeat"}
        job = Job(EVALUATE_TOPIC, kwargs, org=str(org_id))
        uow.enqueue(job)
    return PostedMessages(messages=stored, drift_evaluation_enqueued=heartbeat)


# One array per column keeps the call the same text whatever the batch size. The casts
# type a batch whose tool columns are all NULL (psycopg2 sends ARRAY[NULL]).
_APPEND_MESSAGES = (
    "SELECT id, topic_id, created_at, message_count FROM append_messages("
    "%(session)s, %(org)s, %(roles)s::text[], %(contents)s::text[], %(names)s::text[],"
    " %(tool_names)s::text[], %(tool_call_ids)s::text[], %(counted)s, %(tools)s)"
)
