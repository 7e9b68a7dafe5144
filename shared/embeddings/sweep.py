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
When an org's own server fails, answers vectors that cannot be stored (another size than
the model's, longer than pgvector takes, not finite: provider.checked_vectors), or the org
is at its cap of calls in flight (slots.py), the cursor passes its texts so the others are
not held behind it; the reconciler finds them (`strays`) and sends them as a batch job,
at most once per claim's life (shared/reconcile/claims.py), and the org's breaker rests a
server that keeps failing. `driftless embeddings backfill` sends batches of everything
missing (`embed_batch`).

Each org's texts are one call (one deadline: shared/infra/deadline.py) and their vectors
checked before anything is stored, so the one statement that stores a sweep's vectors
holds only good ones. [4.2] may turn the per-org calls of `_embed` into per-org jobs.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import logging
import uuid
from collections import defaultdict
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import asdict, dataclass

import redis

from shared.embeddings.provider import Embedder, EmbeddingsError, InvalidVectors
from shared.embeddings.slots import PER_ORG, OwnServerSlots
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
    stored_dimensions,
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
# What the fleet's server is asked when the model's vector size is not known yet and only
# orgs with their own server have texts (theirs never set it).
SIZE_PROBE = "driftless"
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
    dimensions: int | None  # the model's vectors' length, as known after these calls


def _embed(
    embedder: Embedder, pending: Sequence[Pending], kind: str, *, dimensions: int | None,
    slots: OwnServerSlots,
) -> _Outcome:  # fmt: skip
    """One call per org, the fleet's orgs first: a failed call, or an answer of another
    size than the model's (`dimensions`), fails that org's texts only. While the model has
    no vector stored yet, the fleet's answer sets its size, never an org's own server."""
    by_org: dict[uuid.UUID, list[Pending]] = defaultdict(list)
    for item in pending:
        by_org[item.org_id].append(item)
    own = {org_id: _own_server(embedder, org_id) for org_id in by_org}
    vectors: list[tuple[Pending, list[float]]] = []
    failed: list[Pending] = []
    fleet_failed = False
    if dimensions is None and own and all(own.values()):
        dimensions = _fleet_dimensions(embedder)
    for org_id in sorted(by_org, key=lambda org: own[org]):  # the fleet's orgs first
        items = by_org[org_id]
        result = _embed_org(embedder, items, org_id, own=own[org_id], dimensions=dimensions,
                            slots=slots)  # fmt: skip
        if isinstance(result, str):
            log.warning("embeddings of %d %s of org %s %s", len(items), kind, org_id, result)
            EMBEDDINGS.labels(kind, result.split(":")[0]).inc(len(items))
            failed += items
            # An org's own server failing is the org's; anything else holds the cursor.
            fleet_failed = fleet_failed or not own[org_id]
            continue
        dimensions = dimensions or len(result[0])
        vectors += zip(items, result, strict=True)
    EMBEDDINGS.labels(kind, "stored").inc(len(vectors))
    return _Outcome(vectors, failed, fleet_failed, dimensions)


def _embed_org(
    embedder: Embedder, items: list[Pending], org_id: uuid.UUID, *, own: bool,
    dimensions: int | None, slots: OwnServerSlots,
) -> list[list[float]] | str:  # fmt: skip
    """The org's vectors, or why there are none (`result: detail`, result a metric's)."""
    if own and dimensions is None:
        return "deferred: the model's vector size is not known yet (the fleet's sets it)"
    with slots.slot(org_id) if own else nullcontext(True) as held:
        if not held:
            return "deferred: the org is at its cap of calls to its own server"
        try:
            return embedder.embed([item.text for item in items], org_id=org_id,
                                  dimensions=dimensions)  # fmt: skip
        except InvalidVectors as exc:
            return f"invalid: {exc}"
        except EmbeddingsError as exc:
            return f"failed: {exc}"


def _fleet_dimensions(embedder: Embedder) -> int | None:
    """The size of the fleet's vectors, asked with a text of no one's (None: it failed)."""
    try:
        (vector,) = embedder.embed([SIZE_PROBE], org_id=None)
    except EmbeddingsError as exc:
        log.warning("the fleet's embeddings server did not answer the vector size: %s", exc)
        return None
    return len(vector)


def _own_server(embedder: Embedder, org_id: uuid.UUID) -> bool:
    source = getattr(embedder, "source", None)
    return callable(source) and source(org_id) != "fleet"


def sweep(
    *, new_uow: Callable[[], UnitOfWork], embedder: Embedder, redis_client: redis.Redis,
    batch: int = BATCH, topic_batch: int = TOPIC_BATCH, settle_s: float = SETTLE_S,
    per_org: int = PER_ORG,
) -> Embedded:  # fmt: skip
    """Beat's run: embed what came since the cursors, then move them (see the module).
    `per_org`: calls in flight to an org's own server (DRIFTLESS_EMBEDDINGS_PER_ORG)."""
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
            dimensions = embedder.dimensions or stored_dimensions(uow=uow, model=model)
        slots = OwnServerSlots(redis_client, per_org=per_org)
        done, topics_done = _embed_both(embedder, messages, topics, dimensions, slots)
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


def _embed_both(
    embedder: Embedder, messages: Sequence[Pending], topics: Sequence[tuple[Pending, object]],
    dimensions: int | None, slots: OwnServerSlots,
) -> tuple[_Outcome, _Outcome]:  # fmt: skip
    """The messages' vectors, then the topics' (of the size the messages' settled)."""
    done = _embed(embedder, messages, "message", dimensions=dimensions, slots=slots)
    topics_done = _embed(embedder, [pending for pending, _ in topics], "topic",
                         dimensions=done.dimensions, slots=slots)  # fmt: skip
    return done, topics_done


def embed_batch(
    *, new_uow: Callable[[], UnitOfWork], embedder: Embedder, message_ids: Sequence[int],
    topic_ids: Sequence[uuid.UUID], redis_client: redis.Redis | None = None,
    per_org: int = PER_ORG,
) -> Embedded:  # fmt: skip
    """A backfill's or the reconciler's batch: those of these messages and topics still
    missing a current vector. Raises EmbeddingsError when the fleet's server failed (the
    task retries); an org's own server failing, or at its cap of calls (counted in
    `redis_client`), leaves its texts to the reconciler."""
    model = embedder.model
    with new_uow() as uow:
        if not vectors_available(uow):
            return Embedded(state="off")
        messages = pending_messages(uow=uow, model=model, ids=message_ids, limit=len(message_ids))
        topics = pending_topics(uow=uow, model=model, ids=topic_ids, limit=len(topic_ids))
        dimensions = embedder.dimensions or stored_dimensions(uow=uow, model=model)
    slots = OwnServerSlots(redis_client, per_org=per_org)
    done, topics_done = _embed_both(embedder, messages, topics, dimensions, slots)
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
