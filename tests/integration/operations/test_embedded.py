"""The embedded servers are real: PostgreSQL and Redis that answer their own protocols."""

from __future__ import annotations

from pathlib import Path

import psycopg2
import redis

from shared.infra.embedded import start_postgres, start_redis


def test_embedded_redis_starts_once_and_is_reused(tmp_path: Path) -> None:
    first = start_redis(tmp_path)
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
