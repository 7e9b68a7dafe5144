"""A provider-wide LLM rate limit: one token bucket in Redis shared by every worker.

Celery's `rate_limit` is per worker process, so a fleet of N workers would send N times
the provider's quota. Here every call first takes from two buckets in Redis — requests
and tokens per minute — in one Lua script, so the fleet as a whole stays within
`DRIFTLESS_LLM_RPM` / `DRIFTLESS_LLM_TPM` (0: that dimension is not limited).

- Time comes from Redis `TIME`: one clock for the whole fleet, no skew between hosts.
- A bucket holds `burst_s` seconds of its rate (6 s by default) and refills
  continuously, at a rate chosen so that a full bucket plus one minute of refill is
  exactly the quota (`Limits`). What is granted over any window of T seconds never
  exceeds `capacity + rate * T`: over any minute, the quota. A call larger than the
  whole bucket still goes once the bucket is full, leaving a debt.
- A call costs 1 request and an estimate of its tokens: the prompt (about four
  characters a token) plus the completion it may produce. After the call the token
  bucket is trued up with the usage the provider reports: the difference is refunded
  or debited, so a bucket may go below zero and later callers wait the debt off.
- A caller that would wait longer than `max_wait_s` gets `RateLimited` at once instead
  of holding a worker: the task retries later (see `RateLimited`).
- Both keys of a bucket share a hash tag (Redis Cluster), and expire once they would
  have refilled to full anyway, which is what a missing key means.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

import redis

from shared.llm.base import LLM, Completion, DriftRequest, LLMError, SummaryRequest
from shared.llm.prompts import drift_messages, summary_messages
from shared.llm.tokens import approx_tokens

log = logging.getLogger(__name__)

# Time since a bucket was last written, in µs. Redis TIME's seconds and microseconds are
# stored as they came: one number of µs since the epoch would not survive Lua's
# 14-digit tostring.
_ELAPSED = """
local function elapsed_us(t, state)
  local us = (tonumber(t[1]) - tonumber(state[2])) * 1000000 + tonumber(t[2]) - tonumber(state[3])
  return math.max(0, us)
end
"""

# KEYS: requests bucket, tokens bucket. Each is a hash {level, s, us} (when last written).
# ARGV: per dimension (requests, tokens): rate per minute, capacity, cost; then `apply`
# (1: take the cost if both buckets hold it; 0: only report). A rate of 0 means no limit.
# Returns {granted, wait_ms, requests level, tokens level}; levels as strings (Lua
# numbers would be truncated to integers on the way out).
_ACQUIRE = (
    _ELAPSED
    + """
local t = redis.call('TIME')
local levels, rates, capacities, costs = {}, {}, {}, {}
local wait = 0
for i = 1, 2 do
  rates[i] = tonumber(ARGV[3 * i - 2]) / 60000000
  capacities[i] = tonumber(ARGV[3 * i - 1])
  costs[i] = tonumber(ARGV[3 * i])
  levels[i] = capacities[i]
  if rates[i] > 0 then
    local state = redis.call('HMGET', KEYS[i], 'level', 's', 'us')
    if state[1] and state[2] and state[3] then
      levels[i] = math.min(capacities[i], tonumber(state[1]) + elapsed_us(t, state) * rates[i])
    end
    -- A call larger than the whole bucket still goes, once the bucket is full.
    local needed = math.min(costs[i], capacities[i])
    if levels[i] < needed then
      wait = math.max(wait, (needed - levels[i]) / rates[i] / 1000)
    end
  end
end
local granted = wait == 0 and ARGV[7] == '1'
if granted then
  for i = 1, 2 do
    if rates[i] > 0 then
      levels[i] = levels[i] - costs[i]
      local refill_ms = (capacities[i] - levels[i]) / rates[i] / 1000
      redis.call('HSET', KEYS[i], 'level', tostring(levels[i]), 's', t[1], 'us', t[2])
      redis.call('PEXPIRE', KEYS[i], math.ceil(refill_ms) + 1000)
    end
  end
end
return {granted and 1 or 0, math.ceil(wait), tostring(levels[1]), tostring(levels[2])}
"""
)

# KEYS: tokens bucket. ARGV: rate per minute, capacity, delta (> 0 debit, < 0 refund).
# Refills first, so the refund or debt counts from now; never above capacity.
_ADJUST = (
    _ELAPSED
    + """
local rate = tonumber(ARGV[1]) / 60000000
local capacity = tonumber(ARGV[2])
local t = redis.call('TIME')
local state = redis.call('HMGET', KEYS[1], 'level', 's', 'us')
local level = capacity
if state[1] and state[2] and state[3] then
  level = math.min(capacity, tonumber(state[1]) + elapsed_us(t, state) * rate)
