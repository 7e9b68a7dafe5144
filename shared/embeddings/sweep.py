"""Beat's tick: a planner that cuts the new texts into per-org jobs any worker runs.

Beat sends `driftless.embed_pending` every EMBED_TICK_S while embeddings are on. One plan
runs at a time (a lease in Redis), and it only reads ids, never texts or the embeddings
server: from two cursors kept in Redis per model (a message id; a topic's summarized_at
and id) it reads up to PLAN_MESSAGES messages with no vector of the current model and
PLAN_TOPICS topics whose title and summary changed since their vector, groups them by org
and sends one `driftless.embed_new` job per org and run of at most BATCH of its ids (one
request to the embeddings server), on the `embeddings` queue, after its read-only
transaction; then it moves the cursors. Any worker runs the jobs, many at once
(batch.py: each org's own server is called in that org's jobs only, within its cap, and
a job run twice embeds nothing new). A tick's cost is an index range scan of what came
since the last, whatever the number of orgs or workers; the throughput is the workers'.

The cursors pass only what was posted (or summarized) more than SETTLE_S ago, so that a
post's transaction still in flight (milliseconds; a statement is cut at 5 s) commits a
message with a lower id before the cursor passes it. A text that commits later still, or
whose job ends without its vector (an org's own server failing, at its cap, answering
vectors that cannot be stored; the fleet's server failing past the job's retries; a job
the broker refused) is behind the cursor: the reconciler finds it (`strays`) and sends
it as a batch job. `driftless embeddings backfill` sends batches of everything missing.

The lag (the age of the oldest message without a vector) is measured by the plan too, at
the cost of what was embedded since the last tick: a low-water mark in Redis, under which
every message has its vector, moves up to the first one missing (`lag_mark`). The worker
exports it as `driftless_embeddings_lag_seconds` (worker/metrics.py).
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

from shared.embeddings.store import (
    TOPIC_START,
    Pending,
    TopicCursor,
    oldest_missing_message,
    pending_messages,
    pending_topics,
    settled_message_id,
    settled_topic,
    vectors_available,
)
from shared.infra.db.uow import UnitOfWork
from shared.infra.queue import EMBED_NEW, Job

log = logging.getLogger(__name__)

EMBED_TICK_S = 2.0
# Texts of one org in one job: one request to the embeddings server (provider.MAX_BATCH),
# a few tenths of a second of a worker's slot; OpenAI takes up to 2,048 inputs.
BATCH = 256
# What one tick plans at most: 25k messages a second of ingest (the web's most, [3.4])
# between two 2 s ticks; a longer backlog is the next ticks' (the cursor stops at the
# last id planned). Reading 50,000 ids and orgs is an index range scan of milliseconds.
PLAN_MESSAGES = 50_000
PLAN_TOPICS = 5_000
# A cursor passes only what was posted (or summarized) this long ago: a tick's wait.
SETTLE_S = 2.0
# One plan at a time; a plan reads ids for milliseconds, and one whose process died
# holds the next ticks back this long at most.
LEASE_MS = 60_000
# How far behind its cursors the reconciler looks for texts a job left without a vector
# (an org's own server failing): older ones wait for a backfill.
STRAY_MESSAGE_IDS = 100_000
STRAY_TOPICS = dt.timedelta(hours=1)
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


def _model_key(model: str) -> str:
    return hashlib.sha256(model.encode()).hexdigest()[:16]


class Cursors:
    """The planner's cursors of one model, in Redis (lost: it starts over, skipping what
    has vectors), its lease and its lag mark."""

    def __init__(self, client: redis.Redis, model: str) -> None:
        self._client = client
        prefix = f"driftless:embeddings:{{{_model_key(model)}}}"
        self.messages_key, self.topics_key = f"{prefix}:messages", f"{prefix}:topics"
        self.lease_key = f"{prefix}:lease"
        # Every message up to this id has its vector; the oldest without one, when found.
        self.low_key, self.oldest_key = f"{prefix}:low", f"{prefix}:oldest"

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

    def low_water(self) -> int:
        raw = self._client.get(self.low_key)
        return 0 if raw is None else int(raw)

    def oldest(self) -> float | None:
        """When the oldest message without a vector was posted (epoch seconds; None: none)."""
        raw = self._client.get(self.oldest_key)
        return None if raw is None else float(raw)

    def set_lag(self, low_water: int, oldest: dt.datetime | None) -> None:
        with self._client.pipeline() as pipe:
            pipe.set(self.low_key, low_water)
            if oldest is None:
                pipe.delete(self.oldest_key)
            else:
                pipe.set(self.oldest_key, oldest.timestamp())
            pipe.execute()

    def lease(self) -> str | None:
        token = uuid.uuid4().hex
        return token if self._client.set(self.lease_key, token, nx=True, px=LEASE_MS) else None

    def release(self, token: str) -> None:
        try:
            self._client.eval(_RELEASE, 1, self.lease_key, token)
        except redis.RedisError:  # it lapses on its own
            log.warning("could not release the embeddings planner's lease")


@dataclass(frozen=True)
class Planned:
    """What a tick planned: texts and the jobs they were sent in."""

    messages: int = 0
    topics: int = 0
    jobs: int = 0
    state: str = "done"  # done, busy (another tick holds the lease), off (no vector tables)

    def as_dict(self) -> dict[str, int | str]:
        return asdict(self)


def sweep(
    *, new_uow: Callable[[], UnitOfWork], model: str, redis_client: redis.Redis,
    settle_s: float = SETTLE_S, batch: int = BATCH, plan_messages: int = PLAN_MESSAGES,
    plan_topics: int = PLAN_TOPICS,
) -> Planned:  # fmt: skip
    """Beat's tick: a job per org and `batch` of the texts since the cursors, sent after
    the read; then the cursors move and the lag mark with them (see the module)."""
    cursors = Cursors(redis_client, model)
    token = cursors.lease()
    if token is None:
        return Planned(state="busy")
    try:
        after, topics_after = cursors.messages(), cursors.topics()
        with new_uow() as uow:
            if not vectors_available(uow):
                return Planned(state="off")
            settled = settled_message_id(uow=uow, after_id=after, settle_s=settle_s)
            topics_settled = settled_topic(uow=uow, after=topics_after, settle_s=settle_s)
            messages = [] if settled is None else pending_messages(
                uow=uow, model=model, after_id=after, through_id=settled, limit=plan_messages,
                texts=False,
            )  # fmt: skip
            topics = [] if topics_settled is None else pending_topics(
                uow=uow, model=model, after=topics_after, through=topics_settled,
                limit=plan_topics, texts=False,
            )  # fmt: skip
            # A full plan may have left missing texts after its last: the cursor stops there.
            through = after if settled is None else (
                int(messages[-1].id) if len(messages) == plan_messages else settled
            )  # fmt: skip
            low, oldest = lag_mark(uow=uow, cursors=cursors, model=model, through=through)
            jobs = org_jobs(messages, [pending for pending, _ in topics], batch=batch)
            for job in jobs:
                uow.enqueue(job)
            uow.commit()  # nothing written: the jobs go now, the transaction closed
        cursors.set_messages(max(after, through))
        if topics_settled is not None:
            last_topic = topics[-1][1] if len(topics) == plan_topics else topics_settled
            cursors.set_topics(max(topics_after, last_topic))
        cursors.set_lag(low, oldest)
    finally:
        cursors.release(token)
    return Planned(len(messages), len(topics), len(jobs))


def org_jobs(messages: Sequence[Pending], topics: Sequence[Pending], *, batch: int) -> list[Job]:
    """An `embed_new` job per org and run of at most `batch` of its message (or topic) ids,
    in id order: each job is one call to one org's server."""
    by_org: dict[uuid.UUID, tuple[list[int], list[str]]] = defaultdict(lambda: ([], []))
    for message in messages:
        by_org[message.org_id][0].append(int(message.id))
    for topic in topics:
        by_org[topic.org_id][1].append(str(topic.id))
    jobs: list[Job] = []
    for message_ids, topic_ids in by_org.values():
        jobs += [
            Job(EMBED_NEW, {"message_ids": message_ids[start : start + batch]})
            for start in range(0, len(message_ids), batch)
        ]
        jobs += [
            Job(EMBED_NEW, {"topic_ids": topic_ids[start : start + batch]})
            for start in range(0, len(topic_ids), batch)
        ]
    return jobs


def lag_mark(
    *, uow: UnitOfWork, cursors: Cursors, model: str, through: int
) -> tuple[int, dt.datetime | None]:
    """The new low-water mark (every message up to it has its vector) and when the first
    message after it without one was posted (None: none). Messages further behind the
    cursor than the reconciler looks (STRAY_MESSAGE_IDS) wait for a backfill, and so are
    not the workers' lag."""
    low = max(cursors.low_water(), through - STRAY_MESSAGE_IDS)
    found = oldest_missing_message(uow=uow, model=model, after_id=low)
    if found is None:
        return max(low, through), None
    return found[0] - 1, found[1]


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
