"""Making vectors after the fact, in batches, never in the post path.

Beat sends `driftless.embed_pending` every EMBED_TICK_S while embeddings are on. One sweep
runs at a time (a lease in Redis); it takes up to a batch of messages with no vector of
the current model, and of topics whose title and summary changed since their vector, from
two cursors kept in Redis per model (a message id; a topic's summarized_at and id), so a
sweep reads only what came since the last, not the whole table. Texts go to the
embeddings server in one call per org (an org with its own server gets its own call),
outside any transaction; the vectors are stored in one short transaction
(`INSERT ... ON CONFLICT`, so a repeat writes nothing).

A cursor passes only what is done and older than SETTLE_S: a transaction still in flight
may commit a message with a lower id than one already seen. When the fleet's server
fails, the cursor stays and the next sweep asks again (nothing lost, counted as failed).
When an org's own server fails, the cursor passes its texts so the others are not held
behind it; the reconciler finds them (`strays`) and sends them as a batch job.
`driftless embeddings backfill` sends batches of everything missing (`embed_batch`).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import logging
import uuid
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

import redis

from shared.embeddings.provider import Embedder, EmbeddingsError
from shared.embeddings.store import (
    TOPIC_START,
    Pending,
    TopicCursor,
    pending_messages,
    pending_topics,
    settled_message_id,
    settled_topic,
    store_message_vectors,
    store_topic_vectors,
    vectors_available,
)
from shared.infra.db.uow import UnitOfWork
from shared.infra.metrics import EMBEDDINGS

log = logging.getLogger(__name__)

EMBED_TICK_S = 2.0
BATCH = 128  # messages a sweep embeds; topics are summaries, fewer: a quarter of it
TOPIC_BATCH = BATCH // 4
# A cursor passes only what was posted (or summarized) this long ago.
SETTLE_S = 30.0
# One sweep at a time: longer than a sweep's slowest provider call (the task's hard limit).
LEASE_MS = 300_000
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


def _model_key(model: str) -> str:
    return hashlib.sha256(model.encode()).hexdigest()[:16]


class Cursors:
    """The sweep's cursors of one model, in Redis (lost: the sweep starts over, skipping
    what has vectors)."""

    def __init__(self, client: redis.Redis, model: str) -> None:
        self._client = client
        prefix = f"driftless:embeddings:{{{_model_key(model)}}}"
        self.messages_key, self.topics_key = f"{prefix}:messages", f"{prefix}:topics"
        self.lease_key = f"{prefix}:lease"

    def messages(self) -> int:
        raw = self._client.get(self.messages_key)
        return 0 if raw is None else int(raw)

    def topics(self) -> TopicCursor:
        raw = self._client.get(self.topics_key)
        if raw is None:
            return TOPIC_START
        at, topic_id = (raw.decode() if isinstance(raw, bytes) else raw).split("|")
        return dt.datetime.fromisoformat(at), uuid.UUID(topic_id)

    def set_messages(self, after_id: int) -> None:
        self._client.set(self.messages_key, after_id)

    def set_topics(self, cursor: TopicCursor) -> None:
        self._client.set(self.topics_key, f"{cursor[0].isoformat()}|{cursor[1]}")

    def lease(self) -> str | None:
        token = uuid.uuid4().hex
        return token if self._client.set(self.lease_key, token, nx=True, px=LEASE_MS) else None

    def release(self, token: str) -> None:
        try:
            self._client.eval(_RELEASE, 1, self.lease_key, token)
        except redis.RedisError:  # it lapses on its own
            log.warning("could not release the embedding sweep's lease")


@dataclass(frozen=True)
class Embedded:
    """What a sweep or a batch did: vectors stored and texts that failed, by kind."""

    messages: int = 0
    topics: int = 0
    failed_messages: int = 0
    failed_topics: int = 0
    state: str = "done"  # done, busy (another sweep holds the lease), off (no vector tables)

    def as_dict(self) -> dict[str, int | str]:
        return asdict(self)


@dataclass(frozen=True)
class _Outcome:
    vectors: list[tuple[Pending, list[float]]]
    failed: list[Pending]
    fleet_failed: bool


def _embed(embedder: Embedder, pending: Sequence[Pending], kind: str) -> _Outcome:
    """One call per org (the fleet's texts together); a failed call fails its texts only."""
    by_org: dict[uuid.UUID, list[Pending]] = defaultdict(list)
    for item in pending:
        by_org[item.org_id].append(item)
    vectors: list[tuple[Pending, list[float]]] = []
    failed: list[Pending] = []
    fleet_failed = False
    for org_id, items in by_org.items():
        try:
            answered = embedder.embed([item.text for item in items], org_id=org_id)
        except EmbeddingsError as exc:
            log.warning("embeddings of %d %s of org %s failed: %s", len(items), kind, org_id, exc)
            failed += items
            # An org's own server failing is the org's; anything else holds the cursor.
            fleet_failed = fleet_failed or not _own_server(embedder, org_id)
            continue
        vectors += zip(items, answered, strict=True)
    EMBEDDINGS.labels(kind, "stored").inc(len(vectors))
    EMBEDDINGS.labels(kind, "failed").inc(len(failed))
    return _Outcome(vectors, failed, fleet_failed)


def _own_server(embedder: Embedder, org_id: uuid.UUID) -> bool:
    source = getattr(embedder, "source", None)
    return callable(source) and source(org_id) != "fleet"


def sweep(
    *, new_uow: Callable[[], UnitOfWork], embedder: Embedder, redis_client: redis.Redis,
    batch: int = BATCH, topic_batch: int = TOPIC_BATCH, settle_s: float = SETTLE_S,
) -> Embedded:  # fmt: skip
    """Beat's run: embed what came since the cursors, then move them (see the module)."""
    model = embedder.model
    cursors = Cursors(redis_client, model)
    token = cursors.lease()
    if token is None:
        return Embedded(state="busy")
    try:
        after, topics_after = cursors.messages(), cursors.topics()
        with new_uow() as uow:
            if not vectors_available(uow):
                return Embedded(state="off")
            messages = pending_messages(uow=uow, model=model, after_id=after, limit=batch)
            topics = pending_topics(uow=uow, model=model, after=topics_after, limit=topic_batch)
            settled = settled_message_id(uow=uow, after_id=after, settle_s=settle_s)
            topics_settled = settled_topic(uow=uow, after=topics_after, settle_s=settle_s)
        done = _embed(embedder, messages, "message")
        topics_done = _embed(embedder, [pending for pending, _ in topics], "topic")
        _store(new_uow, model, done, topics_done)
        if not done.fleet_failed and settled is not None:
            # A full batch may have left missing messages after its last: stop there.
            last = messages[-1].id if len(messages) == batch else settled
            cursors.set_messages(max(after, min(settled, int(last))))
        if not topics_done.fleet_failed and topics_settled is not None:
            last_topic = topics[-1][1] if len(topics) == topic_batch else topics_settled
            cursors.set_topics(max(topics_after, min(topics_settled, last_topic)))
    finally:
        cursors.release(token)
    return Embedded(
        len(done.vectors), len(topics_done.vectors), len(done.failed), len(topics_done.failed)
    )


def _store(
    new_uow: Callable[[], UnitOfWork], model: str, messages: _Outcome, topics: _Outcome
) -> None:
    if not messages.vectors and not topics.vectors:
        return
    with new_uow() as uow:
        store_message_vectors(
            uow=uow, model=model, vectors=[(int(p.id), v) for p, v in messages.vectors]
        )
        store_topic_vectors(uow=uow, model=model, vectors=topics.vectors)
        uow.commit()


def embed_batch(
    *, new_uow: Callable[[], UnitOfWork], embedder: Embedder, message_ids: Sequence[int],
    topic_ids: Sequence[uuid.UUID],
) -> Embedded:  # fmt: skip
    """A backfill's or the reconciler's batch: those of these messages and topics still
    missing a current vector. Raises EmbeddingsError when the fleet's server failed (the
    task retries); an org's own server failing leaves its texts to the reconciler."""
    model = embedder.model
    with new_uow() as uow:
        if not vectors_available(uow):
            return Embedded(state="off")
        messages = pending_messages(uow=uow, model=model, ids=message_ids, limit=len(message_ids))
        topics = pending_topics(uow=uow, model=model, ids=topic_ids, limit=len(topic_ids))
    done = _embed(embedder, messages, "message")
    topics_done = _embed(embedder, [pending for pending, _ in topics], "topic")
    _store(new_uow, model, done, topics_done)
    if done.fleet_failed or topics_done.fleet_failed:
        raise EmbeddingsError("the embeddings server failed; the batch is retried")
    return Embedded(
        len(done.vectors), len(topics_done.vectors), len(done.failed), len(topics_done.failed)
    )


# How far behind its cursors the reconciler looks for texts a sweep passed but could not
# embed (an org's own server failing): older ones wait for a backfill.
STRAY_MESSAGE_IDS = 100_000
STRAY_TOPICS = dt.timedelta(hours=1)


@dataclass(frozen=True)
class Strays:
    message_ids: list[int]
    topic_ids: list[uuid.UUID]


def strays(
    *, uow: UnitOfWork, redis_client: redis.Redis, model: str, grace: dt.timedelta, limit: int
) -> Strays:
    """Messages and topics behind the sweep's cursors, older than `grace`, still without a
    current vector: the reconciler sends them as a batch."""
    if not vectors_available(uow):
        return Strays([], [])
    cursors = Cursors(redis_client, model)
    through = cursors.messages()
    messages = pending_messages(
        uow=uow, model=model, after_id=max(0, through - STRAY_MESSAGE_IDS), through_id=through,
        older_than_s=grace.total_seconds(), limit=limit,
    )  # fmt: skip
    topics_through = cursors.topics()
    topics = pending_topics(
        uow=uow, model=model, after=(topics_through[0] - STRAY_TOPICS, uuid.UUID(int=0)),
        through=topics_through, older_than_s=grace.total_seconds(), limit=limit,
    )  # fmt: skip
    return Strays([int(p.id) for p in messages], [uuid.UUID(str(p.id)) for p, _ in topics])
