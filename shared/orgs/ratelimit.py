"""Requests per org: a token bucket in Redis, taken from once per API request or MCP call.

Every org has a bucket of `burst` tokens that refills at `per_s` tokens a second; a
request takes one token or is refused (429) with the seconds until the next one. The
fleet's defaults (DRIFTLESS_ORG_REQUESTS_PER_S, DRIFTLESS_ORG_REQUEST_BURST) are
generous: a batch import at full speed stays within them; an operator gives one org
its own (`driftless orgs set`, carried with the key in shared/auth/cache.py).

- The bucket is shared/infra/bucket.py's: one script, one round trip, Redis `TIME`, and
  a key `driftless:requests:{<org>}` that expires once the bucket would be full again
  (an idle org costs nothing). A rate however small keeps the bucket closed.
- Spare tokens: a round trip per request was a sixth of a message post's CPU in the web
  (py-spy, [4.2]). So while an org's bucket is more than half full, the process that
  takes its token takes up to `SPARE_MAX` more (one per 64 tokens of burst: none for a
  burst under 64) and spends them on that org's next requests, for `SPARE_TTL_S` at most;
  a hot org costs a round trip every 16 requests. Every request still spends a token
  taken from the one bucket, so an org never gets past its limit; a spare that expires
  unspent is lost, but spares come only from the bucket's upper half, so the org's lower
  half and its rate are spent exactly as without them: one token a request, in Redis.
"""

from __future__ import annotations

import logging
import math
import threading
import time
import uuid
from dataclasses import dataclass

import redis
from cachetools import TTLCache

from shared.auth.service import Caller
from shared.domain.errors import TooBusy
from shared.infra.bucket import Buckets, Rate
from shared.infra.metrics import LIMIT_HITS

log = logging.getLogger(__name__)


# Spare tokens a process takes at most with one, and how long it keeps them.
SPARE_MAX = 15
SPARE_TTL_S = 0.25
# One spare per this many tokens of burst: the few processes serving an org hold a small
# part of its bucket's upper half between them.
BURST_PER_SPARE = 64
# Orgs whose spares one process keeps at once; beyond it the oldest are dropped (lost).
SPARE_ORGS = 10_000


def spare_tokens(burst: int) -> int:
    """How many spare tokens a request of an org with this burst may take with its own."""
    return min(SPARE_MAX, burst // BURST_PER_SPARE)


def bucket_key(org_id: uuid.UUID) -> str:
    # The org in braces: a Redis Cluster keeps each org's keys on one slot.
    return f"driftless:requests:{{{org_id}}}"


@dataclass(frozen=True)
class RequestLimit:
    """Requests a second (0: no limit) and how many may come at once after a pause."""

    per_s: float
    burst: int

    def of(self, caller: Caller) -> RequestLimit:
        """The caller's org's own limit where it has one, else this (the fleet's default)."""
        per_s = self.per_s if caller.requests_per_s is None else caller.requests_per_s
        burst = self.burst if caller.request_burst is None else caller.request_burst
        return RequestLimit(per_s=per_s, burst=burst)


class RequestRateLimited(TooBusy):
    """The org used up its request bucket; the same request may succeed `retry_after_s` later."""

    code = "rate_limited"


def retry_after_s(wait_ms: int) -> int:
    """Whole seconds for `Retry-After`: rounded up, at least 1."""
    return max(1, math.ceil(wait_ms / 1000))


class RequestLimiter:
    """Each org's request bucket, with the fleet's default limit."""

    def __init__(
        self, client: redis.Redis, *, default: RequestLimit, spare_ttl_s: float = SPARE_TTL_S
    ) -> None:
        self.default = default
        self._buckets = Buckets(client)
        self._redis_down = False  # logged once per outage, not per request
        # Each org's spare tokens in this process, dropped `spare_ttl_s` after they were
        # taken. The clock is looked up at each call so tests can move it.
        self._spares: TTLCache[uuid.UUID, int] = TTLCache(
            maxsize=SPARE_ORGS, ttl=spare_ttl_s, timer=lambda: time.monotonic()
        )
        self._lock = threading.Lock()  # TTLCache is not thread-safe

    def _spend_spare(self, org_id: uuid.UUID) -> bool:
        with self._lock:
            left = self._spares.get(org_id, 0)
            if left <= 0:
                return False
            if left == 1:
                del self._spares[org_id]
            else:
                self._spares[org_id] = left - 1  # keeps the expiry of when they were taken
            return True

    def admit(self, caller: Caller) -> None:
        """Take a token from the caller's org (a spare one this process holds, or one
        from Redis), or raise `RequestRateLimited`."""
        limit = self.default.of(caller)
        if limit.per_s <= 0 or self._spend_spare(caller.org_id):
            return
        try:
            taken = self._buckets.take_one(
                bucket_key(caller.org_id),
                Rate(limit.per_s, limit.burst),
                spare=spare_tokens(limit.burst),
                floor=limit.burst / 2,
            )
        except redis.RedisError as exc:
            # Fail open: the bucket protects shared capacity from one org, and refusing
            # every org's every request while Redis blips would do more harm than letting
            # an org past its rate for that while. Logged once until Redis answers again.
            if not self._redis_down:
                self._redis_down = True
                log.warning("request rate limit not enforced, Redis is unavailable: %s", exc)
            return
        if self._redis_down:
            self._redis_down = False
            log.warning("request rate limit enforced again, Redis answers")
        if taken.granted:
            if taken.spare:
                with self._lock:  # another request of the org may have taken some too
                    self._spares[caller.org_id] = self._spares.get(caller.org_id, 0) + taken.spare
            return
        LIMIT_HITS.labels("requests").inc()
        wait_s = retry_after_s(taken.wait_ms)
        log.info("org %s is past its request rate limit, retry in %ds", caller.org_id, wait_s)
        raise RequestRateLimited(
            f"this org's request rate limit ({limit.per_s:g} requests a second, bursts of"
            f" {limit.burst}) is used up; retry in {wait_s} s. An operator raises it with"
            " `driftless orgs set ORG --requests-per-s N --request-burst N`",
            retry_after_s=wait_s,
        )
