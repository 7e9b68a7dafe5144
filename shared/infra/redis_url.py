"""Redis URLs, plain or through Sentinel, and the one place their clients are built.

`REDIS_URL` and `CELERY_BROKER_URL` take redis://, rediss:// and unix:// URLs, or, for a
primary that Sentinel fails over, one form of our own (docs/contract.md, "Environment"):

    redis+sentinel://[:PASSWORD@]HOST:PORT[,HOST:PORT...]/MASTER_NAME/DB

Each HOST:PORT is a sentinel; MASTER_NAME is the primary's name in their configuration;
PASSWORD is the primary's (and its replicas'), not the sentinels'. redis-py and kombu each
spell this differently, so both are derived here from the one form.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, unquote

import redis
from redis.sentinel import Sentinel, SentinelConnectionPool

SENTINEL_SCHEME = "redis+sentinel://"
PLAIN_SCHEMES = ("redis://", "rediss://", "unix://")
SENTINEL_FORM = "redis+sentinel://[:PASSWORD@]HOST:PORT[,HOST:PORT...]/MASTER_NAME/DB"


@dataclass(frozen=True)
class SentinelUrl:
    sentinels: tuple[tuple[str, int], ...]
    master_name: str
    db: int
    password: str | None


def is_sentinel(url: str) -> bool:
    return url.startswith(SENTINEL_SCHEME)


def parse_sentinel_url(url: str) -> SentinelUrl:
    """The parts of a redis+sentinel:// URL; ValueError naming what is wrong."""
    if not is_sentinel(url):
        raise ValueError(f"must start with {SENTINEL_SCHEME}")
    rest = url.removeprefix(SENTINEL_SCHEME)
    # The password may hold '/' or ',' (percent-encoded or not): it ends at the last '@'.
    credentials, at, rest = rest.rpartition("@")
    password = None
    if at:
        if not credentials.startswith(":") or len(credentials) < 2:
            raise ValueError(f"the credentials must be ':PASSWORD' ({SENTINEL_FORM})")
        password = unquote(credentials[1:])
    hosts, _, path = rest.partition("/")
    parts = path.split("/")
    if len(parts) != 2 or not parts[0] or not parts[1]:
        raise ValueError(f"must name the master and the database ({SENTINEL_FORM})")
    master_name, db = parts
    if not db.isdigit():
        raise ValueError(f"the database must be a number, not {db!r} ({SENTINEL_FORM})")
    return SentinelUrl(
        sentinels=tuple(_sentinel(host) for host in hosts.split(",")),
        master_name=unquote(master_name),
        db=int(db),
        password=password,
    )


def _sentinel(address: str) -> tuple[str, int]:
    host, colon, port = address.rpartition(":")
    if not colon or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"each sentinel must be HOST:PORT, not {address!r} ({SENTINEL_FORM})")
    return host.strip("[]"), int(port)


def check_redis_url(url: str) -> None:
    """ValueError unless `url` is a Redis URL we connect to (plain or through Sentinel)."""
    if is_sentinel(url):
        parse_sentinel_url(url)
    elif not url.startswith(PLAIN_SCHEMES):
        raise ValueError(f"must be a redis://, rediss://, unix:// or {SENTINEL_FORM} URL")


class BlockingSentinelPool(SentinelConnectionPool, redis.BlockingConnectionPool):
    """Sentinel's pool (connections follow the primary) that waits for a free connection
    when all are busy, as the plain clients' BlockingConnectionPool does."""


def redis_client(
    url: str, *, max_connections: int | None = None, pool_wait_s: float | None = None,
    **options: Any,
) -> redis.Redis:  # fmt: skip
    """A client of the Redis at `url`, plain or the primary Sentinel names (followed
    across a failover). `options` are redis-py's connection options (socket timeouts,
    keepalive, client name), the same for both; with `max_connections`, a caller waits
    up to `pool_wait_s` for a connection when all are busy instead of failing at once."""
    blocking = max_connections is not None
    if blocking:
        options = {**options, "max_connections": max_connections, "timeout": pool_wait_s}
    if not is_sentinel(url):
        if not blocking:
            return redis.Redis.from_url(url, **options)
        return redis.Redis.from_pool(redis.BlockingConnectionPool.from_url(url, **options))
    parsed = parse_sentinel_url(url)
    # The sentinels are asked with the same socket timeouts (and no password).
    asking = {key: value for key, value in options.items() if key.startswith("socket_")}
    sentinel = Sentinel(list(parsed.sentinels), sentinel_kwargs=asking)  # type: ignore[no-untyped-call,unused-ignore]
    pool_class = BlockingSentinelPool if blocking else SentinelConnectionPool
    client: redis.Redis = sentinel.master_for(  # type: ignore[no-untyped-call,unused-ignore]
        parsed.master_name, connection_pool_class=pool_class, db=parsed.db,
        password=parsed.password, **options,
    )  # fmt: skip
    return client


def kombu_sentinel(url: str) -> tuple[str, dict[str, Any]]:
    """kombu's spelling of a redis+sentinel:// URL: its Sentinel transport's URL (one
    `sentinel://` URL per sentinel, `;`-separated) and the transport options it needs."""
    parsed = parse_sentinel_url(url)
    auth = f":{quote(parsed.password, safe='')}@" if parsed.password is not None else ""
    urls = [f"sentinel://{auth}{host}:{port}/{parsed.db}" for host, port in parsed.sentinels]
    return ";".join(urls), {"master_name": parsed.master_name}
