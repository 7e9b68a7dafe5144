"""The outbox: an event is recorded in the transaction of the change it reports.

`record_event` writes the event and one pending delivery per subscription of the org
that wants its type, in one statement, and asks for each delivery's job after the
commit (UnitOfWork). A rolled-back change leaves no event; a committed one always has
its deliveries, even if the job is lost on the way (the dispatcher finds them).

An org without a matching subscription writes nothing: the statement inserts the
event only when a delivery will point at it.
"""

from __future__ import annotations

import datetime as dt
import json
import time
import uuid
from collections.abc import Callable
from typing import Any, Final, Protocol

from sqlalchemy import text

from shared.infra.db.uow import UnitOfWork
from shared.infra.queue import DELIVER_WEBHOOK, Job
from shared.topics.models import Topic

TOPIC_SUMMARIZED: Final = "topic.summarized"
TOPIC_FORKED: Final = "topic.forked"
TOPIC_MEMORY_CHANGED: Final = "topic.memory_changed"
FACTS_CHANGED: Final = "facts.changed"
REEVALUATION_FINISHED: Final = "reevaluation.finished"
ORG_BUDGET_EXHAUSTED: Final = "org.budget_exhausted"
EVENT_TYPES: Final = (
    TOPIC_SUMMARIZED,
    TOPIC_FORKED,
    TOPIC_MEMORY_CHANGED,
    FACTS_CHANGED,
    REEVALUATION_FINISHED,
    ORG_BUDGET_EXHAUSTED,
)

# Events (and their deliveries) are kept this long: every delivery has long been settled
# (12 attempts at the default backoff span under 6 hours), and the deliveries list
# still shows a week of history.
RETENTION = dt.timedelta(days=7)
# Events deleted per transaction: short enough that no lock or snapshot is held for long.
PURGE_BATCH = 1000
# How long one pass may go on deleting batches. One batch a pass kept up with 17 events a
# second at the minute's period, far below what one org may write within its request
# limit; bench/purge_rate.py measures what a pass of this length keeps up with.
PURGE_PASS_S = 10.0

_RECORD = text(
    """
    WITH subscribers AS (
        SELECT id FROM webhooks WHERE org_id = :org_id AND :type = ANY(events)
    ), event AS (
        INSERT INTO webhook_events (id, org_id, agent_id, user_id, type, body)
        SELECT :event_id, :org_id, :agent_id, :user_id, :type, :body
        WHERE EXISTS (SELECT FROM subscribers)
        RETURNING id
    )
    INSERT INTO webhook_deliveries (webhook_id, event_id)
    SELECT subscribers.id, event.id FROM subscribers, event
    RETURNING id
    """
)


class _Scope(Protocol):
    """A memory scope (shared/memory/scope.py), as far as an event names it."""

    @property
    def agent_id(self) -> str: ...
    @property
    def user_id(self) -> str: ...


def scope_data(scope: _Scope, topic: Topic) -> dict[str, str]:
    """The ids a topic's event names: its session, itself, and the scope's agent and user."""
    return {
        "sessionId": str(topic.session_id),
        "topicId": str(topic.id),
        "agentId": scope.agent_id,
        "userId": scope.user_id,
    }


def record_event(
    uow: UnitOfWork, *, org_id: uuid.UUID, type: str, data: dict[str, Any]
) -> uuid.UUID:
    """Record an event of `type` for the org's subscribers, in `uow`'s transaction.

    `data` names the org's ids (sessionId, topicId, …) and the new state, in the API's
    camelCase; an event about one scope names its `agentId` and `userId`. Returns the
    event's id, the `webhook-id` of every delivery of it.
    """
    if type not in EVENT_TYPES:
        raise ValueError(f"unknown webhook event type {type!r}")
    event_id = uuid.uuid4()
    body = {"type": type, "timestamp": dt.datetime.now(dt.UTC).isoformat(), "data": data}
    deliveries = uow.connection().execute(
        _RECORD,
        {
            "event_id": event_id,
            "org_id": org_id,
            # A scope's events go with the scope when it is erased.
            "agent_id": data.get("agentId"),
            "user_id": data.get("userId"),
            "type": type,
            "body": json.dumps(body, separators=(",", ":"), ensure_ascii=False),
        },
    )
    for (delivery_id,) in deliveries:
        uow.enqueue(Job(DELIVER_WEBHOOK, {"delivery_id": delivery_id}))
    return event_id


_PURGE = text(
    """
    DELETE FROM webhook_events WHERE id IN (
        SELECT id FROM webhook_events WHERE created_at < :before LIMIT :limit
        FOR UPDATE SKIP LOCKED
    )
    """
)


def purge_old_events(
    *,
    new_uow: Callable[[], UnitOfWork],
    now: dt.datetime,
    budget_s: float = PURGE_PASS_S,
    batch: int = PURGE_BATCH,
    clock: Callable[[], float] = time.monotonic,
) -> int:
    """Delete events older than RETENTION, with their deliveries, a batch per transaction,
    until none is left or `budget_s` has passed (at least one batch); returns how many."""
    deadline = clock() + budget_s
    total = 0
    while True:
        # Rows another pass has locked are skipped, not waited for: two passes at once
        # (a beat tick queued behind a slow one) share the backlog instead of queuing.
        with new_uow() as uow:
            purged = int(
                uow.connection()
                .execute(_PURGE, {"before": now - RETENTION, "limit": batch})
                .rowcount
            )
            uow.commit()
        total += purged
        if purged < batch or clock() >= deadline:
            return total
