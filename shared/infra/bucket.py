"""Token buckets in Redis: the one script behind every rate in the fleet.

The fleet's model quota (shared/llm/ratelimit.py: requests and tokens a minute), an
org's model calls a minute (shared/orgs/budgeted_llm.py) and an org's API requests a
second (shared/orgs/ratelimit.py) are all buckets of this module.

- A bucket is a hash {level, s, us}: its level when last written, and Redis `TIME` then
  (seconds and microseconds kept apart: Lua's tostring keeps only 14 digits). One clock
  for every process and host.
- One Lua script takes from one or more buckets at once (all or none), one round trip:
  refill each by the time elapsed, then take the costs if every bucket holds them, or
  say how long until they would. A cost larger than a whole bucket still goes once the
  bucket is full, leaving a debt.
- A request limiter takes one token at a time, and may take a few spare ones with it
  (`take_one`) while the bucket stays well filled: its next requests spend them without
  a round trip (shared/orgs/ratelimit.py says when that is exact enough).
- A key expires once its bucket would be full again, which is what a missing key means:
  an idle bucket costs nothing. Waits and expiries are capped at `MAX_MS`, so a tiny
  rate (1e-20 a second) neither overflows Redis's integers nor lets its key expire early:
  such a bucket stays closed (it would refill to full in `MAX_MS` at the earliest).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import redis

# The longest wait or expiry a script computes: 30 days, far below 2^53 ms (exact in a
# Lua number) and below Redis's expiry limit.
MAX_MS = 30 * 86_400 * 1000

_ELAPSED = """
local MAX_MS = tonumber(ARGV[1])
local function elapsed_us(t, state)
  local us = (tonumber(t[1]) - tonumber(state[2])) * 1000000 + tonumber(t[2]) - tonumber(state[3])
  return math.max(0, us)
end
local function refilled(key, t, rate, capacity)
  local state = redis.call('HMGET', key, 'level', 's', 'us')
  if state[1] and state[2] and state[3] then
    return math.min(capacity, tonumber(state[1]) + elapsed_us(t, state) * rate)
  end
  return capacity
end
local function store(key, t, level, rate, capacity)
  redis.call('HSET', key, 'level', tostring(level), 's', t[1], 'us', t[2])
  local refill_ms = math.min(MAX_MS, (capacity - level) / rate / 1000)
  redis.call('PEXPIRE', key, math.ceil(refill_ms) + 1000)
end
"""

# KEYS: the buckets. ARGV: MAX_MS, apply (1: take if all hold their cost; 0: only
# report), then per bucket: rate a second (0: no limit), capacity, cost.
# Returns {granted, wait_ms, levels...}; levels as strings (Lua numbers would be
# truncated to integers on the way out).
_TAKE = (
    _ELAPSED
    + """
local t = redis.call('TIME')
local levels, rates, capacities, costs = {}, {}, {}, {}
local wait = 0
for i = 1, #KEYS do
  rates[i] = tonumber(ARGV[3 * i]) / 1000000
  capacities[i] = tonumber(ARGV[3 * i + 1])
  costs[i] = tonumber(ARGV[3 * i + 2])
  levels[i] = capacities[i]
  if rates[i] > 0 then
    levels[i] = refilled(KEYS[i], t, rates[i], capacities[i])
    local needed = math.min(costs[i], capacities[i])
    if levels[i] < needed then
      wait = math.max(wait, (needed - levels[i]) / rates[i] / 1000)
    end
  end
end
local granted = wait == 0 and ARGV[2] == '1'
if granted then
  for i = 1, #KEYS do
    if rates[i] > 0 then
      levels[i] = levels[i] - costs[i]
      store(KEYS[i], t, levels[i], rates[i], capacities[i])
    end
  end
end
local out = {granted and 1 or 0, math.ceil(math.min(MAX_MS, wait))}
for i = 1, #KEYS do out[#out + 1] = tostring(levels[i]) end
return out
"""
)

# KEYS: a bucket. ARGV: MAX_MS, rate a second, capacity, delta (> 0 debit, < 0 refund).
# Refills first, so the refund or debt counts from now; never above capacity.
_ADJUST = (
    _ELAPSED
    + """
local rate = tonumber(ARGV[2]) / 1000000
local capacity = tonumber(ARGV[3])
local t = redis.call('TIME')
local level = math.min(capacity, refilled(KEYS[1], t, rate, capacity) - tonumber(ARGV[4]))
store(KEYS[1], t, level, rate, capacity)
return tostring(level)
"""
)

# KEYS: a bucket. ARGV: MAX_MS, rate a second (> 0), capacity, spare, floor.
# Takes one token and, when the bucket still holds `floor` after them, `spare` more.
# Returns {granted, wait_ms, level, spare taken}; the level as a string (as _TAKE's).
_TAKE_ONE = (
    _ELAPSED
    + """
local rate = tonumber(ARGV[2]) / 1000000
local capacity = tonumber(ARGV[3])
local spare = tonumber(ARGV[4])
local t = redis.call('TIME')
local level = refilled(KEYS[1], t, rate, capacity)
if level < 1 then
  return {0, math.ceil(math.min(MAX_MS, (1 - level) / rate / 1000)), tostring(level), 0}
end
level = level - 1
if level - spare < tonumber(ARGV[5]) then spare = 0 end
level = level - spare
store(KEYS[1], t, level, rate, capacity)
return {1, 0, tostring(level), spare}
"""
)


@dataclass(frozen=True)
class Rate:
    """A bucket's refill a second (0: no limit) and how much it holds."""

    per_s: float
    capacity: float


@dataclass(frozen=True)
class Taken:
    """Whether the costs were taken, else how long until they would be, and the levels."""

    granted: bool
    wait_ms: int
    levels: tuple[float, ...]
    spare: int = 0  # tokens taken beyond the cost, for the caller to spend later (take_one)


class Buckets:
    """The token buckets of one Redis."""

    def __init__(self, client: redis.Redis) -> None:
        self._take = client.register_script(_TAKE)
        self._adjust = client.register_script(_ADJUST)
        self._take_one = client.register_script(_TAKE_ONE)

    def take(
        self,
        keys: Sequence[str],
        rates: Sequence[Rate],
        costs: Sequence[float],
        *,
        apply: bool = True,
    ) -> Taken:
        """Take each cost from its bucket if all hold them (one round trip); with
        `apply=False` only report."""
        args: list[float] = [MAX_MS, 1 if apply else 0]
        for rate, cost in zip(rates, costs, strict=True):
            args += [max(rate.per_s, 0.0), rate.capacity, cost]
        granted, wait_ms, *levels = self._take(keys=list(keys), args=args)
        return Taken(bool(granted), int(wait_ms), tuple(float(level) for level in levels))

    def take_one(self, key: str, rate: Rate, *, spare: int = 0, floor: float = 0) -> Taken:
        """Take one token from a bucket with a limit (one round trip) and, if it still
        holds `floor` after them, `spare` more (`Taken.spare`: how many were)."""
        args = [MAX_MS, rate.per_s, rate.capacity, spare, floor]
        granted, wait_ms, level, spared = self._take_one(keys=[key], args=args)
        return Taken(bool(granted), int(wait_ms), (float(level),), int(spared))

    def adjust(self, key: str, rate: Rate, delta: float) -> float:
        """Debit (delta > 0) or refund (delta < 0) a bucket with a limit; its new level."""
        return float(self._adjust(keys=[key], args=[MAX_MS, rate.per_s, rate.capacity, delta]))
