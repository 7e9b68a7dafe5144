"""`make bench` flushes only its own Redis databases: empty ones, or those a bench marked;
a database holding anybody else's keys is refused and left as it was."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from bench.common import OWNER_KEY, flush_own
from shared.infra.embedded import start_redis


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Redis of this module's own: the databases below are flushed or filled at will."""
    embedded = start_redis(Path(tmp_path_factory.mktemp("bench-redis")))
    yield embedded.url.rsplit("/", 1)[0]
    embedded.stop()


def test_a_database_holding_keys_no_bench_wrote_is_refused_and_left_alone(server: str) -> None:
    someone = redis.Redis.from_url(f"{server}/3")
    someone.set("driftless:live:lease", "a running system's")
    with pytest.raises(SystemExit, match=r"Redis database 3 .*DRIFTLESS_BENCH_REDIS_DB"):
        flush_own(f"{server}/3")
    assert someone.keys() == [b"driftless:live:lease"]


def test_an_empty_database_becomes_the_benches_and_is_flushed_on_every_later_run(
    server: str,
) -> None:
    client = redis.Redis.from_url(f"{server}/4")
    flush_own(f"{server}/4")
    assert client.keys() == [OWNER_KEY.encode()]
    client.set("what a bench wrote", 1)
    flush_own(f"{server}/4")
    assert client.keys() == [OWNER_KEY.encode()]
