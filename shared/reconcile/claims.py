"""Redis claims on the vectors the reconciler re-enqueued, so a long queue is not flooded.

Summaries and evaluations need none: their jobs are marked where they wait or run
(shared/infra/held.py), and the reconciler sends only those nothing holds."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from typing import TypeVar

import redis

from shared.infra.queue import EMBED_BATCH, Job

log = logging.getLogger(__name__)

# A batch of vectors claims each of its messages and topics, by the kind named in the key.
VECTOR_CLAIM_KINDS = {"message_ids": "message_vector", "topic_ids": "topic_vector"}
Item = TypeVar("Item", uuid.UUID, int)


class Claims:
    """Redis claims on re-enqueued work: an item whose job was sent within `ttl_s` is not
    asked for again, even while that job sits in a long queue. A claim is recorded only
    once its job really went out (after the commit), so a failed send leaves the item
    free for the next run. Without Redis nothing counts as claimed (a duplicate job is
    harmless; a missing one is what we are here for)."""

    def __init__(self, client: redis.Redis, ttl_s: int) -> None:
        self._redis = client
        self._ttl_s = ttl_s

    @staticmethod
    def _key(kind: str, item: uuid.UUID | str | int) -> str:
        return f"driftless:reconcile:{kind}:{{{item}}}"

    def unclaimed(self, kind: str, ids: Sequence[Item]) -> list[Item]:
        if not ids:
            return []
        try:
            with self._redis.pipeline(transaction=False) as pipe:
                for item in ids:
                    pipe.exists(self._key(kind, item))
                claimed = pipe.execute()
        except redis.RedisError:
            log.warning("reconcile claims unavailable; re-enqueueing without them")
            return list(ids)
        return [item for item, taken in zip(ids, claimed, strict=True) if not taken]

    def record_sent(self, jobs: Sequence[Job]) -> None:
        """Claim the items of the reconcile jobs that went out."""
        try:
            with self._redis.pipeline(transaction=False) as pipe:
                for job in jobs:
                    if job.task == EMBED_BATCH:
                        for field, kind in VECTOR_CLAIM_KINDS.items():
                            for item in job.kwargs.get(field, []):
                                pipe.set(self._key(kind, item), 1, ex=self._ttl_s)
                pipe.execute()
        except redis.RedisError:
            log.warning("reconcile claims unavailable; the next run may enqueue again")


def forget_claims(client: redis.Redis, topic_ids: Sequence[uuid.UUID]) -> int:
    """Delete the claims on these topics' vectors (user erasure)."""
    keys = [Claims._key(VECTOR_CLAIM_KINDS["topic_ids"], item) for item in topic_ids]
    # One DEL a key: in a Redis Cluster a multi-key DEL must stay inside one slot.
    with client.pipeline(transaction=False) as pipe:
        for key in keys:
            pipe.delete(key)
        return sum(int(n) for n in pipe.execute())
