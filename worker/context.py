"""Per-process resources of the worker: the engine and session factory, made lazily.

Lazily, because prefork children must not inherit a parent's open connections.
"""

from __future__ import annotations

from functools import cached_property
from typing import Any

import redis
from celery import Celery
from celery.signals import worker_init
from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

from shared.config import Settings
from shared.db.engine import bound_transactions, make_engine, make_session_factory
from shared.db.uow import UnitOfWork
from shared.llm.base import LLM
from shared.llm.factory import make_llm
from shared.runtime import Endpoints
from shared.triggers.debounce import Debouncer

# Pools whose tasks run side by side in one process, sharing its engine.
THREADED_POOLS = frozenset({"threads", "gevent", "eventlet"})
# A worker transaction waits this long for a row lock, and runs a statement this long,
# before it fails (and its task retries). Writers hold locks for milliseconds.
LOCK_TIMEOUT_S = 30.0
STATEMENT_TIMEOUT_S = 60.0


class WorkerContext:
    def __init__(self, settings: Settings, endpoints: Endpoints) -> None:
        self.settings = settings
        self.endpoints = endpoints
        # How many tasks of this process may hold a connection at once; set at worker
        # start (`size_for_worker`). A prefork child or a solo worker runs one at a time.
        self.tasks_per_process = 1

    def size_for_worker(self, *, pool: str, concurrency: int) -> None:
        """Remember how many tasks share this process's engine (called at worker start)."""
        if pool in THREADED_POOLS:
            self.tasks_per_process = concurrency

    @property
    def pool_size(self) -> int:
        # Each task holds at most one connection at a time (its unit of work; never during
        # the LLM call), so a threads pool of N needs N: fewer would make tasks queue for a
        # connection and, past pool_timeout, fail.
        return max(self.settings.db_pool_size, self.tasks_per_process)

    @cached_property
    def engine(self) -> Engine:
        engine = make_engine(
            self.endpoints.database_url,
            pool_size=self.pool_size,
            max_overflow=self.settings.db_max_overflow,
        )
        # The threads pool enforces no Celery time limit: a task blocked on a row lock or
        # a runaway statement would hold its thread for good. It fails and retries instead.
        bound_transactions(
            engine, lock_timeout_s=LOCK_TIMEOUT_S, statement_timeout_s=STATEMENT_TIMEOUT_S
        )
        return engine

    @cached_property
    def session_factory(self) -> sessionmaker[Session]:
        return make_session_factory(self.engine)

    @cached_property
    def redis(self) -> redis.Redis:
        return redis.Redis.from_url(self.endpoints.redis_url)

    @cached_property
    def llm(self) -> LLM:
        # The rate limit's bucket lives in the same Redis as the debounce state.
        return make_llm(self.settings, redis_client=self.redis)

    @cached_property
    def debouncer(self) -> Debouncer:
        return Debouncer.from_settings(self.redis, self.settings)


def pool_name(pool_cls: Any) -> str:
    """`threads`, `prefork`, … from a pool given by alias (`-P threads`) or by class."""
    if isinstance(pool_cls, str):
        return {"thread": "threads", "processes": "prefork"}.get(pool_cls, pool_cls)
    module = str(getattr(pool_cls, "__module__", "")).rsplit(".", 1)[-1]
    return {"thread": "threads"}.get(module, module)


@worker_init.connect
def _size_engine_for_worker(sender: Any = None, **_: Any) -> None:
    """Size the engine from the worker's pool and concurrency, before any task runs."""
    context = getattr(getattr(sender, "app", None), "driftless", None)
    concurrency = getattr(sender, "concurrency", None)
    if isinstance(context, WorkerContext) and isinstance(concurrency, int):
        context.size_for_worker(pool=pool_name(sender.pool_cls), concurrency=concurrency)


def context_of(app: Celery) -> WorkerContext:
    context: WorkerContext = app.driftless
    return context


def unit_of_work(app: Celery) -> UnitOfWork:
    """A unit of work whose follow-up jobs go out through this same Celery app."""
    from worker.queue import CeleryJobQueue

    return UnitOfWork(context_of(app).session_factory, CeleryJobQueue(app))
