"""Per-process resources of the worker: the engine and session factory, made lazily.

Lazily, because prefork children must not inherit a parent's open connections.
"""

from __future__ import annotations

from functools import cached_property

import redis
from celery import Celery
from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

from shared.config import Settings
from shared.db.engine import make_engine, make_session_factory
from shared.db.uow import UnitOfWork
from shared.llm.base import LLM
from shared.llm.factory import make_llm
from shared.runtime import Endpoints
from shared.triggers.debounce import Debouncer


class WorkerContext:
    def __init__(self, settings: Settings, endpoints: Endpoints) -> None:
        self.settings = settings
        self.endpoints = endpoints

    @cached_property
    def engine(self) -> Engine:
        return make_engine(self.endpoints.database_url, pool_size=2, max_overflow=2)

    @cached_property
    def session_factory(self) -> sessionmaker[Session]:
        return make_session_factory(self.engine)

    @cached_property
    def redis(self) -> redis.Redis:
        return redis.Redis.from_url(self.endpoints.redis_url)

    @cached_property
    def llm(self) -> LLM:
        return make_llm(self.settings)

    @cached_property
    def debouncer(self) -> Debouncer:
        return Debouncer.from_settings(self.redis, self.settings)


def context_of(app: Celery) -> WorkerContext:
    context: WorkerContext = app.driftless
    return context


def unit_of_work(app: Celery) -> UnitOfWork:
    """A unit of work whose follow-up jobs go out through this same Celery app."""
    from worker.queue import CeleryJobQueue

    return UnitOfWork(context_of(app).session_factory, CeleryJobQueue(app))
