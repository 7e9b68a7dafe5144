"""One call removes an org + agent + user: sessions, topics, messages, notes, forks,
evaluations and curation audit rows (all cascade from the sessions), durable facts and
their history, the webhook events about them, the re-evaluation campaigns narrowed to
them, and afterwards the Redis state keyed by them. Audit rows go too: they hold titles
and who decided what about this user's conversations, which is the user's data.

`erase_user_everywhere` is that one call, for the HTTP API and the CLI alike."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import redis
from sqlalchemy import delete, func, select, text
from sqlalchemy.orm import InstrumentedAttribute

from shared.context.working_memory import forget_working_memory
from shared.curation.models import MemoryChange
from shared.evaluations.models import Evaluation
from shared.facts.models import FactsDocument, FactVersion
from shared.infra.db.uow import UnitOfWork
from shared.infra.held import forget_held
from shared.infra.queue import MODEL_TASKS
from shared.memory.cache import MemoryCache
from shared.memory.scope import Scope
from shared.memory.versions import MemoryVersion
from shared.notes.models import NotesDocument
from shared.reconcile.claims import forget_claims
from shared.reevaluations.models import ReevaluationCampaign as Campaign
from shared.sessions.models import ChatSession, Message
from shared.topics.models import Fork, Topic
from shared.triggers.debounce import forget_topic
from shared.webhooks.models import WebhookEvent

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Erased:
    counts: dict[str, int]
    session_ids: list[uuid.UUID] = field(default_factory=list)
    topic_ids: list[uuid.UUID] = field(default_factory=list)


def erase_user_everywhere(
    *, new_uow: Callable[[], UnitOfWork], redis_client: redis.Redis, scope: Scope
) -> Erased:
    """Erase the scope: its rows in one transaction, then, once that committed, its Redis
    keys. Redis being down leaves the keys to expire on their own (the rows are gone)."""
    with new_uow() as uow:
        erased = erase_user(uow=uow, scope=scope)
        uow.commit()
    try:
        erased.counts["redisKeys"] = forget_in_redis(redis_client, scope, erased)
    except redis.RedisError:
        log.warning("erasure of %s left Redis keys to expire", scope)
    return erased


def erase_user(*, uow: UnitOfWork, scope: Scope) -> Erased:
    """Delete the scope's rows (the caller commits, then calls `forget_in_redis`)."""
    # The right to erasure has no size: the web's statement timeout bounds queries a
    # client can repeat at will, but a user's lifetime of rows goes in one transaction
    # that must finish, however long it takes.
    uow.session.execute(text("SET LOCAL statement_timeout = 0"))
    session_ids = list(
        uow.session.scalars(
            select(ChatSession.id).where(
                ChatSession.org_id == scope.org_id,
                ChatSession.agent_id == scope.agent_id,
                ChatSession.user_id == scope.user_id,
            )
        )
    )
    topic_ids = list(uow.session.scalars(select(Topic.id).where(Topic.session_id.in_(session_ids))))

    def count(column: InstrumentedAttribute[Any], ids: list[uuid.UUID]) -> int:
        return int(uow.session.scalar(select(func.count()).where(column.in_(ids))) or 0)

    counts = {
        "sessions": len(session_ids),
        "topics": len(topic_ids),
        "messages": count(Message.session_id, session_ids),
        "notes": count(NotesDocument.topic_id, topic_ids),
        "evaluations": count(Evaluation.topic_id, topic_ids),
        "memoryChanges": count(MemoryChange.topic_id, topic_ids),
        "forks": count(Fork.session_id, session_ids),
    }
    facts = uow.session.execute(
        delete(FactsDocument).where(
            FactsDocument.org_id == scope.org_id,
            FactsDocument.agent_id == scope.agent_id,
            FactsDocument.user_id == scope.user_id,
        )
    )
    counts["facts"] = int(facts.rowcount)  # type: ignore[attr-defined]
    # The history holds every value the user's facts ever had: it goes with them.
    versions = uow.session.execute(
        delete(FactVersion).where(
            FactVersion.org_id == scope.org_id,
            FactVersion.agent_id == scope.agent_id,
            FactVersion.user_id == scope.user_id,
        )
    )
    counts["factVersions"] = int(versions.rowcount)  # type: ignore[attr-defined]
    # Bookkeeping, not content, but it names the user: it goes too.
    uow.session.execute(
        delete(MemoryVersion).where(
            MemoryVersion.org_id == scope.org_id,
            MemoryVersion.agent_id == scope.agent_id,
            MemoryVersion.user_id == scope.user_id,
        )
    )
    # Webhook events about the scope hold its titles, summaries and facts; their
    # deliveries go with them (a delivery still owed is not sent).
    uow.session.execute(
        delete(WebhookEvent).where(
            WebhookEvent.org_id == scope.org_id,
            WebhookEvent.agent_id == scope.agent_id,
            WebhookEvent.user_id == scope.user_id,
        )
    )
    # A re-evaluation campaign narrowed to this agent + user names them: it goes, its
    # items with it (a job still running for one of them then settles nothing).
    uow.session.execute(
        delete(Campaign).where(
            Campaign.org_id == scope.org_id,
            Campaign.agent_id == scope.agent_id,
            Campaign.user_id == scope.user_id,
        )
    )
    # Topics, messages, notes, forks, evaluations and audit rows cascade from the sessions.
    uow.session.execute(delete(ChatSession).where(ChatSession.id.in_(session_ids)))
    return Erased(counts=counts, session_ids=session_ids, topic_ids=topic_ids)


def forget_in_redis(client: redis.Redis, scope: Scope, erased: Erased) -> int:
    """Drop every Redis key of what was erased: the scope's memory cache and its
    generation, working memory, debounce state and guards, reconcile claims, and the
    marks of their model jobs."""
    removed = MemoryCache(client).forget(scope)
    removed += sum(forget_working_memory(client, session_id) for session_id in erased.session_ids)
    removed += sum(forget_topic(client, topic_id) for topic_id in erased.topic_ids)
    removed += forget_claims(client, erased.topic_ids)
    removed += forget_held(client, sorted(MODEL_TASKS), erased.topic_ids)
    return removed
