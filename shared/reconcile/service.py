"""Finding work whose job was lost, and asking for it again: summaries, evaluations and
cached memory blocks (the claims on what was re-enqueued are in claims.py).

PostgreSQL is the source of truth; Redis as a broker loses queued jobs when it restarts
without persistence, and a job held by a worker killed with `kill -9` comes back only
after the visibility timeout. The beat runs `reconcile` every DRIFTLESS_RECONCILE_S and
each kind below is a condition the database shows when its job never ran:

- summaries: closed topics whose summary watermark is behind their last message. This
  also covers forks whose prior topic has no summary: a fork closes the prior topic in
  the transaction that stores its summary, so a prior without one is a closed topic
  behind its watermark like any other (there is no separate fork job to lose);
- evaluations: active topics with a heartbeat's worth of messages (DRIFTLESS_DRIFT_INTERVAL)
  beyond their watermark whose session then went quiet: the heartbeat's evaluation would
  have moved the watermark;
- memory caches: a cached memory block built from an older memory version than the
  scope's version in PostgreSQL (its invalidation job was lost);
- vectors (while embeddings are on): messages and topics the embeddings planner passed
  that still lack a vector of the current model (an org's own server failed, a job was
  lost or ran out of retries, a post committed late), sent again as a batch
  (shared/embeddings/sweep.py: strays).

A summary or an evaluation is sent again only when nothing holds its job: no org's
list, no broker countdown and no live worker (shared/infra/held.py, O(1) a job). A job
waiting behind a backlog is not lost however long it waits, so a backlog is never
multiplied by the runs that look at it. The held check comes after the database's
answer, and a job's mark goes only after its commit, so the few candidates not held
are read again: a job that finished between the two reads is not sent twice. Vectors
keep a claim in Redis instead (what was just re-enqueued is not re-enqueued for two
periods). Every kind is bounded per run, and every job is idempotent (watermarks).
"""

from __future__ import annotations

import datetime as dt
import logging
import uuid
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from functools import partial

import redis
from sqlalchemy import func, select

from shared.embeddings.sweep import BATCH as EMBED_BATCH_SIZE
from shared.embeddings.sweep import strays
from shared.infra.db.uow import UnitOfWork
from shared.infra.fair import Lane
from shared.infra.held import HeldJobs
from shared.infra.queue import EMBED_BATCH, EVALUATE_TOPIC, SUMMARIZE_TOPIC, Job
from shared.memory.cache import BLOCK_TTL_S, MemoryCache
from shared.memory.scope import Scope
from shared.memory.versions import changed_since
from shared.reconcile.claims import Claims
from shared.reevaluations.models import ReevaluationItem
from shared.sessions.models import ChatSession, Message
from shared.topics.models import Topic, history_topic_id

log = logging.getLogger(__name__)

RECONCILE_LIMIT = 500  # per kind and run; the rest waits for the next run
# Candidates a run reads per kind, oldest first, to find the lost among the held: a job
# lost behind a deeper backlog of its kind is found once the backlog drains below this.
CANDIDATES = 10_000
# A re-enqueued batch of vectors is not re-enqueued again for this many reconcile
# periods: a long queue is not flooded with copies, and one lost twice is back within three.
CLAIM_PERIODS = 2
# Sessions quiet for longer than this are the idle sweep's (it evaluates them too); the
# reconciler only needs the recent band, which keeps its scan short.
EVALUATION_LOOKBACK = dt.timedelta(hours=1)
# A stale block outlives the change that made it stale by at most its TTL (plus one
# reader's rebuild), so older changes cannot have a stale block left.
MEMORY_LOOKBACK = dt.timedelta(seconds=2 * BLOCK_TTL_S)


@dataclass(frozen=True)
class Reconciled:
    summaries: int = 0
    evaluations: int = 0
    memory_caches: int = 0
    message_vectors: int = 0
    topic_vectors: int = 0

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


def closed_topics_awaiting_summary(
    *, uow: UnitOfWork, closed_before: dt.datetime, limit: int = RECONCILE_LIMIT,
    among: Sequence[uuid.UUID] | None = None,
) -> Sequence[uuid.UUID]:  # fmt: skip
    """Closed topics whose summary has not caught up with their messages (of `among`
    only, when given).

    `closed_before` (now minus a grace) leaves the normal path time to finish, so the
    reconciler only re-enqueues work that really was lost.
    """
    query = (
        select(Topic.id)
        .where(
            # Spelled as ix_topics_awaiting_summary's predicate, so the planner uses it.
            Topic.status == "closed",
            Topic.summarized_through_id.is_distinct_from(Topic.last_message_id),
            Topic.last_message_id.is_not(None),
            Topic.closed_at < closed_before,
        )
        .order_by(Topic.closed_at)
        .limit(limit)
    )
    if among is not None:
        query = query.where(Topic.id.in_(among))
    return uow.session.scalars(query).all()