end
level = math.min(capacity, level - tonumber(ARGV[3]))
redis.call('HSET', KEYS[1], 'level', tostring(level), 's', t[1], 'us', t[2])
redis.call('PEXPIRE', KEYS[1], math.ceil((capacity - level) / rate / 1000) + 1000)
return tostring(level)
"""
)

DEFAULT_BURST_S = 6.0
DEFAULT_MAX_WAIT_S = 30.0
# Neither prompt sets max_tokens, so the completion is budgeted at a generous answer's
# length; the true-up settles the difference once the provider reports usage.
SUMMARY_COMPLETION_TOKENS = 512
DRIFT_COMPLETION_TOKENS = 128
# Chat formatting adds a few tokens per message around its content.
TOKENS_PER_MESSAGE = 4
# Spreads waiters that computed the same wait, so they do not all retry at one instant.
WAIT_JITTER_S = 0.05
# First pause before retrying a transient provider failure; doubles each attempt.
RETRY_BACKOFF_S = 0.5


def _pause(seconds: float) -> None:
    # `time.sleep` looked up at each call, not bound at import: under a gevent worker it
    # is gevent's (monkey-patched), which lets the process's other tasks run meanwhile.
    time.sleep(seconds)


class RateLimited(Exception):
    """The provider-wide quota has no room within the caller's maximum wait.

    Deliberately not an `LLMError`: the summary and evaluation services turn an
    `LLMError` into their fallback (a stored fallback summary, "no drift"), which
    would mark the topic summarized at its watermark and never ask the model again.
    Quota pressure is temporary, so nothing is written: the exception leaves the
    service before its write step and the task retries (or the reconciler re-enqueues).
    """

    def __init__(self, message: str, *, retry_after_s: float) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


@dataclass(frozen=True)
class Limits:
    """Requests and tokens per minute (0: unlimited) and the bucket size in seconds.

    The buckets refill at quota × 60 / (60 + burst_s) a minute and hold burst_s
    seconds of that: a full bucket plus a minute of refill is then exactly the quota,
    so no 60-second window — sliding or the provider's calendar minute — is given
    more than it (for calls no larger than the bucket, see the module docstring).
    A bucket of a whole minute at the full rate would allow twice the quota in the
    minute after an idle one.
    """

    rpm: int
    tpm: int
    burst_s: float = DEFAULT_BURST_S

    @property
    def enabled(self) -> bool:
        return self.rpm > 0 or self.tpm > 0

    def _rate(self, quota: int) -> float:
        return quota * 60 / (60 + self.burst_s)

    def _capacity(self, quota: int) -> float:
        # At least one unit, or a small quota with a short burst could never grant;
        # whole requests still never exceed the quota in a minute (counts are integers).
        return max(1.0, quota * self.burst_s / (60 + self.burst_s))

    @property
    def request_rate(self) -> float:
        """Requests a minute the bucket refills by."""
        return self._rate(self.rpm)

    @property
    def token_rate(self) -> float:
        """Tokens a minute the bucket refills by."""
        return self._rate(self.tpm)

    @property
    def request_capacity(self) -> float:
        return self._capacity(self.rpm)

    @property
    def token_capacity(self) -> float:
        return self._capacity(self.tpm)


@dataclass(frozen=True)
class Acquired:
    granted: bool
    wait_ms: int
    request_level: float
    token_level: float


def bucket_name(*, provider: str, base_url: str | None, model: str) -> str:
    """Provider (and its host: two servers have two quotas) plus model, as one hash tag."""
    host = urlsplit(base_url).netloc if base_url else "default"
    name = f"{provider}:{host}:{model}"
    return name.replace("{", "").replace("}", "")


class TokenBucket:
    """The two Redis buckets of one provider and model."""

    def __init__(self, client: redis.Redis, *, name: str, limits: Limits) -> None:
        self.limits = limits
        tag = "{" + name + "}"
        self.keys = [f"driftless:llm-rate:{tag}:requests", f"driftless:llm-rate:{tag}:tokens"]
        self._acquire = client.register_script(_ACQUIRE)
        self._adjust = client.register_script(_ADJUST)

    def try_acquire(self, tokens: int, *, apply: bool = True) -> Acquired:
        """Take 1 request and `tokens` if both buckets hold them, else say how long to wait."""
        limits = self.limits
        granted, wait_ms, requests, tokens_left = self._acquire(
            keys=self.keys,
            args=[
                limits.request_rate, limits.request_capacity, 1,
                limits.token_rate, limits.token_capacity, tokens,
                1 if apply else 0,
            ],
        )  # fmt: skip
        return Acquired(bool(granted), int(wait_ms), float(requests), float(tokens_left))

    def levels(self) -> Acquired:
        """What the buckets hold now (refilled to this instant), without taking anything."""
        return self.try_acquire(0, apply=False)

    def adjust_tokens(self, delta: int) -> None:
        """Debit (delta > 0) or refund (delta < 0) tokens after the provider reported usage."""
        if self.limits.tpm <= 0 or delta == 0:
            return
        self._adjust(
            keys=[self.keys[1]], args=[self.limits.token_rate, self.limits.token_capacity, delta]
        )


def estimate_tokens(messages: list[dict[str, str]], *, completion_tokens: int) -> int:
    """An estimate of a call's cost: its prompt plus the completion it may produce."""
    prompt = sum(approx_tokens(m["content"]) + TOKENS_PER_MESSAGE for m in messages)
    return prompt + completion_tokens


