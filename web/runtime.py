"""What a request needs from the process: database sessions, the job queue, Redis."""

from __future__ import annotations

from dataclasses import dataclass

import redis
from flask import current_app
from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

from shared.config import Settings
from shared.db.uow import UnitOfWork
from shared.limits import Limits
from shared.queue import JobQueue
from shared.triggers.debounce import Debouncer


@dataclass
class WebRuntime:
    settings: Settings
    engine: Engine
    session_factory: sessionmaker[Session]
    queue: JobQueue
    redis: redis.Redis
    redis_url: str
    debouncer: Debouncer
    limits: Limits


def runtime() -> WebRuntime:
    rt: WebRuntime = current_app.extensions["driftless"]
    return rt


def unit_of_work() -> UnitOfWork:
    rt = runtime()
    return UnitOfWork(rt.session_factory, rt.queue, rt.limits)