def heartbeats_never_evaluated(
    *, uow: UnitOfWork, quiet_since: dt.datetime, interval: int, limit: int = RECONCILE_LIMIT,
    among: Sequence[uuid.UUID] | None = None,
) -> Sequence[uuid.UUID]:  # fmt: skip
    """Active topics of sessions quiet since `quiet_since` with at least `interval`
    user/assistant messages beyond the watermark the last evaluation left (of `among`
    only, when given).

    That many messages crossed a heartbeat (every `interval`-th message), whose
    evaluation would have moved the watermark. The `interval`-th such message is found
    with an index range scan of at most `interval` rows per topic, never a count. A
    fork's new topic whose moved messages alone reach `interval` (the whole window
    moved) is evaluated once too: the idle sweep would do the same a little later.
    """
    beyond_watermark = (
        select(Message.id)
        .where(
            Message.topic_id == Topic.id,
            Message.id > func.coalesce(Topic.summarized_through_id, 0),
            Message.role != "tool",
        )
        .order_by(Message.id)
        .offset(interval - 1)
        .limit(1)
    )
    query = (
        select(Topic.id)
        .join(ChatSession, ChatSession.id == Topic.session_id)
        .where(
            ChatSession.last_activity_at < quiet_since,
            ChatSession.last_activity_at > quiet_since - EVALUATION_LOOKBACK,
            Topic.status == "active",
            Topic.message_count >= interval,
            Topic.summarized_through_id.is_distinct_from(Topic.last_message_id),
            beyond_watermark.exists(),
        )
        .order_by(ChatSession.last_activity_at)
        .limit(limit)
    )
    if among is not None:
        query = query.where(Topic.id.in_(among))
    return uow.session.scalars(query).all()


def stale_memory_scopes(
    *, uow: UnitOfWork, cache: MemoryCache, now: dt.datetime, limit: int = RECONCILE_LIMIT
) -> list[Scope]:
    """Scopes whose cached block was built before their latest memory change.

    No grace here: a block newer than the change is left alone, and invalidating a block
    whose job is merely still in flight costs one cache miss.
    """
    changed = changed_since(uow=uow, since=now - MEMORY_LOOKBACK, limit=limit)
    cached = cache.cached_versions([c.scope for c in changed])
    return [
        c.scope
        for c, version in zip(changed, cached, strict=True)
        if version is not None and version < c.version
    ]


@dataclass(frozen=True)
class Route:
    """Where a topic's recovered job goes: its org (shared/infra/fair.py) and lane."""

    org: str | None
    lane: Lane


LIVE = Route(org=None, lane="live")


def routes_of_topics(*, uow: UnitOfWork, topic_ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, Route]:
    """Each topic's org, and the lane its lost job came from; one query.

    Bulk work keeps the bulk lane (docs/architecture.md "Lanes"), known without a scan:
    a campaign's topic holds its claim (an enqueued reevaluation item, by the unique
    index on topic_id) until its job settles, and a chat history's topic has the id the
    import gives it (a uuid5 of its session). Everything else is live work.
    """
    if not topic_ids:
        return {}
    claimed = (
        select(ReevaluationItem.topic_id)
        .where(ReevaluationItem.topic_id == Topic.id, ReevaluationItem.status == "enqueued")
        .exists()
    )
    rows = uow.session.execute(
        select(Topic.id, Topic.session_id, ChatSession.org_id, claimed.label("claimed"))
        .join(ChatSession, ChatSession.id == Topic.session_id)
        .where(Topic.id.in_(topic_ids))
    ).all()
    return {
        row.id: Route(
            org=str(row.org_id),
            lane="bulk" if row.claimed or row.id == history_topic_id(row.session_id) else "live",
        )
        for row in rows
    }


def lost(
    find: Callable[..., Sequence[uuid.UUID]], *, held: HeldJobs, task: str, limit: int
) -> Sequence[uuid.UUID]:
    """What `find` shows undone that nothing holds, oldest first, at most `limit`.

    `find(limit=..., among=...)` is one of the queries above. Candidates are read first,
    then their marks; the few not held are read again, since a job that committed and
    dropped its mark between the two reads is done, not lost.
    """
    loose = held.unheld(task, find(limit=CANDIDATES))[:limit]
    return find(limit=limit, among=loose) if loose else []


