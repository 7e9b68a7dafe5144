"""A provider-wide LLM rate limit: one token bucket in Redis shared by every worker.

Celery's `rate_limit` is per worker process, so a fleet of N workers would send N times
the provider's quota. Here every call first takes from two buckets in Redis — requests
and tokens per minute — in one Lua script, so the fleet as a whole stays within
`DRIFTLESS_LLM_RPM` / `DRIFTLESS_LLM_TPM` (0: that dimension is not limited).

- The buckets are shared/infra/bucket.py's: Redis `TIME`, one script, keys that expire.
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
- Both keys of a bucket share a hash tag (one slot, were they ever on a Redis Cluster,
  which driftless does not support: docs/deploy.md).
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

import redis

from shared.infra import fleet_trial
from shared.infra.bucket import Buckets, Rate
from shared.llm.base import LLM, Completion, DriftRequest, LLMError, SummaryRequest
from shared.llm.prompts import drift_messages, summary_messages
from shared.llm.tokens import approx_tokens

log = logging.getLogger(__name__)

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
    """A quota (the provider-wide one, or an org's) has no room within the caller's wait.

    Deliberately not an `LLMError`: the summary and evaluation services turn an
    `LLMError` into their fallback (a stored fallback summary, "no drift"), which
    would mark the topic summarized at its watermark and never ask the model again.
    Quota pressure is temporary, so nothing is written: the exception leaves the
    service before its write step and the task retries (or the reconciler re-enqueues).
    """

    def __init__(self, message: str, *, retry_after_s: float, fleet: bool = True) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s
        # The fleet's quota (every org on the fleet's model waits) or the org's own.
        self.fleet = fleet


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
    """The two Redis buckets of one provider and model (shared/infra/bucket.py)."""

    def __init__(self, client: redis.Redis, *, name: str, limits: Limits) -> None:
        self.limits = limits
        tag = "{" + name + "}"
        self.keys = [f"driftless:llm-rate:{tag}:requests", f"driftless:llm-rate:{tag}:tokens"]
        self._buckets = Buckets(client)
        # A minute's quota as a rate a second; a dimension of 0 is not limited.
        self._rates = (
            Rate(per_s=limits.request_rate / 60, capacity=limits.request_capacity),
            Rate(per_s=limits.token_rate / 60, capacity=limits.token_capacity),
        )

    def try_acquire(self, tokens: int, *, apply: bool = True) -> Acquired:
        """Take 1 request and `tokens` if both buckets hold them, else say how long to wait."""
        taken = self._buckets.take(self.keys, self._rates, (1, tokens), apply=apply)
        requests, tokens_left = taken.levels
        return Acquired(taken.granted, taken.wait_ms, requests, tokens_left)

    def levels(self) -> Acquired:
        """What the buckets hold now (refilled to this instant), without taking anything."""
        return self.try_acquire(0, apply=False)

    def adjust_tokens(self, delta: int) -> None:
        """Debit (delta > 0) or refund (delta < 0) tokens after the provider reported usage."""
        if self.limits.tpm <= 0 or delta == 0:
            return
        self._buckets.adjust(self.keys[1], self._rates[1], delta)


def estimate_tokens(messages: list[dict[str, str]], *, completion_tokens: int) -> int:
    """An estimate of a call's cost: its prompt plus the completion it may produce."""
    prompt = sum(approx_tokens(m["content"]) + TOKENS_PER_MESSAGE for m in messages)
    return prompt + completion_tokens


def summary_estimate(request: SummaryRequest) -> int:
    """A summary call's tokens, before it is made."""
    return estimate_tokens(summary_messages(request), completion_tokens=SUMMARY_COMPLETION_TOKENS)


def drift_estimate(request: DriftRequest) -> int:
    """A drift call's tokens, before it is made."""
    return estimate_tokens(drift_messages(request), completion_tokens=DRIFT_COMPLETION_TOKENS)


def wait_for_room(
    bucket: TokenBucket,
    tokens: int,
    *,
    max_wait_s: float,
    what: str,
    fleet: bool = True,
    sleep: Callable[[float], None] = _pause,
    clock: Callable[[], float] = time.monotonic,
) -> float:
    """Wait until `bucket` grants a call of `tokens`; the seconds slept (0: granted at once).
    Past `max_wait_s`, `RateLimited` (its message begins with `what`; `fleet`: whose
    quota): the task retries, or its org yields its turn (worker/fair.py)."""
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
            if fleet:
                fleet_trial.granted()  # the next org the quota refused may try now
            return slept
        wait_s = result.wait_ms / 1000
        remaining = deadline - clock()
        if wait_s > remaining:
            raise RateLimited(
                f"{what}: next slot in {wait_s:.1f}s, past the {max_wait_s:g}s wait limit",
                retry_after_s=wait_s,
                fleet=fleet,
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
        return self._call(lambda: self.inner.summarize(request), summary_estimate(request))

    def detect_drift(self, request: DriftRequest) -> Completion:
        return self._call(lambda: self.inner.detect_drift(request), drift_estimate(request))

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
