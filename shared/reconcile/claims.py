"""Redis claims on the work the reconciler re-enqueued, so a long queue is not flooded."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from typing import TypeVar

import redis

from shared.infra.queue import EMBED_BATCH, EVALUATE_TOPIC, SUMMARIZE_TOPIC, Job

log = logging.getLogger(__name__)

# The reconcile jobs whose items are claimed once sent, by the kind named in the key.
CLAIM_KINDS = {SUMMARIZE_TOPIC: "summary", EVALUATE_TOPIC: "evaluation"}
# A batch of vectors claims each of its messages and topics.
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
                    if job.task in CLAIM_KINDS:
                        key = self._key(CLAIM_KINDS[job.task], job.kwargs["topic_id"])
                        pipe.set(key, 1, ex=self._ttl_s)
                    if job.task == EMBED_BATCH:
                        for field, kind in VECTOR_CLAIM_KINDS.items():
                            for item in job.kwargs.get(field, []):
                                pipe.set(self._key(kind, item), 1, ex=self._ttl_s)
                pipe.execute()
        except redis.RedisError:
            log.warning("reconcile claims unavailable; the next run may enqueue again")


def forget_claims(client: redis.Redis, topic_ids: Sequence[uuid.UUID]) -> int:
    """Delete the claims on these topics (user erasure)."""
    keys = [Claims._key(kind, item) for kind in CLAIM_KINDS.values() for item in topic_ids]
    # One DEL a key: in a Redis Cluster a multi-key DEL must stay inside one slot.
    with client.pipeline(transaction=False) as pipe:
        for key in keys:
            pipe.delete(key)
        return sum(int(n) for n in pipe.execute())
