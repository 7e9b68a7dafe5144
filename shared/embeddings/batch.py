"""A job's vectors: those of its messages and topics still missing one, in one call per org.

The planner (sweep.py) sends a job per org and id range of new texts (`embed_new`), a
backfill and the reconciler a batch of any orgs' (`embed_batch`): both run `embed_batch`
below. It re-reads which of its texts still miss a current vector, so a job run twice
embeds nothing the second time (and the store is `INSERT ... ON CONFLICT`). Texts go to
the embeddings server outside any transaction, the fleet's orgs first; each org's texts
are one call (one deadline: shared/infra/deadline.py), to its own server within its cap
(slots.py), and checked before anything is stored, so the one short transaction that
stores a job's vectors holds only good ones.

When the fleet's server fails the job raises EmbeddingsError and Celery retries it with
a backoff. When an org's own server fails, answers vectors that cannot be stored (another
size than the model's, longer than pgvector takes, not finite: provider.checked_vectors),
or the org is at its cap of calls in flight, its texts are left: the reconciler finds
them behind the planner's cursor (sweep.strays) and sends them again as a batch, at most
once per claim's life (shared/reconcile/claims.py), and the org's breaker rests a server
that keeps failing.
"""

from __future__ import annotations

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
    Pending,
    pending_messages,
    pending_topics,
    store_message_vectors,
    store_topic_vectors,
    stored_dimensions,
    vectors_available,
)
from shared.infra.db.uow import UnitOfWork
from shared.infra.metrics import EMBEDDINGS

log = logging.getLogger(__name__)

# What the fleet's server is asked when the model's vector size is not known yet and only
# orgs with their own server have texts (theirs never set it).
SIZE_PROBE = "driftless"


@dataclass(frozen=True)
class Embedded:
    """What a batch did: vectors stored and texts that failed, by kind."""

    messages: int = 0
    topics: int = 0
    failed_messages: int = 0
    failed_topics: int = 0
    state: str = "done"  # done, off (no vector tables)

    def as_dict(self) -> dict[str, int | str]:
        return asdict(self)


@dataclass(frozen=True)
class _Outcome:
    vectors: list[tuple[Pending, list[float]]]
    failed: list[Pending]
    fleet_failed: bool
    dimensions: int | None  # the model's vectors' length, as known after these calls


def embed_batch(
    *, new_uow: Callable[[], UnitOfWork], embedder: Embedder, message_ids: Sequence[int],
    topic_ids: Sequence[uuid.UUID], redis_client: redis.Redis | None = None,
    per_org: int = PER_ORG,
) -> Embedded:  # fmt: skip
    """Vectors of those of these messages and topics still missing a current one. Raises
    EmbeddingsError when the fleet's server failed (the task retries); an org's own server
    failing, or at its cap of calls (counted in `redis_client`), leaves its texts to the
    reconciler."""
    model = embedder.model
    with new_uow() as uow:
        if not vectors_available(uow):
            return Embedded(state="off")
        messages = pending_messages(uow=uow, model=model, ids=message_ids, limit=len(message_ids))
        topics = pending_topics(uow=uow, model=model, ids=topic_ids, limit=len(topic_ids))
        dimensions = embedder.dimensions or stored_dimensions(uow=uow, model=model)
    slots = OwnServerSlots(redis_client, per_org=per_org)
    done = _embed(embedder, messages, "message", dimensions=dimensions, slots=slots)
    topics_done = _embed(embedder, [pending for pending, _ in topics], "topic",
                         dimensions=done.dimensions, slots=slots)  # fmt: skip
    _store(new_uow, model, done, topics_done)
    if done.fleet_failed or topics_done.fleet_failed:
        raise EmbeddingsError("the embeddings server failed; the batch is retried")
    return Embedded(
        len(done.vectors), len(topics_done.vectors), len(done.failed), len(topics_done.failed)
    )


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
            # An org's own server failing is the org's; the fleet's is retried.
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
