"""The embedded servers are real: PostgreSQL and Redis that answer their own protocols,
stopped only by the process that owns them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import psycopg2
import redis

from shared.infra.embedded import start_postgres, start_redis
from tests.embedded import EmbeddedServers
from tests.helpers import wait_for


def test_embedded_redis_starts_once_and_is_reused(tmp_path: Path) -> None:
    first = start_redis(tmp_path, stop_with_caller=True)
    try:
        client = redis.Redis.from_url(first.url)
        client.set("k", "v")
        again = start_redis(tmp_path)
        assert again.url == first.url
        assert redis.Redis.from_url(again.url).get("k") == b"v"
        assert client.eval("return redis.call('TIME')[1] ~= nil", 0) == 1  # Lua works
    finally:
        first.stop()


def test_embedded_postgres_serves_sql(tmp_path: Path) -> None:
    server = start_postgres(tmp_path, stop_with_caller=True)
    try:
        connection = psycopg2.connect(server.url)
        with connection.cursor() as cursor:
            cursor.execute("SELECT current_setting('server_version_num')::int")
            row = cursor.fetchone()
        connection.close()
        assert row is not None and row[0] >= 150000
    finally:
        server.stop()


def _redis_answers(url: str) -> bool:
    try:
        return bool(redis.Redis.from_url(url, socket_timeout=1).ping())
    except redis.RedisError:
        return False


def _sql_answers(url: str) -> bool:
    try:
        psycopg2.connect(url, connect_timeout=2).close()
    except psycopg2.OperationalError:
        return False
    return True


def test_a_joiner_stops_nothing_and_the_owner_stops_both_servers_43(tmp_path: Path) -> None:
    redis_owner = start_redis(tmp_path, stop_with_caller=True)
    postgres_owner = start_postgres(tmp_path, stop_with_caller=True)
    try:
        # Another `driftless up` (the one `driftless demo` starts) on the same home.
        redis_joiner = start_redis(tmp_path, stop_with_caller=True)
        postgres_joiner = start_postgres(tmp_path, stop_with_caller=True)
        assert redis_joiner.owner is None and postgres_joiner.owner is None
        redis_joiner.stop()
        postgres_joiner.stop()
        assert _redis_answers(redis_owner.url)
        assert _sql_answers(postgres_owner.url)
    finally:
        redis_owner.stop()
        postgres_owner.stop()
    wait_for(lambda: not _redis_answers(redis_owner.url), what="the owner's Redis to stop")
    assert not _sql_answers(postgres_owner.url)


OWN_AND_DIE = """
import os, sys
from pathlib import Path
from shared.infra.embedded import start_postgres, start_redis
from tests.embedded import EmbeddedServers
from tests.helpers import wait_for
start_redis(Path(sys.argv[1]), stop_with_caller=True)
start_postgres(Path(sys.argv[1]), stop_with_caller=True)
os._exit(0)  # as a kill -9: no exit hook, no stop
"""


def test_servers_whose_owner_died_are_taken_over_and_stopped_43(tmp_path: Path) -> None:
    subprocess.run([sys.executable, "-c", OWN_AND_DIE, str(tmp_path)], check=True, timeout=120)
    redis_server = start_redis(tmp_path, stop_with_caller=True)
    postgres = start_postgres(tmp_path, stop_with_caller=True)
    try:
        assert redis_server.owner is not None and postgres.owner is not None
    finally:
        redis_server.stop()
        postgres.stop()
    wait_for(lambda: not _redis_answers(redis_server.url), what="the taken-over Redis to stop")
    assert not _sql_answers(postgres.url)


def test_make_clean_stops_a_left_over_postgres_and_redis_43(tmp_path: Path) -> None:
    # What a run left running (a `driftless` command started them, or a killed `up`).
    home = tmp_path / ".driftless"
    redis_server, postgres = start_redis(home), start_postgres(home)
    servers = EmbeddedServers.of(home)
    makefile = Path(__file__).resolve().parents[3] / "Makefile"
    try:
        subprocess.run(
            ["make", "--no-print-directory", "-f", str(makefile), "-C", str(tmp_path), "clean"],
            check=True, capture_output=True, timeout=120,
        )  # fmt: skip
        assert not home.exists()
        assert not _sql_answers(postgres.url)
        wait_for(lambda: not _redis_answers(redis_server.url), what="make clean to stop Redis")
        assert len(servers.processes) == 2 and servers.running() == []
    finally:
        servers.stop()
