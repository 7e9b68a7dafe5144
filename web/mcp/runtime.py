"""What the MCP server needs from the process: database sessions, the job queue, Redis."""

from __future__ import annotations

from dataclasses import dataclass

import redis
from sqlalchemy.orm import Session, sessionmaker

from shared.config import Settings
from shared.db.engine import make_engine, make_session_factory
from shared.db.uow import UnitOfWork
from shared.limits import Limits
from shared.queue import JobQueue
from shared.runtime import resolve_endpoints
from worker.app import make_celery
from worker.queue import CeleryJobQueue


@dataclass(frozen=True)
class McpRuntime:
    settings: Settings
    session_factory: sessionmaker[Session]
    queue: JobQueue
    redis: redis.Redis

    def unit_of_work(self) -> UnitOfWork:
        return UnitOfWork(
            self.session_factory, self.queue, Limits(max_json_depth=self.settings.max_json_depth)
        )


def runtime_from_settings(settings: Settings) -> McpRuntime:
    """The same PostgreSQL, Redis and Celery broker as the web app, so jobs reach the workers."""
    endpoints = resolve_endpoints(settings)
    engine = make_engine(
        endpoints.database_url,
        pool_size=settings.db_pool_size,
        max_overflow=settings.db_max_overflow,
    )
    return McpRuntime(
        settings=settings,
        session_factory=make_session_factory(engine),
        queue=CeleryJobQueue(make_celery(settings, endpoints=endpoints)),
        # Short timeouts, as in the web app: a Redis outage must fail a call, not hang it.
        redis=redis.Redis.from_url(endpoints.redis_url, socket_connect_timeout=1, socket_timeout=2),
    )
