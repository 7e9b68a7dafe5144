"""Resolving the URLs a process connects to, starting embedded servers where none is given,
and the keys that seal its stored secrets."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from shared.infra.config import Settings
from shared.infra.sealing import DEPRECATED_VARIABLE, VARIABLE

log = logging.getLogger(__name__)


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


def sealing_keys_of(settings: Settings) -> str | None:
    """The keys that seal stored secrets: DRIFTLESS_SECRET_KEYS, else the deprecated
    DRIFTLESS_WEBHOOK_KEYS, else, on the embedded database, the dev key kept beside it
    (what `make run` sealed yesterday still opens); None: storing a secret is refused."""
    if settings.secret_keys is not None:
        if settings.webhook_keys is not None:
            log.warning(
                "%s and %s are both set: %s seals and opens, %s is ignored; remove it",
                VARIABLE, DEPRECATED_VARIABLE, VARIABLE, DEPRECATED_VARIABLE,
            )  # fmt: skip
        return settings.secret_keys
    if settings.webhook_keys is not None:
        log.warning("%s is deprecated: rename it %s (the same keys)", DEPRECATED_VARIABLE, VARIABLE)
        return settings.webhook_keys
    if settings.database_url is None:
        from shared.infra.embedded import dev_secret_key

        return dev_secret_key(settings.home)
    return None
