"""`driftless embeddings backfill`: batches of everything missing a current vector, sent to
the workers' `embeddings_bulk` queue (the sweep's `embeddings` queue is fetched in turn
with it, so new texts are not held up).

Resumable by construction: it sends only what is missing now, and a batch embeds only
those of its texts still missing when it runs (`sweep.embed_batch`), so sending twice
costs queue room, never a second vector.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

from shared.embeddings.store import (
    missing_message_ids,
    missing_messages,
    missing_topics,
    stale_topic_ids,
)
from shared.embeddings.sweep import BATCH
from shared.infra.db.uow import UnitOfWork
from shared.infra.queue import EMBED_BATCH, Job


def missing(*, uow: UnitOfWork, model: str) -> int:
    """Messages and topics without a current vector of `model`."""
    return missing_messages(uow=uow, model=model) + missing_topics(uow=uow, model=model)


def send_batches(*, new_uow: Callable[[], UnitOfWork], model: str, batch: int = BATCH) -> int:
    """A batch job per `batch` missing messages, then per `batch` topics, each page in a
    transaction of its own (its job sent at its commit). Returns the batches sent."""
    sent, after = 0, 0
    while True:
        with new_uow() as uow:
            ids = missing_message_ids(uow=uow, model=model, after_id=after, limit=batch)
            if not ids:
                break
            uow.enqueue(Job(EMBED_BATCH, {"message_ids": ids}))
            uow.commit()
        sent, after = sent + 1, ids[-1]
    topic_after = uuid.UUID(int=0)
    while True:
        with new_uow() as uow:
            topic_ids = stale_topic_ids(uow=uow, model=model, after_id=topic_after, limit=batch)
            if not topic_ids:
                break
            uow.enqueue(Job(EMBED_BATCH, {"topic_ids": [str(t) for t in topic_ids]}))
            uow.commit()
        sent, topic_after = sent + 1, topic_ids[-1]
    return sent
