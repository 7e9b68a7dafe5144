"""The one place that turns settings into an LLM provider."""

from __future__ import annotations

import redis

from shared.infra.config import Settings
from shared.llm.base import LLM, CallListener
from shared.llm.local_provider import LOCAL_MODEL, LocalProvider
from shared.llm.openai_provider import OpenAIProvider
from shared.llm.ratelimit import (
    DEFAULT_MAX_WAIT_S,
    Limits,
    RateLimitedLLM,
    TokenBucket,
    bucket_name,
)


def make_llm(
    settings: Settings,
    *,
    redis_client: redis.Redis | None = None,
    calls: int = 1,
    on_call: CallListener | None = None,
    max_wait_s: float = DEFAULT_MAX_WAIT_S,
) -> LLM:
    """The OpenAI-compatible provider when settings ask for it, else the offline one.

    `calls`: how many calls the process may have in flight at once (a worker's pool
    concurrency); the HTTP client keeps that many connections open. `on_call` is told
    of every call the provider makes (the usage ledger): each attempt of the rate
    limiter's retries is a call of its own.

    With `DRIFTLESS_LLM_RPM`/`_TPM` set and a Redis client given, the provider's calls
    go through the fleet-wide rate limit, waiting at most `max_wait_s` for room. The
    `local` provider costs nothing and is never limited.
    """
    if settings.llm_provider != "openai":
        return LocalProvider(on_call=on_call)
    limits = Limits(rpm=settings.llm_rpm, tpm=settings.llm_tpm)
    limited = redis_client is not None and limits.enabled
    provider = OpenAIProvider(
        api_key=settings.openai_api_key,
        base_url=settings.openai_base_url,
        model=settings.llm_model,
        timeout_s=settings.llm_timeout_s,
        # Under the limit every attempt must take from the bucket, so the wrapper retries.
        max_retries=0 if limited else settings.llm_max_retries,
        max_connections=calls,
        on_call=on_call,
    )
    if redis_client is None or not limits.enabled:
        return provider
    name = bucket_name(provider="openai", base_url=settings.openai_base_url, model=provider.model)
    bucket = TokenBucket(redis_client, name=name, limits=limits)
    return RateLimitedLLM(provider, bucket, max_wait_s=max_wait_s, retries=settings.llm_max_retries)


def configured_model(settings: Settings) -> str:
    """The model `make_llm(settings)` asks (its `model`), without building a client: what a
    summary records as its maker (topics.summary_model)."""
    return settings.llm_model if settings.llm_provider == "openai" else LOCAL_MODEL


def longest_llm_call_s(settings: Settings) -> float:
    """How long one LLM call can take, by its own bounds: every attempt may wait out the
    rate limit and then its full timeout. The threads pool enforces no Celery time limit
    (prefork and gevent do), so there this (not task_time_limit) is what a stopping llm
    worker must wait for."""
    return (settings.llm_max_retries + 1) * (settings.llm_timeout_s + DEFAULT_MAX_WAIT_S)
