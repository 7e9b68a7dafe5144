"""Resolving the URLs a process connects to, starting embedded servers where none is given."""

from __future__ import annotations

from dataclasses import dataclass

from shared.infra.config import Settings


@dataclass(frozen=True)
class Endpoints:
    database_url: str
    redis_url: str
    broker_url: str


def database_url_of(settings: Settings) -> str:
    """The configured database URL, or the embedded server's (started if need be)."""
    if settings.database_url is not None:
        return settings.database_url
    from shared.infra.embedded import start_postgres

    return start_postgres(settings.home).url


def redis_url_of(settings: Settings) -> str:
    """The configured Redis URL, or the embedded server's (started if need be)."""
    if settings.redis_url is not None:
        return settings.redis_url
    from shared.infra.embedded import start_redis

    return start_redis(settings.home).url


def resolve_endpoints(settings: Settings) -> Endpoints:
    """The concrete URLs: the configured ones, or those of the embedded servers."""
    redis_url = redis_url_of(settings)
    return Endpoints(
        database_url=database_url_of(settings),
        redis_url=redis_url,
        broker_url=settings.broker_url or redis_url,
    )
