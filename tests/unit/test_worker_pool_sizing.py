"""The worker sizes its database pool for the tasks that share its engine."""

from __future__ import annotations

import pytest
from celery.concurrency import get_implementation

from shared.bootstrap import Runtime
from shared.infra.config import Settings
from shared.infra.runtime import Endpoints
from worker.context import pool_name, size_for_worker

ENDPOINTS = Endpoints(
    database_url="postgresql://postgres@127.0.0.1:5432/x",
    redis_url="redis://127.0.0.1:6379/0",
    broker_url="redis://127.0.0.1:6379/1",
)


@pytest.mark.parametrize(
    ("given", "name"),
    [
        ("threads", "threads"),
        ("prefork", "prefork"),
        ("processes", "prefork"),
        ("solo", "solo"),
        (get_implementation("threads"), "threads"),
        (get_implementation("prefork"), "prefork"),
        (get_implementation("solo"), "solo"),
    ],
)
def test_the_pool_is_named_by_alias_or_class(given: object, name: str) -> None:
    assert pool_name(given) == name


@pytest.mark.parametrize(
    ("pool", "concurrency", "expected"),
    [
        ("threads", 16, 16),  # 16 tasks share one engine: one connection each
        ("threads", 2, 5),  # never below DRIFTLESS_DB_POOL_SIZE
        ("prefork", 16, 5),  # each child runs one task at a time
        ("solo", 1, 5),
    ],
)
def test_a_threads_worker_gets_a_connection_per_thread(
    pool: str, concurrency: int, expected: int
) -> None:
    runtime = Runtime(Settings(db_pool_size=5, db_max_overflow=3), endpoints=ENDPOINTS)
    size_for_worker(runtime, pool=pool, concurrency=concurrency)
    assert runtime.pool_size == expected
    assert runtime.engine.pool.size() == expected  # type: ignore[attr-defined]
    assert runtime.engine.pool._max_overflow == 3  # type: ignore[attr-defined]
