"""Where the test run finds PostgreSQL and Redis: the machine's servers, else embedded ones.

TEST_DATABASE_URL / TEST_REDIS_URL override. The suite creates and migrates its own
database (never touching others) and uses Redis database numbers of its own; two runs
side by side pick different ones with DRIFTLESS_TEST_DATABASE and DRIFTLESS_TEST_REDIS_DB.
DRIFTLESS_TEST_REDIS_DB=N takes N and the three below it: the broker N-1, the routing
test's broker N-2, `driftless up`'s broker N-3 (docs/testing.md).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import psycopg2
import redis
from cryptography.fernet import Fernet
from psycopg2 import sql
from sqlalchemy.engine import make_url

DEFAULT_ADMIN_DATABASE_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379"
TEST_DATABASE = os.environ.get("DRIFTLESS_TEST_DATABASE", "driftless_test")
DATA_REDIS_DB = int(os.environ.get("DRIFTLESS_TEST_REDIS_DB", "15"))
BROKER_REDIS_DB = DATA_REDIS_DB - 1
# The run's key for stored secrets (DRIFTLESS_SECRET_KEYS): without one, storing a
# webhook secret or an org's model key is refused. The settings of every test, and the
# environment of every process a test starts, carry it.
SEALING_KEY = Fernet.generate_key().decode()


def _postgres_answers(url: str) -> bool:
    try:
        psycopg2.connect(url, connect_timeout=2).close()
        return True
    except psycopg2.OperationalError:
        return False


def _redis_answers(url: str) -> bool:
    try:
        return bool(redis.Redis.from_url(url, socket_timeout=1).ping())
    except redis.RedisError:
        return False


def _embedded_home() -> Path:
    home = Path(tempfile.gettempdir()) / "driftless-test-servers"
    home.mkdir(exist_ok=True)
    return home


def admin_database_url() -> str:
    url = os.environ.get("TEST_DATABASE_URL", DEFAULT_ADMIN_DATABASE_URL)
    if _postgres_answers(url):
        return url
    from shared.infra.embedded import start_postgres

    return start_postgres(_embedded_home()).url


def redis_base_url() -> str:
    url = os.environ.get("TEST_REDIS_URL", DEFAULT_REDIS_URL)
    if _redis_answers(url):
        return url.rstrip("/")
    from shared.infra.embedded import start_redis

    return start_redis(_embedded_home()).url.rsplit("/", 1)[0]


def recreate_database(admin_url: str, name: str) -> str:
    """Drop and create database `name` on the admin URL's server; returns its URL."""
    _as_admin(admin_url, _DROP.format(sql.Identifier(name)), _CREATE.format(sql.Identifier(name)))
    return make_url(admin_url).set(database=name).render_as_string(hide_password=False)


def drop_database(admin_url: str, name: str) -> None:
    """Drop database `name`, whoever is still connected to it."""
    _as_admin(admin_url, _DROP.format(sql.Identifier(name)))


_DROP = sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)")
_CREATE = sql.SQL("CREATE DATABASE {}")


def _as_admin(admin_url: str, *statements: sql.Composable) -> None:
    connection = psycopg2.connect(admin_url)
    connection.autocommit = True  # CREATE and DROP DATABASE refuse a transaction
    try:
        with connection.cursor() as cursor:
            for statement in statements:
                cursor.execute(statement)
    finally:
        connection.close()
