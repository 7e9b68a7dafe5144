"""A gevent worker's hundreds of tasks share a few database connections and wait for one,
and its LLM client keeps a connection for every call it may have in flight."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest
from celery import Celery
from celery.concurrency import get_implementation

from shared.bootstrap import Runtime
from shared.infra.broker import CONSUMER_POLLS
from shared.infra.config import Settings
from shared.infra.db.engine import POOL_TIMEOUT_S
from shared.infra.runtime import Endpoints
from shared.llm.openai_provider import connection_limits
from worker.app import LLM_TASK_TIME_LIMIT_S, make_celery
from worker.context import pool_name, size_engine_for_worker, size_for_worker

ENDPOINTS = Endpoints(
    database_url="postgresql://postgres@127.0.0.1:5432/x",
    redis_url="redis://127.0.0.1:6379/0",
    broker_url="redis://127.0.0.1:6379/1",
)


def _worker_app() -> Celery:
    """The worker's Celery app on ENDPOINTS (nothing connects until a task or a poll)."""
    return make_celery(
        Settings(
            database_url=ENDPOINTS.database_url,
            redis_url=ENDPOINTS.redis_url,
            broker_url=ENDPOINTS.broker_url,
        ),
        endpoints=ENDPOINTS,
    )


def test_the_gevent_pool_is_named_by_alias_or_class() -> None:
    assert pool_name("gevent") == pool_name(get_implementation("gevent")) == "gevent"


@pytest.mark.parametrize(
    ("concurrency", "connections"),
    [
        (256, 16),  # a connection per 16 greenlets: tasks hold one only between LLM calls
        (128, 8),
        (16, 5),  # never below DRIFTLESS_DB_POOL_SIZE
    ],
)
def test_a_gevent_worker_gets_a_connection_per_16_greenlets_and_waits_for_one(
    concurrency: int, connections: int
) -> None:
    runtime = Runtime(Settings(db_pool_size=5, db_max_overflow=3), endpoints=ENDPOINTS)
    size_for_worker(
        runtime, pool="gevent", concurrency=concurrency, time_limit_s=LLM_TASK_TIME_LIMIT_S
    )
    assert runtime.tasks_per_process == concurrency
    assert runtime.engine.pool.size() == connections  # type: ignore[attr-defined]
    assert runtime.engine.pool._max_overflow == 3  # type: ignore[attr-defined]
    # A task waits for a connection as long as it may run, rather than fail and retry.
    assert runtime.engine.pool._timeout == LLM_TASK_TIME_LIMIT_S  # type: ignore[attr-defined]


def test_a_threads_worker_keeps_failing_fast_on_an_exhausted_pool() -> None:
    runtime = Runtime(Settings(db_pool_size=5, db_max_overflow=3), endpoints=ENDPOINTS)
    size_for_worker(runtime, pool="threads", concurrency=16, time_limit_s=LLM_TASK_TIME_LIMIT_S)
    assert runtime.engine.pool.size() == 16  # type: ignore[attr-defined]
    assert runtime.engine.pool._timeout == POOL_TIMEOUT_S  # type: ignore[attr-defined]


@pytest.mark.parametrize("calls", [1, 128, 256, 2000])
def test_the_llm_client_keeps_a_connection_for_every_call_in_flight(calls: int) -> None:
    limits = connection_limits(calls)
    assert limits.max_connections is not None and limits.max_connections >= calls
    # Never below the openai client's own defaults (1000, 100 kept alive).
    assert limits.max_keepalive_connections == max(calls, 100)


def test_a_green_worker_lets_every_task_ack_at_once() -> None:
    # kombu's Redis channel holds 10 connections and fails the 11th: a green worker's
    # tasks, acking together, would lose their acks. (eventlet: sized as gevent, without
    # patching this test process's psycopg2.)
    app = _worker_app()
    worker = SimpleNamespace(app=app, concurrency=256, pool_cls="eventlet")
    size_engine_for_worker(sender=worker)
    options = app.conf.broker_transport_options
    assert options["max_connections"] == 256
    assert options["visibility_timeout"] == 4 * LLM_TASK_TIME_LIMIT_S  # kept
    assert app.driftless.tasks_per_process == 256


@pytest.mark.parametrize("pool", ["gevent", "threads", "prefork"])
def test_only_a_worker_marks_its_broker_connections_as_a_consumers(pool: str) -> None:
    """Its polls get capped (shared/infra/broker.py); an app that merely sends or inspects keeps
    kombu's, whose timeout may mean "collect replies this long"."""
    app = _worker_app()
    assert CONSUMER_POLLS not in app.conf.broker_transport_options

    worker = SimpleNamespace(app=app, concurrency=4, pool_cls=pool)
    size_engine_for_worker(sender=worker)

    assert app.conf.broker_transport_options[CONSUMER_POLLS] is True


def test_every_task_of_a_green_worker_shares_one_result_backend() -> None:
    """Under gevent a thread-local is greenlet-local: without the setting, each task's
    greenlet built a backend of its own (2 % of the worker's CPU)."""
    app = _worker_app()
    backends: list[object] = []
    thread = threading.Thread(target=lambda: backends.append(app.backend))
    thread.start()
    thread.join()
    assert backends == [app.backend]
