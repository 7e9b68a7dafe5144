"""One trailing-edge debounce per topic, in Redis, atomic (R27, R28).

State per topic: a hash {token, first, last} and a guard key. A trigger (one Lua script)
either starts a burst (a new token: the caller schedules one fire job for it), joins
the running one (moves `last`), or is suppressed by the guard. The fire job (another
script) runs the evaluation only when `last + debounce` has passed — or `first +
max_wait`, so an endless stream of triggers cannot starve evaluation — and otherwise
asks to be re-scheduled for the time that remains. Firing deletes the state in the
same script, so of two workers holding the same job exactly one fires.

Time comes from Redis `TIME`, so web and worker clocks cannot skew the deadline. Every
key expires on its own, so a crash leaves nothing stuck. A topic's keys share a hash
tag (one slot, were the state ever on a Redis Cluster, which driftless does not
support: docs/deploy.md, "High availability").

The guard (R28) holds the id of the last message the evaluation saw. A trigger is
suppressed while the topic's last message is still that one; any new message moves
the id and re-arms the trigger, and a new active topic has keys of its own.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Literal

import redis

from shared.infra.config import Settings

TriggerStatus = Literal["scheduled", "coalesced", "suppressed"]

_TRIGGER = """
local guard = redis.call('GET', KEYS[2])
if guard and guard == ARGV[5] then
  return {'suppressed', '', 0}
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[4])
local token = redis.call('HGET', KEYS[1], 'token')
if token then
  redis.call('HSET', KEYS[1], 'last', now)
  redis.call('PEXPIRE', KEYS[1], ttl)
  return {'coalesced', token, 0}
end
redis.call('HSET', KEYS[1], 'token', ARGV[1], 'first', now, 'last', now)
redis.call('PEXPIRE', KEYS[1], ttl)
return {'scheduled', ARGV[1], tonumber(ARGV[2])}
"""

_FIRE = """
local state = redis.call('HMGET', KEYS[1], 'token', 'first', 'last')
if state[1] ~= ARGV[1] then
  return {'stale', 0}
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local due = math.min(tonumber(state[3]) + tonumber(ARGV[2]), tonumber(state[2]) + tonumber(ARGV[3]))
if now >= due then
  redis.call('DEL', KEYS[1])
  return {'fire', 0}
end
return {'wait', due - now}
"""

# Past the longest a burst can live, the state is garbage: let Redis drop it.
TTL_SLACK_MS = 60_000
GUARD_TTL_S = 7 * 24 * 3600


@dataclass(frozen=True)
class TriggerResult:
    status: TriggerStatus
    token: str
    delay_ms: int  # for "scheduled": when the fire job should first look


@dataclass(frozen=True)
class FireResult:
    status: Literal["fire", "wait", "stale"]
    remaining_ms: int


def _keys(topic_id: uuid.UUID) -> tuple[str, str]:
    tag = "{" + str(topic_id) + "}"
    return f"driftless:debounce:{tag}", f"driftless:evaluated:{tag}"


class Debouncer:
    def __init__(self, client: redis.Redis, *, debounce_ms: int, max_wait_ms: int) -> None:
        self._redis = client
        self.debounce_ms = debounce_ms
        self.max_wait_ms = max(max_wait_ms, debounce_ms)
        self._trigger = client.register_script(_TRIGGER)
        self._fire = client.register_script(_FIRE)

    @classmethod
    def from_settings(cls, client: redis.Redis, settings: Settings) -> Debouncer:
        return cls(
            client, debounce_ms=settings.debounce_ms, max_wait_ms=settings.debounce_max_wait_ms
        )

    def trigger(self, topic_id: uuid.UUID, *, last_message_id: int | None) -> TriggerResult:
        """Register one exit trigger for the topic whose newest message is `last_message_id`."""
        token = uuid.uuid4().hex
        ttl_ms = self.max_wait_ms + TTL_SLACK_MS
        status, token, delay = self._trigger(
            keys=list(_keys(topic_id)),
            args=[token, self.debounce_ms, self.max_wait_ms, ttl_ms, str(last_message_id)],
        )
        return TriggerResult(status.decode(), token.decode(), int(delay))

    def fire(self, topic_id: uuid.UUID, token: str) -> FireResult:
        """Is the burst of `token` due? Due means fire now (and only this caller fires)."""
        status, remaining = self._fire(
            keys=[_keys(topic_id)[0]], args=[token, self.debounce_ms, self.max_wait_ms]
        )
        return FireResult(status.decode(), int(remaining))

    def forget(self, topic_id: uuid.UUID, token: str) -> None:
        """Drop a burst whose fire job could not be sent, so the next trigger starts anew."""
        state_key = _keys(topic_id)[0]
        if self._redis.hget(state_key, "token") == token.encode():
            self._redis.delete(state_key)

    def mark_evaluated(self, topic_id: uuid.UUID, *, last_message_id: int | None) -> None:
        """R28: suppress exit triggers until a message newer than this one arrives."""
        self._redis.set(_keys(topic_id)[1], str(last_message_id), ex=GUARD_TTL_S)


def forget_topic(client: redis.Redis, topic_id: uuid.UUID) -> int:
    """Delete a topic's debounce state and guard (user erasure)."""
    return int(client.delete(*_keys(topic_id)))
