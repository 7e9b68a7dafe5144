"""Engine and session factory from a database URL."""

from __future__ import annotations

from sqlalchemy import Engine, create_engine
from sqlalchemy.orm import Session, sessionmaker


def sqlalchemy_url(database_url: str) -> str:
    """Pin the driver: `postgres://` and `postgresql://` both mean psycopg2 here."""
    for prefix in ("postgres://", "postgresql://"):
        if database_url.startswith(prefix):
            return "postgresql+psycopg2://" + database_url[len(prefix) :]
    return database_url


def make_engine(database_url: str, *, pool_size: int = 5, max_overflow: int = 5) -> Engine:
    # pool_pre_ping: a web or worker process outlives PostgreSQL restarts and failovers.
    return create_engine(
        sqlalchemy_url(database_url),
        pool_size=pool_size,
        max_overflow=max_overflow,
        pool_pre_ping=True,
        future=True,
    )


def make_session_factory(engine: Engine) -> sessionmaker[Session]:
    # expire_on_commit=False: services return ORM objects that views serialize after commit.
    return sessionmaker(bind=engine, expire_on_commit=False)
