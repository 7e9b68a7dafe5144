"""Requests per org: a token bucket in Redis, taken from once per API request or MCP call.

Every org has a bucket of `burst` tokens that refills at `per_s` tokens a second; a
request takes one token or is refused (429) with the seconds until the next one. The
fleet's defaults (DRIFTLESS_ORG_REQUESTS_PER_S, DRIFTLESS_ORG_REQUEST_BURST) are
generous: a batch import at full speed stays within them; an operator gives one org
its own (`driftless orgs set`, carried with the key in shared/auth/cache.py).

- The bucket is shared/infra/bucket.py's: one script, one round trip, Redis `TIME`, and
  a key `driftless:requests:{<org>}` that expires once the bucket would be full again
  (an idle org costs nothing). A rate however small keeps the bucket closed.
"""

from __future__ import annotations

import logging
import math
import uuid
from dataclasses import dataclass

import redis

from shared.auth.service import Caller
from shared.domain.errors import TooBusy
from shared.infra.bucket import Buckets, Rate
from shared.infra.metrics import LIMIT_HITS

log = logging.getLogger(__name__)


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


class RateLimited(TooBusy):
    """The org used up its request bucket; the same request may succeed `retry_after_s` later."""

    code = "rate_limited"


def retry_after_s(wait_ms: int) -> int:
    """Whole seconds for `Retry-After`: rounded up, at least 1."""
    return max(1, math.ceil(wait_ms / 1000))


class RequestLimiter:
    """Each org's request bucket, with the fleet's default limit."""

    def __init__(self, client: redis.Redis, *, default: RequestLimit) -> None:
        self.default = default
        self._buckets = Buckets(client)
        self._redis_down = False  # logged once per outage, not per request

    def admit(self, caller: Caller) -> None:
        """Take a token from the caller's org, or raise `RateLimited`."""
        limit = self.default.of(caller)
        if limit.per_s <= 0:
            return
        try:
            taken = self._buckets.take(
                [bucket_key(caller.org_id)], [Rate(limit.per_s, limit.burst)], [1]
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
            return
        LIMIT_HITS.labels("requests").inc()
        wait_s = retry_after_s(taken.wait_ms)
        log.info("org %s is past its request rate limit, retry in %ds", caller.org_id, wait_s)
        raise RateLimited(
            f"this org's request rate limit ({limit.per_s:g} requests a second, bursts of"
            f" {limit.burst}) is used up; retry in {wait_s} s. An operator raises it with"
            " `driftless orgs set ORG --requests-per-s N --request-burst N`",
            retry_after_s=wait_s,
        )
