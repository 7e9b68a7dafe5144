"""Webhook slots: how many attempts may be in flight at once, per subscription and per org,
across the fleet (Redis). See delivery.py for how a job uses them."""

from __future__ import annotations

import datetime as dt
import enum
import math
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import redis

SLOTS_PER_WEBHOOK = 4
# A job that found its org's slots taken comes back after this (plus up to a second of
# jitter); meanwhile the other jobs of its subscription leave their deliveries to it.
ORG_WAIT_S = 2.0


class Slot(enum.Enum):
    """What a job found when it asked for a slot."""

    HELD = "held"  # the subscription's and the org's: attempt
    SUBSCRIPTION_FULL = "subscription_full"  # its holders will reach the delivery
    ORG_WAIT = "org_wait"  # the org's are taken: this job waits for one, put back
    ORG_FULL = "org_full"  # the org's are taken and another job of the subscription waits


class WebhookSlots:
    """At most SLOTS_PER_WEBHOOK attempts in flight per subscription and `per_org` per
    org, fleet-wide (Redis).

    A slot is a member of two sorted sets (the subscription's, the org's) scored by its
    expiry, taken by one script (both checks and both takes, that no other worker can
    come between, in one round trip), so a worker killed while holding one frees it when
    the lease would have ended. A job refused by the org's limit sets its subscription's
    waiting mark (shorter-lived than the wait), unless another job already did.
    """

    _TAKE = """
        redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[1])
        if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[4]) then return 'subscription_full' end
        redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', ARGV[1])
        if redis.call('ZCARD', KEYS[2]) >= tonumber(ARGV[5]) then
            if redis.call('SET', KEYS[3], '1', 'NX', 'PX', ARGV[7]) then return 'org_wait' end
            return 'org_full'
        end
        redis.call('ZADD', KEYS[1], ARGV[2], ARGV[3])
        redis.call('ZADD', KEYS[2], ARGV[2], ARGV[3])
        redis.call('EXPIRE', KEYS[1], ARGV[6])
        redis.call('EXPIRE', KEYS[2], ARGV[6])
        return 'held'
    """

    def __init__(self, client: redis.Redis, *, hold: dt.timedelta, per_org: int) -> None:
        self._redis = client
        self._hold_s = hold.total_seconds()
        self._per_org = per_org
        self._take = client.register_script(self._TAKE)

    @contextmanager
    def slot(self, webhook_id: uuid.UUID, org_id: uuid.UUID) -> Iterator[Slot]:
        keys = [
            f"driftless:webhook-slots:{webhook_id}",
            f"driftless:webhook-org-slots:{org_id}",
            f"driftless:webhook-waiting:{webhook_id}",
        ]
        token = uuid.uuid4().hex
        now = time.time()
        args: list[str | float] = [
            now,
            now + self._hold_s,
            token,
            SLOTS_PER_WEBHOOK,
            self._per_org,
            math.ceil(self._hold_s) + 1,
            int(ORG_WAIT_S * 1000 * 3 / 4),
        ]
        found = self._take(keys=keys, args=args)
        taken = Slot(found.decode() if isinstance(found, bytes) else found)
        try:
            yield taken
        finally:
            if taken is Slot.HELD:
                with self._redis.pipeline(transaction=False) as pipe:
                    pipe.zrem(keys[0], token)
                    pipe.zrem(keys[1], token)
                    pipe.execute()