def wait_for_room(
    bucket: TokenBucket,
    tokens: int,
    *,
    max_wait_s: float,
    what: str,
    sleep: Callable[[float], None] = _pause,
    clock: Callable[[], float] = time.monotonic,
) -> float:
    """Wait until `bucket` grants a call of `tokens`; the seconds slept (0: granted at once).
    Past `max_wait_s`, `RateLimited` (its message begins with `what`): the task retries."""
    deadline = clock() + max_wait_s
    slept = 0.0
    while True:
        try:
            result = bucket.try_acquire(tokens)
        except redis.RedisError as exc:
            # Without the shared bucket there is no way to know the fleet's rate:
            # fail closed, the task retries once Redis is back.
            raise RateLimited(
                f"the LLM rate limiter is unavailable: {exc}", retry_after_s=5.0
            ) from exc
        if result.granted:
            return slept
        wait_s = result.wait_ms / 1000
        remaining = deadline - clock()
        if wait_s > remaining:
            raise RateLimited(
                f"{what}: next slot in {wait_s:.1f}s, past the {max_wait_s:g}s wait limit",
                retry_after_s=wait_s,
            )
        pause = wait_s + random.uniform(0, WAIT_JITTER_S)
        sleep(pause)
        slept += pause


class RateLimitedLLM:
    """Any `LLM`, taking each call's requests and tokens from a shared bucket first."""

    def __init__(
        self,
        inner: LLM,
        bucket: TokenBucket,
        *,
        max_wait_s: float = DEFAULT_MAX_WAIT_S,
        retries: int = 0,
        sleep: Callable[[float], None] = _pause,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.inner = inner
        # The retries of transient failures, each one charged to the bucket: the inner
        # provider must not retry on its own (make_llm builds it with max_retries=0), or
        # its retries would be requests the fleet never counted.
        self.retries = retries
        self.model = inner.model
        self.bucket = bucket
        self.max_wait_s = max_wait_s
        self._sleep = sleep
        self._clock = clock

    def summarize(self, request: SummaryRequest) -> Completion:
        estimate = estimate_tokens(
            summary_messages(request), completion_tokens=SUMMARY_COMPLETION_TOKENS
        )
        return self._call(lambda: self.inner.summarize(request), estimate)

    def detect_drift(self, request: DriftRequest) -> Completion:
        estimate = estimate_tokens(
            drift_messages(request), completion_tokens=DRIFT_COMPLETION_TOKENS
        )
        return self._call(lambda: self.inner.detect_drift(request), estimate)

    def acquire(self, tokens: int) -> None:
        """Wait until the buckets grant the call, or raise `RateLimited` past max_wait_s."""
        wait_for_room(
            self.bucket, tokens, max_wait_s=self.max_wait_s,
            what=f"LLM quota exhausted for {self.model}", sleep=self._sleep, clock=self._clock,
        )  # fmt: skip

    def _call(self, call: Callable[[], Completion], estimate: int) -> Completion:
        attempt = 0
        while True:
            self.acquire(estimate)
            # A call that fails keeps its estimate charged: the provider may have counted it.
            try:
                completion = call()
                break
            except LLMError as exc:
                if not exc.retryable or attempt == self.retries:
                    raise
            self._sleep(RETRY_BACKOFF_S * 2**attempt + random.uniform(0, WAIT_JITTER_S))
            attempt += 1
        used = completion.usage.prompt_tokens + completion.usage.completion_tokens
        if used > 0:  # 0: the provider reported no usage, the estimate stands
            try:
                self.bucket.adjust_tokens(used - estimate)
            except redis.RedisError as exc:
                log.warning("could not true up the LLM token bucket: %s", exc)
        return completion
