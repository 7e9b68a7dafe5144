"""Per-org counting semaphores across the fleet, as leases in Redis.

Each kind of thing counted (event streams, searches) has a sorted set per org,
`driftless:<kind>:{<org>}`, holding the ids of the org's leases scored by when they
lapse (ms, Redis `TIME`: one clock for every host). Taking a lease is one Lua script,
one round trip: it drops lapsed leases, counts, and adds the new one only below the
limit. Giving it back is one `ZREM`. A process that dies leaves leases that lapse within
`lease_s`, so a count cannot leak; the key expires with its last lease.
"""

from __future__ import annotations

import logging
import uuid

import redis

from shared.domain.errors import TooBusy
from shared.infra.metrics import LIMIT_HITS

log = logging.getLogger(__name__)

_NOW_MS = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
"""

# KEYS: the org's set. ARGV: limit, lease ms, lease id. Returns 1 if taken.
_ACQUIRE = (
    _NOW_MS
    + """
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[1]) then
  return 0
end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
"""
)

# KEYS: the org's set. ARGV: lease ms, lease id. Returns 0 if the lease had lapsed (its
# slot may have gone to someone else since), else renews it and returns 1.
_RENEW = (
    _NOW_MS
    + """
local expires = redis.call('ZSCORE', KEYS[1], ARGV[2])
if not expires or tonumber(expires) <= now then
  redis.call('ZREM', KEYS[1], ARGV[2])
  return 0
end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[1]), ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[1])
return 1
"""
)


def leases_key(kind: str, org_id: uuid.UUID) -> str:
    # The org in braces: a Redis Cluster keeps each org's set on one slot.
    return f"driftless:{kind}:{{{org_id}}}"


class OrgLeases:
    """The fleet-wide count of one kind of thing each org holds, as leases in Redis."""

    def __init__(self, client: redis.Redis, *, kind: str, lease_s: float) -> None:
        self.kind = kind
        self._client = client
        self._lease_ms = int(lease_s * 1000)
        self._acquire = client.register_script(_ACQUIRE)
        self._renew = client.register_script(_RENEW)

    def key(self, org_id: uuid.UUID) -> str:
        return leases_key(self.kind, org_id)

    def acquire(self, *, org_id: uuid.UUID, limit: int) -> str | None:
        """A new lease of the org (its id), or None if the org holds `limit` already."""
        lease_id = uuid.uuid4().hex
        taken = self._acquire(keys=[self.key(org_id)], args=[limit, self._lease_ms, lease_id])
        return lease_id if taken == 1 else None

    def admit(self, *, org_id: uuid.UUID, limit: int, what: str, retry_after_s: int) -> str | None:
        """A lease of the org for work a client asked for, or TooBusy (429, counted in
        `driftless_limit_hits_total{kind}`) when it holds `limit` already. None when
        Redis cannot count: the work goes on uncounted, since refusing every org's work
        while Redis blips would do more harm than one org past its count for that while."""
        try:
            lease_id = self.acquire(org_id=org_id, limit=limit)
        except redis.RedisError:
            log.warning("%s slots unavailable (Redis); going on uncounted", self.kind,
                        exc_info=True)  # fmt: skip
            return None
        if lease_id is None:
            LIMIT_HITS.labels(kind=self.kind).inc()
            log.info("%s refused: org %s already runs %d at once", self.kind, org_id, limit)
            raise TooBusy(
                f"this organization already runs {limit} {what} at once; retry in"
                f" {retry_after_s} s",
                retry_after_s=retry_after_s,
            )
        return lease_id

    def renew(self, *, org_id: uuid.UUID, lease_id: str) -> bool:
        """Extend the lease; False if it had lapsed."""
        renewed = self._renew(keys=[self.key(org_id)], args=[self._lease_ms, lease_id])
        return bool(renewed == 1)

    def release(self, *, org_id: uuid.UUID, lease_id: str) -> None:
        """Best effort: a lease Redis cannot drop now lapses on its own."""
        try:
            self._client.zrem(self.key(org_id), lease_id)
        except redis.RedisError:
            log.warning("could not release %s lease %s of org %s", self.kind, lease_id, org_id)
