"""Each org's tokens this month, in Redis: reserved before a call, settled after it.

A check before each call and a charge after it let every call in flight pass the check
(a probe's 1,000-token budget gave 20-26k tokens). So a call of an org with monthly
tokens first *reserves* its estimate (the prompt plus the answer it may produce) in one
script, and *settles* after with the tokens the provider reported:

- An org at or past its tokens is exhausted (shared/orgs/budget.py says what follows).
- Below them, a call is admitted if its estimate fits beside the reservations in
  flight, or if none is in flight (a lone call may go past by its own size). One that
  does not fit waits for those in flight to settle: the org yields its turn.
- So the month's overshoot is at most one call. A check is one round trip, O(1).

The key `driftless:spend:{<org>}:<YYYY-MM>` is a hash {used, reserved}; when missing
(a new month, Redis lost) it is seeded once from the usage ledger (the month's rows
summed), by whichever process finds it missing first (`HSETNX`). It expires after the
month is over. A settle that finds it gone does nothing: the ledger has the call's row,
and the next seed counts it.
"""

from __future__ import annotations

import datetime as dt
import enum
import uuid
from collections.abc import Callable
from dataclasses import dataclass

import redis

# Long enough to outlive its month (31 days) by a few days, so the key never lapses
# in its month while in use.
KEY_TTL_S = 40 * 86_400
# A reservation lapses this long after it was made: a worker killed mid-call never
# settles it, and the org's tokens must not stay held for the rest of the month. Past
# the model task's hard time limit (300 s, worker/app.py), by which any call has ended.
RESERVATION_S = 360
# Lapsed reservations (members "<id>:<tokens>" of the month's set, scored by when they
# lapse, ms) give their tokens back, at most 100 a call (each lapses once, so a check
# stays O(1) amortized). KEYS: the month's hash, its reservations.
_LAPSE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local lapsed = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now, 'LIMIT', 0, 100)
if #lapsed > 0 then
  local back = 0
  for _, member in ipairs(lapsed) do
    back = back + tonumber(string.match(member, ':(%d+)$'))
    redis.call('ZREM', KEYS[2], member)
  end
  if redis.call('HINCRBY', KEYS[1], 'reserved', -back) < 0 then
    redis.call('HSET', KEYS[1], 'reserved', 0)
  end
end
"""

# KEYS: the org's month, its reservations. ARGV: monthly tokens, the call's estimate,
# the reservation's id, how long until it lapses (ms), the keys' time to live (s).
# Returns {state, used}: state 0 exhausted, 1 reserved, 2 wait, -1 not seeded.
_RESERVE = (
    """
if redis.call('EXISTS', KEYS[1]) == 0 then return {-1, 0} end
"""
    + _LAPSE
    + """
local used = tonumber(redis.call('HGET', KEYS[1], 'used') or '0')
local reserved = tonumber(redis.call('HGET', KEYS[1], 'reserved') or '0')
if used >= tonumber(ARGV[1]) then return {0, used} end
if reserved > 0 and used + reserved + tonumber(ARGV[2]) > tonumber(ARGV[1]) then
  return {2, used}
end
redis.call('HINCRBY', KEYS[1], 'reserved', ARGV[2])
redis.call('ZADD', KEYS[2], now + tonumber(ARGV[4]), ARGV[3] .. ':' .. ARGV[2])
redis.call('EXPIRE', KEYS[2], ARGV[5])
return {1, used}
"""
)

# KEYS: the org's month, its reservations. ARGV: the reservation's member, its tokens,
# the tokens the call used. A lapsed reservation gave its tokens back already.
_SETTLE = """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
if redis.call('ZREM', KEYS[2], ARGV[1]) == 1 then
  if redis.call('HINCRBY', KEYS[1], 'reserved', -tonumber(ARGV[2])) < 0 then
    redis.call('HSET', KEYS[1], 'reserved', 0)
  end
end
redis.call('HINCRBY', KEYS[1], 'used', ARGV[3])
return 1
"""

_SEED = """
redis.call('HSETNX', KEYS[1], 'used', ARGV[1])
redis.call('HSETNX', KEYS[1], 'reserved', 0)
redis.call('EXPIRE', KEYS[1], ARGV[2])
return tonumber(redis.call('HGET', KEYS[1], 'used'))
"""


class Admission(enum.Enum):
    RESERVED = 1
    EXHAUSTED = 0
    WAIT = 2


@dataclass(frozen=True)
class Reservation:
    """What a call found: admitted (its reservation to settle), exhausted, or to wait."""

    admission: Admission
    used: int  # the org's settled tokens this month when it asked
    tokens: int = 0
    member: str = ""  # the reservation in the month's set: "<id>:<tokens>"


def spend_key(org_id: uuid.UUID, month: dt.date) -> str:
    # The org in braces: a Redis Cluster keeps each org's keys on one slot.
    return f"driftless:spend:{{{org_id}}}:{month:%Y-%m}"


def _keys(org_id: uuid.UUID, month: dt.date) -> list[str]:
    key = spend_key(org_id, month)
    return [key, key + ":reservations"]


class MonthlySpend:
    """Each org's tokens used and reserved this month, fleet-wide; `seed` reads the
    ledger's sum of an org's month when Redis has none."""

    def __init__(
        self,
        client: redis.Redis,
        *,
        seed: Callable[[uuid.UUID, dt.date], int],
        reservation_s: float = RESERVATION_S,
    ) -> None:
        self._seed = seed
        self._reservation_ms = max(1, round(reservation_s * 1000))
        self._reserve = client.register_script(_RESERVE)
        self._settle = client.register_script(_SETTLE)
        self._store_seed = client.register_script(_SEED)

    def used(self, org_id: uuid.UUID, month: dt.date) -> int:
        """The org's settled tokens of `month` (seeded from the ledger if need be)."""
        found = self.reserve(org_id=org_id, month=month, monthly_tokens=0, tokens=0)
        return found.used

    def reserve(
        self, *, org_id: uuid.UUID, month: dt.date, monthly_tokens: int, tokens: int
    ) -> Reservation:
        """Reserve `tokens` of the org's `monthly_tokens` (one round trip; two on a seed)."""
        keys = _keys(org_id, month)
        reservation = uuid.uuid4().hex
        for _ in range(2):
            state, used = self._reserve(
                keys=keys,
                args=[monthly_tokens, tokens, reservation, self._reservation_ms, KEY_TTL_S],
            )
            if int(state) >= 0:
                admission = Admission(int(state))
                if admission is not Admission.RESERVED:
                    return Reservation(admission, int(used))
                return Reservation(admission, int(used), tokens, f"{reservation}:{tokens}")
            self._store_seed(keys=keys[:1], args=[self._seed(org_id, month), KEY_TTL_S])
        raise RuntimeError(f"the spend of org {org_id} could not be seeded")  # pragma: no cover

    def settle(
        self, *, org_id: uuid.UUID, month: dt.date, reservation: Reservation, used: int
    ) -> None:
        """Give back the reservation (unless it lapsed) and count what the call used."""
        self._settle(
            keys=_keys(org_id, month), args=[reservation.member, reservation.tokens, max(0, used)]
        )
