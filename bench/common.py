"""Set-up shared by the benchmarks: a fresh, migrated database and a Redis of their own."""

from __future__ import annotations

import argparse
import statistics
import uuid
from dataclasses import dataclass

import redis
from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

from shared.auth.service import create_api_key
from shared.db.engine import make_engine, make_session_factory
from shared.db.migrate import upgrade
from shared.db.uow import UnitOfWork
from shared.queue import RecordingQueue
from tests import services

BENCH_DATABASE = "driftless_bench"
BENCH_REDIS_DB = 11


@dataclass
class BenchEnv:
    database_url: str
    redis_url: str
    engine: Engine
    session_factory: sessionmaker[Session]
    redis: redis.Redis
    org_key: str

    def uow(self) -> UnitOfWork:
        return UnitOfWork(self.session_factory, RecordingQueue())


def arguments(description: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument(
        "--admin-database-url",
        default=None,
        help="PostgreSQL to create the bench database on (default: 127.0.0.1, else embedded)",
    )
    return parser


def bench_env(admin_url: str | None) -> BenchEnv:
    import os

    if admin_url:
        os.environ["TEST_DATABASE_URL"] = admin_url
    database_url = services.recreate_database(services.admin_database_url(), BENCH_DATABASE)
    upgrade(database_url)
    redis_url = f"{services.redis_base_url()}/{BENCH_REDIS_DB}"
    client = redis.Redis.from_url(redis_url)
    client.flushdb()
    engine = make_engine(database_url)
    factory = make_session_factory(engine)
    with UnitOfWork(factory, RecordingQueue()) as uow:
        key = create_api_key(uow=uow, org_name=f"bench-{uuid.uuid4().hex[:8]}")
        uow.commit()
    return BenchEnv(database_url, redis_url, engine, factory, client, key)


def percentile(samples: list[float], share: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


def describe(samples_ms: list[float]) -> str:
    return (
        f"p50 {percentile(samples_ms, 0.5):7.2f} ms   p95 {percentile(samples_ms, 0.95):7.2f} ms"
        f"   mean {statistics.fmean(samples_ms):7.2f} ms   n={len(samples_ms)}"
    )
