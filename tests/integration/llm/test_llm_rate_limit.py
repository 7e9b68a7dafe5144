"""The provider-wide LLM rate limit: one Redis token bucket shared by every worker.

Several `RateLimitedLLM`s (threads, and separate processes, each with its own Redis
client and openai client, as separate workers have) call FakeOpenAI through the real
openai client. The server records when each call arrived; the bound asserted is the one
the algorithm guarantees: by any moment t, the calls that arrived number at most
capacity + rate × (t − start), and their tokens likewise.
"""

from __future__ import annotations

import multiprocessing
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any, Protocol

import pytest
import redis
from flask.testing import FlaskClient
from sqlalchemy.orm import Session, sessionmaker

from shared.evaluations.summarize import summarize_topic
from shared.infra.config import Settings
from shared.infra.db.uow import UnitOfWork
from shared.infra.queue import RecordingQueue
from shared.llm.base import LLMError, SummaryRequest, TranscriptLine
from shared.llm.factory import make_llm
from shared.llm.local_provider import LocalProvider
from shared.llm.openai_provider import OpenAIProvider
from shared.llm.prompts import summary_messages
from shared.llm.ratelimit import (
    SUMMARY_COMPLETION_TOKENS,
    Limits,
    RateLimited,
    RateLimitedLLM,
    TokenBucket,
    estimate_tokens,
)
from tests.helpers import new_session, post_message
from tests.llm_server import FakeOpenAI, Reply

# Nothing listens here: a client pointed at it fails on its first command.
DEAD_REDIS_URL = "redis://127.0.0.1:1/0"
ANSWER = '{"title": "Launch", "summary": "Ship Friday.", "include_in_memory": true}'
REQUEST = SummaryRequest(
    lines=[
        TranscriptLine(1, "user", "We ship the billing service on Friday."),
        TranscriptLine(2, "assistant", "Noted: Friday, PostgreSQL, Celery."),
    ]
)
ESTIMATE = estimate_tokens(summary_messages(REQUEST), completion_tokens=SUMMARY_COMPLETION_TOKENS)


def provider(base_url: str) -> OpenAIProvider:
    return OpenAIProvider(
        api_key="test", base_url=base_url, model="test-model", timeout_s=5, max_retries=0
    )


def limited(
    base_url: str, redis_url: str, name: str, limits: Limits, **kwargs: Any
) -> RateLimitedLLM:
    """One worker's view: its own openai client and Redis client, the fleet's bucket."""
    bucket = TokenBucket(redis.Redis.from_url(redis_url), name=name, limits=limits)
    return RateLimitedLLM(provider(base_url), bucket, **kwargs)


@pytest.fixture
def bucket_name() -> str:
    return f"test:{uuid.uuid4().hex}"  # a bucket of its own for every test


class Semaphore(Protocol):
    def release(self) -> None: ...


class Event(Protocol):
    def wait(self, timeout: float | None = None) -> bool: ...