def reconcile_lost_work(
    *,
    uow: UnitOfWork,
    cache: MemoryCache,
    claims: Claims,
    held: HeldJobs,
    now: dt.datetime,
    grace: dt.timedelta,
    drift_interval: int,
    limit: int = RECONCILE_LIMIT,
    redis_client: redis.Redis | None = None,
    embedding_model: str | None = None,
) -> Reconciled:
    """Enqueue again (after the caller's commit) what PostgreSQL shows was lost and
    nothing holds, and drop stale cached memory blocks right away (the check already
    holds the cache). The caller passes what its commit sent to `claims.record_sent`."""
    summaries = lost(
        partial(closed_topics_awaiting_summary, uow=uow, closed_before=now - grace),
        held=held, task=SUMMARIZE_TOPIC, limit=limit,
    )  # fmt: skip
    evaluations = lost(
        partial(
            heartbeats_never_evaluated, uow=uow, quiet_since=now - grace, interval=drift_interval
        ),
        held=held, task=EVALUATE_TOPIC, limit=limit,
    )  # fmt: skip
    routes = routes_of_topics(uow=uow, topic_ids=[*summaries, *evaluations])
    for task, topic_ids in ((SUMMARIZE_TOPIC, summaries), (EVALUATE_TOPIC, evaluations)):
        for topic_id in topic_ids:
            kwargs = {"topic_id": str(topic_id), "trigger": "reconcile"}
            route = routes.get(topic_id, LIVE)  # erased meanwhile: its job finds nothing
            uow.enqueue(Job(task, kwargs, lane=route.lane, org=route.org))
    try:
        stale = stale_memory_scopes(uow=uow, cache=cache, now=now, limit=limit)
        for scope in stale:
            cache.invalidate(scope)
    except redis.RedisError:  # the summaries and evaluations above must still go out
        log.warning("reconcile: memory cache unavailable, its check waits for the next run")
        stale = []
    messages, topics = _stray_vectors(
        uow=uow, redis_client=redis_client, claims=claims, model=embedding_model, grace=grace,
        limit=limit,
    )  # fmt: skip
    reconciled = Reconciled(len(summaries), len(evaluations), len(stale), messages, topics)
    if any(reconciled.as_dict().values()):
        log.warning("reconcile: recovered lost work %s", reconciled.as_dict())
    return reconciled


def _stray_vectors(
    *, uow: UnitOfWork, redis_client: redis.Redis | None, claims: Claims, model: str | None,
    grace: dt.timedelta, limit: int,
) -> tuple[int, int]:  # fmt: skip
    """Batch jobs for texts the embeddings planner passed, still without a vector (counts)."""
    if model is None or redis_client is None:
        return 0, 0
    try:
        found = strays(uow=uow, redis_client=redis_client, model=model, grace=grace, limit=limit)
    except redis.RedisError:  # the planner's cursors are in Redis; the next run looks again
        log.warning("reconcile: the embeddings planner's cursors unavailable")
        return 0, 0
    messages = claims.unclaimed("message_vector", found.message_ids)
    topics = claims.unclaimed("topic_vector", found.topic_ids)
    for start in range(0, max(len(messages), len(topics)), EMBED_BATCH_SIZE):
        uow.enqueue(Job(EMBED_BATCH, {
            "message_ids": list(messages[start : start + EMBED_BATCH_SIZE]),
            "topic_ids": [str(t) for t in topics[start : start + EMBED_BATCH_SIZE]],
        }))  # fmt: skip
    return len(messages), len(topics)


def reconcile(
    *,
    new_uow: Callable[[], UnitOfWork],
    redis_client: redis.Redis,
    now: dt.datetime,
    period_s: int,
    drift_interval: int,
    embedding_model: str | None = None,
) -> Reconciled:
    """The beat's run, every `period_s`: re-enqueue what was lost, then claim what went out.
    `embedding_model`: the current one while embeddings are on (None: off)."""
    claims = Claims(redis_client, ttl_s=period_s * CLAIM_PERIODS)
    with new_uow() as uow:
        reconciled = reconcile_lost_work(
            uow=uow,
            cache=MemoryCache(redis_client),
            claims=claims,
            held=HeldJobs(redis_client),
            now=now,
            grace=dt.timedelta(seconds=period_s),
            drift_interval=drift_interval,
            redis_client=redis_client,
            embedding_model=embedding_model,
        )
        uow.commit()  # nothing written: this sends the jobs
    claims.record_sent(uow.sent)  # a job the broker refused stays unclaimed
    return reconciled
