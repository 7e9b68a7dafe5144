"""A search query's vector: cached in Redis, else asked for under the deadline; None (and
the search lexical) when the server is slow or failing, never an exception."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from prometheus_client import REGISTRY

from shared.embeddings.provider import make_embedder
from shared.embeddings.query import QueryEmbeddings
from shared.infra.config import Settings
from tests.embedding_standin import embedding
from tests.integration.embeddings.standin_env import clean_redis, embeddings_on
from tests.llm_server import FakeOpenAI

TEXT = "which database for billing?"


@pytest.fixture
def embedding_settings(settings: Settings, fake_openai: FakeOpenAI) -> Settings:
    return embeddings_on(settings, fake_openai)


@pytest.fixture
def redis_client(redis_url: str) -> Iterator[redis.Redis]:
    with clean_redis(redis_url) as client:
        yield client


def _results() -> dict[str, float]:
    return {
        result: REGISTRY.get_sample_value("driftless_query_embeddings_total", {"result": result})
        or 0.0
        for result in ("cached", "embedded", "failed", "timeout")
    }


def _counted(before: dict[str, float]) -> dict[str, float]:
    return {k: v - before[k] for k, v in _results().items() if v != before[k]}


@pytest.fixture
def queries(embedding_settings: Settings, redis_client: redis.Redis) -> QueryEmbeddings:
    embedder = make_embedder(embedding_settings)
    assert embedder is not None
    return QueryEmbeddings(embedder, redis_client, deadline_s=0.3)


def test_a_querys_vector_is_embedded_once_then_cached(
    queries: QueryEmbeddings, fake_openai: FakeOpenAI
) -> None:
    before = _results()

    first = queries.vector(TEXT, org_id=None)
    second = queries.vector(TEXT, org_id=None)

    assert first == second == embedding(TEXT)
    assert len(fake_openai.embedding_requests) == 1  # the second made no request
    assert _counted(before) == {"embedded": 1, "cached": 1}
    queries.vector("another question", org_id=None)
    assert len(fake_openai.embedding_requests) == 2  # keyed by the text


def test_the_cache_is_per_org_so_no_org_learns_what_another_searched(
    queries: QueryEmbeddings, fake_openai: FakeOpenAI, org: str
) -> None:
    queries.vector(TEXT, org_id=None)
    assert queries.vector(TEXT, org_id=uuid.UUID(org)) == embedding(TEXT)

    assert len(fake_openai.embedding_requests) == 2


def test_a_slow_server_gives_none_about_at_the_deadline(
    queries: QueryEmbeddings, fake_openai: FakeOpenAI
) -> None:
    fake_openai.embeddings_slow(5)
    before = _results()

    started = time.monotonic()
    vector = queries.vector(TEXT, org_id=None)

    assert vector is None
    assert time.monotonic() - started < 2  # the deadline is 0.3 s; the server takes 5
    assert _counted(before) == {"timeout": 1}
    assert len(fake_openai.embedding_requests) == 1  # one attempt, no retry


@pytest.mark.parametrize("status", [500, 401])
def test_a_failing_server_gives_none_and_is_counted(
    queries: QueryEmbeddings, fake_openai: FakeOpenAI, status: int
) -> None:
    fake_openai.embeddings_fail(status)
    before = _results()

    assert queries.vector(TEXT, org_id=None) is None
    assert _counted(before) == {"failed": 1}

    fake_openai.reset()  # back up: nothing of the failure was cached
    assert queries.vector(TEXT, org_id=None) == embedding(TEXT)


def test_failures_are_logged_at_most_once_a_minute(
    embedding_settings: Settings,
    redis_client: redis.Redis,
    fake_openai: FakeOpenAI,
    caplog: pytest.LogCaptureFixture,
) -> None:
    now = [1000.0]
    embedder: Any = make_embedder(embedding_settings)
    queries = QueryEmbeddings(embedder, redis_client, clock=lambda: now[0])
    fake_openai.embeddings_fail(500)

    with caplog.at_level("WARNING", logger="shared.embeddings.query"):
        for _ in range(5):
            assert queries.vector(TEXT, org_id=None) is None
        now[0] += 61
        assert queries.vector(TEXT, org_id=None) is None

    lines = [r.getMessage() for r in caplog.records if r.name == "shared.embeddings.query"]
    assert len(lines) == 2
    assert "(4 more since the last line" in lines[1]


def test_without_redis_a_query_is_still_embedded(
    embedding_settings: Settings, fake_openai: FakeOpenAI
) -> None:
    embedder: Any = make_embedder(embedding_settings)
    down = redis.Redis(port=1, socket_connect_timeout=0.2)  # nothing listens there
    queries = QueryEmbeddings(embedder, down)

    assert queries.vector(TEXT, org_id=None) == embedding(TEXT)
    assert queries.vector("   ", org_id=None) is None  # nothing to embed, nothing asked
    assert len(fake_openai.embedding_requests) == 1