def run_worker_threads(
    base_url: str,
    redis_url: str,
    name: str,
    limits: Limits,
    threads: int,
    calls: int,
    ready: Semaphore,
    go: Event,
) -> None:
    """`threads` workers, `calls` summaries each, all through the one shared bucket.

    Each worker builds its clients, releases `ready`, and starts calling on `go`: the
    test's clock starts when all are ready, so slow start-ups cannot widen the bound.
    """
    errors: list[BaseException] = []

    def work() -> None:
        llm = limited(base_url, redis_url, name, limits, max_wait_s=60)
        ready.release()
        go.wait()
        try:
            for _ in range(calls):
                llm.summarize(REQUEST)
        except BaseException as exc:  # reported to the test, not swallowed by the thread
            errors.append(exc)

    workers = [threading.Thread(target=work) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    if errors:
        raise errors[0]


def start_when_ready(ready: Any, go: Any, workers: int) -> float:
    """Wait until every worker is ready, then let them go; returns the start time."""
    for _ in range(workers):
        assert ready.acquire(timeout=120), "a worker never got ready"
    start = time.time()
    go.set()
    return start


def assert_within_bucket(
    arrivals: list[float], costs: list[float], *, start: float, capacity: float, per_s: float
) -> None:
    """By each arrival, the cost arrived so far fits capacity + rate × time since start."""
    total = 0.0
    for number, (at, cost) in enumerate(sorted(zip(arrivals, costs, strict=True)), 1):
        total += cost
        allowed = capacity + per_s * (at - start)
        assert total <= allowed + 1e-6, (
            f"call {number} at +{at - start:.3f}s brought the total to {total:g},"
            f" over the {allowed:.2f} the bucket allows"
        )


def test_a_fleet_of_processes_never_exceeds_the_requests_per_minute(
    fake_openai: FakeOpenAI, redis_url: str, bucket_name: str
) -> None:
    fake_openai.answer(ANSWER)
    # 10 requests a second, a burst of 5; 2 processes x 3 threads x 4 calls = 24 calls.
    limits = Limits(rpm=600, tpm=0, burst_s=0.5)
    spawn = multiprocessing.get_context("spawn")
    ready, go = spawn.Semaphore(0), spawn.Event()
    args = (fake_openai.base_url, redis_url, bucket_name, limits, 3, 4, ready, go)
    processes = [spawn.Process(target=run_worker_threads, args=args) for _ in range(2)]
    for process in processes:
        process.start()
    start = start_when_ready(ready, go, workers=6)
    for process in processes:
        process.join(timeout=120)
        assert process.exitcode == 0
    arrivals = fake_openai.received_at
    assert len(arrivals) == 24
    assert_within_bucket(
        arrivals,
        [1.0] * 24,
        start=start,
        capacity=limits.request_capacity,
        per_s=limits.request_rate / 60,
    )


def test_tokens_per_minute_hold_across_threads_with_refunds(
    fake_openai: FakeOpenAI, redis_url: str, bucket_name: str
) -> None:
    # Every answer reports half the estimate: the true-up refunds the other half.
    used = ESTIMATE // 2
    fake_openai.queue(*[Reply(content=ANSWER, usage=(used - 10, 10))] * 16)
    tpm = ESTIMATE * 4 * 60  # about four estimates a second, a burst of two
    limits = Limits(rpm=0, tpm=tpm, burst_s=0.5)
    ready, go = threading.Semaphore(0), threading.Event()
    fleet = threading.Thread(
        target=run_worker_threads,
        args=(fake_openai.base_url, redis_url, bucket_name, limits, 4, 4, ready, go),
    )
    fleet.start()
    start = start_when_ready(ready, go, workers=4)
    fleet.join(timeout=120)
    arrivals = fake_openai.received_at
    assert len(arrivals) == 16
    assert_within_bucket(
        arrivals,
        [float(used)] * 16,
        start=start,
        capacity=limits.token_capacity,
        per_s=limits.token_rate / 60,
    )


@pytest.mark.parametrize(
    ("reply", "charged"),
    [
        (Reply(content=ANSWER, usage=(100, 20)), 120),  # less than estimated: refund
        (Reply(content=ANSWER, usage=(ESTIMATE + 400, 100)), ESTIMATE + 500),  # more: debit
        (Reply(content=ANSWER, omit_usage=True), ESTIMATE),  # no usage: the estimate stands
    ],
    ids=["refund", "debit", "no-usage"],
)
def test_the_token_bucket_is_trued_up_to_the_reported_usage(
    fake_openai: FakeOpenAI, redis_url: str, bucket_name: str, reply: Reply, charged: int
) -> None:
    fake_openai.queue(reply)
    # About 10 tokens a second: refill during the call is small, and bounded.
    limits = Limits(rpm=0, tpm=6000, burst_s=600)
    llm = limited(fake_openai.base_url, redis_url, bucket_name, limits)
    began = time.monotonic()
    llm.summarize(REQUEST)
    level = llm.bucket.levels().token_level
    elapsed = time.monotonic() - began
    expected = limits.token_capacity - charged
    assert expected <= level <= expected + limits.token_rate / 60 * elapsed + 1e-6


def test_a_debt_makes_the_next_caller_wait_it_off(
    fake_openai: FakeOpenAI, redis_url: str, bucket_name: str
) -> None:
    limits = Limits(rpm=0, tpm=ESTIMATE * 2, burst_s=60)  # the bucket holds one estimate
    used = int(limits.token_capacity) * 2  # twice the bucket, against one estimate
    fake_openai.queue(Reply(content=ANSWER, usage=(used, 0)))
    llm = limited(fake_openai.base_url, redis_url, bucket_name, limits, max_wait_s=1)
    llm.summarize(REQUEST)  # granted on a full bucket, then used twice the capacity
    with pytest.raises(RateLimited) as raised:
        llm.summarize(REQUEST)
    # Owed: a bucket's worth below zero, then the next call's: over burst_s to refill.
    assert raised.value.retry_after_s > limits.burst_s
    assert fake_openai.calls == 1


def test_an_exhausted_bucket_past_the_max_wait_raises_without_calling(
    fake_openai: FakeOpenAI, redis_url: str, bucket_name: str
) -> None:
    fake_openai.answer(ANSWER)
    limits = Limits(rpm=1, tpm=0)  # one request a minute (refilled in 66 s), a burst of one
    llm = limited(fake_openai.base_url, redis_url, bucket_name, limits, max_wait_s=0.5)
    llm.summarize(REQUEST)
    with pytest.raises(RateLimited) as raised:
        llm.summarize(REQUEST)
    refill_s = 60 / limits.request_rate
    assert refill_s - 5 < raised.value.retry_after_s <= refill_s
    assert fake_openai.calls == 1  # the refused call never reached the provider


def test_a_short_wait_is_slept_then_the_call_goes(
    fake_openai: FakeOpenAI, redis_url: str, bucket_name: str
) -> None:
    fake_openai.answer(ANSWER)
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        time.sleep(seconds)

    limits = Limits(rpm=120, tpm=0, burst_s=0.5)  # about two a second, a burst of one
    llm = limited(fake_openai.base_url, redis_url, bucket_name, limits, max_wait_s=5, sleep=sleep)
    llm.summarize(REQUEST)
    llm.summarize(REQUEST)
    assert fake_openai.calls == 2
    # It waited instead of refusing: at most one interval (the bucket refilled during the
    # first call), plus the jitter.
    assert slept and 0 < slept[0] <= 60 / limits.request_rate + 0.05


def test_an_unreachable_limiter_fails_closed(fake_openai: FakeOpenAI, bucket_name: str) -> None:
    limits = Limits(rpm=60, tpm=0)
    llm = limited(fake_openai.base_url, DEAD_REDIS_URL, bucket_name, limits)
    with pytest.raises(RateLimited):
        llm.summarize(REQUEST)
    assert fake_openai.calls == 0


@pytest.mark.parametrize(
    ("replies", "calls", "error"),
    [
        ([Reply(status=429), Reply(status=500), Reply(content=ANSWER)], 3, None),
        ([Reply(status=503)] * 3, 3, "retryable"),  # the retries run out
        ([Reply(status=400), Reply(content=ANSWER)], 1, "final"),  # another try won't help
    ],
)
def test_every_attempt_takes_from_the_bucket_so_retries_count_against_the_quota(
    fake_openai: FakeOpenAI,
    redis_url: str,
    bucket_name: str,
    replies: list[Reply],
    calls: int,
    error: str | None,
) -> None:
    fake_openai.queue(*replies)
    limits = Limits(rpm=6, tpm=0, burst_s=600)  # 60 requests, refilling ~0.5 a minute
    llm = limited(
        fake_openai.base_url, redis_url, bucket_name, limits, retries=2, sleep=lambda _: None
    )
    if error is None:
        assert llm.summarize(REQUEST).text == ANSWER
    else:
        with pytest.raises(LLMError) as raised:
            llm.summarize(REQUEST)
        assert raised.value.retryable is (error == "retryable")
    assert fake_openai.calls == calls
    level = llm.bucket.levels().request_level
    assert limits.request_capacity - calls <= level < limits.request_capacity - calls + 0.5


def test_under_a_limit_the_provider_leaves_retrying_to_the_bucket(
    fake_openai: FakeOpenAI, redis_url: str
) -> None:
    settings = settings_for(fake_openai, llm_rpm=60)
    llm = make_llm(settings, redis_client=redis.Redis.from_url(redis_url))
    assert isinstance(llm, RateLimitedLLM) and isinstance(llm.inner, OpenAIProvider)
    assert llm.inner.max_retries == 0 and llm.retries == settings.llm_max_retries == 2


def settings_for(fake: FakeOpenAI, **limits: int) -> Settings:
    return Settings(llm="openai", openai_base_url=fake.base_url, llm_model="test-model", **limits)


def test_no_limit_configured_means_no_wrapper_and_no_redis(fake_openai: FakeOpenAI) -> None:
    fake_openai.answer(ANSWER)
    dead = redis.Redis.from_url(DEAD_REDIS_URL)  # any command on it would raise
    llm = make_llm(settings_for(fake_openai, llm_rpm=0, llm_tpm=0), redis_client=dead)
    assert isinstance(llm, OpenAIProvider)
    assert llm.summarize(REQUEST).text == ANSWER


def test_the_factory_limits_the_openai_provider_only(
    fake_openai: FakeOpenAI, redis_url: str
) -> None:
    client = redis.Redis.from_url(redis_url)
    limited_llm = make_llm(settings_for(fake_openai, llm_rpm=60), redis_client=client)
    assert isinstance(limited_llm, RateLimitedLLM)
    assert limited_llm.model == "test-model"
    assert "{openai:127.0.0.1:" in limited_llm.bucket.keys[0]  # the hash tag: one slot
    local = make_llm(Settings(llm="local", llm_rpm=60, llm_tpm=1000), redis_client=client)
    assert isinstance(local, LocalProvider)


@pytest.fixture
def exhausted_llm(
    fake_openai: FakeOpenAI, redis_url: str, bucket_name: str
) -> Iterator[RateLimitedLLM]:
    fake_openai.answer(ANSWER)
    llm = limited(fake_openai.base_url, redis_url, bucket_name, Limits(rpm=1, tpm=0))
    llm.max_wait_s = 0
    llm.summarize(REQUEST)  # the minute's only request
    yield llm


def test_r14_a_rate_limited_summary_writes_nothing_and_never_promotes(
    client: FlaskClient,
    auth: dict[str, str],
    session_factory: sessionmaker[Session],
    exhausted_llm: RateLimitedLLM,
    fake_openai: FakeOpenAI,
) -> None:
    session = new_session(client, auth, agent="planner", user="ada")
    for i in range(6):
        role = "user" if i % 2 == 0 else "assistant"
        post_message(client, auth, session["id"], f"We decided item {i}.", role=role)
    tid = session["activeTopicId"]
    calls = fake_openai.calls
    with pytest.raises(RateLimited):  # not LLMError: no fallback stored under the watermark
        summarize_topic(
            new_uow=lambda: UnitOfWork(session_factory, RecordingQueue()),
            llm=exhausted_llm,
            topic_id=uuid.UUID(tid),
            trigger="topic_closed",
        )
    assert fake_openai.calls == calls
    topic = client.get(f"/agents-api/topics/{tid}", headers=auth).json
    assert topic is not None
    assert topic["summary"] is None and topic["keepInMemory"] is False
    history = client.get(f"/agents-api/topics/{tid}/evaluations", headers=auth).json
    assert history is not None and history["evaluations"] == []
