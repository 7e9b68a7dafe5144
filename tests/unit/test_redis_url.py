"""REDIS_URL and CELERY_BROKER_URL in the redis+sentinel:// form ([4.2]): parsed, refused
with the variable named, and spelled for redis-py and kombu."""

from __future__ import annotations

import pytest
import redis

from shared.infra.broker import SENTINEL_TRANSPORT, sender_settings
from shared.infra.config import ConfigError, load_settings
from shared.infra.redis_url import (
    BlockingSentinelPool,
    SentinelUrl,
    parse_sentinel_url,
    redis_client,
)
from shared.infra.runtime import Endpoints

THREE = "redis+sentinel://s1:26379,s2:26380,10.0.0.3:26381/mymaster/2"


@pytest.mark.parametrize(
    ("url", "parsed"),
    [
        (
            "redis+sentinel://sentinel:26379/mymaster/0",
            SentinelUrl(
                sentinels=(("sentinel", 26379),), master_name="mymaster", db=0, password=None
            ),
        ),
        (
            THREE,
            SentinelUrl(
                sentinels=(("s1", 26379), ("s2", 26380), ("10.0.0.3", 26381)),
                master_name="mymaster", db=2, password=None,
            ),
        ),
        (
            "redis+sentinel://:p%40ss/w,rd@s1:1,s2:2/cache/15",
            SentinelUrl(
                sentinels=(("s1", 1), ("s2", 2)), master_name="cache", db=15, password="p@ss/w,rd"
            ),
        ),
    ],
)  # fmt: skip
def test_the_sentinel_form_is_parsed_42(url: str, parsed: SentinelUrl) -> None:
    assert parse_sentinel_url(url) == parsed


@pytest.mark.parametrize("variable", ["REDIS_URL", "CELERY_BROKER_URL"])
def test_both_variables_take_the_sentinel_form_42(variable: str) -> None:
    settings = load_settings({variable: THREE})
    assert THREE in (settings.redis_url, settings.broker_url)


BAD = [
    "redis+sentinel://s1:26379/mymaster",  # no database
    "redis+sentinel://s1:26379/mymaster/",  # empty database
    "redis+sentinel://s1:26379//0",  # no master name
    "redis+sentinel://s1:26379",  # neither
    "redis+sentinel://s1:26379/mymaster/zero",  # database not a number
    "redis+sentinel://s1:26379/mymaster/0/extra",
    "redis+sentinel://s1/mymaster/0",  # no port
    "redis+sentinel://s1:26379,s2/mymaster/0",  # the second without a port
    "redis+sentinel://s1:99999/mymaster/0",  # no such port
    "redis+sentinel:///mymaster/0",  # no sentinel at all
    "redis+sentinel://user@s1:26379/mymaster/0",  # credentials are ':PASSWORD'
]


@pytest.mark.parametrize("variable", ["REDIS_URL", "CELERY_BROKER_URL"])
@pytest.mark.parametrize("value", BAD)
def test_a_bad_sentinel_url_is_refused_naming_its_variable_42(variable: str, value: str) -> None:
    with pytest.raises(ConfigError) as raised:
        load_settings({variable: value})
    message = str(raised.value)
    assert f"{variable}=" in message
    assert "MASTER_NAME/DB" in message  # the form it should have had


def test_other_brokers_are_still_accepted_42() -> None:
    settings = load_settings({"CELERY_BROKER_URL": "amqp://guest@rabbit//"})
    assert settings.broker_url == "amqp://guest@rabbit//"
    with pytest.raises(ConfigError, match="REDIS_URL"):
        load_settings({"REDIS_URL": "redis+cluster://h:7000/0"})


def test_the_broker_gets_kombus_sentinel_transport_42() -> None:
    url = "redis+sentinel://:pw@s1:26379,s2:26380/mymaster/3"
    settings = sender_settings(
        Endpoints(database_url="postgresql://h/db", redis_url=url, broker_url=url)
    )
    kombu_url = "sentinel://:pw@s1:26379/3;sentinel://:pw@s2:26380/3"
    # celery reads CELERY_BROKER_URL (our form) before broker_url: the read and write
    # URLs, which come first, must be kombu's too.
    assert (
        settings["broker_url"]
        == settings["broker_read_url"]
        == settings["broker_write_url"]
        == kombu_url
    )
    assert settings["broker_transport"] == SENTINEL_TRANSPORT
    assert settings["broker_transport_options"] == {"master_name": "mymaster"}


def test_the_worker_keeps_the_master_name_beside_its_own_options_42() -> None:
    from worker.app import make_celery

    url = "redis+sentinel://s1:26379/mymaster/0"
    endpoints = Endpoints(database_url="postgresql://h/db", redis_url=url, broker_url=url)
    app = make_celery(load_settings({}), endpoints=endpoints)
    options = app.conf.broker_transport_options
    assert options["master_name"] == "mymaster" and options["visibility_timeout"] > 0
    assert app.connection_for_read().transport_cls == SENTINEL_TRANSPORT


def test_a_sentinel_client_has_the_plain_clients_timeouts_and_pool_42() -> None:
    timeouts = {"socket_connect_timeout": 1, "socket_timeout": 2}
    plain = redis_client("redis://h:6379/0", max_connections=7, pool_wait_s=5, **timeouts)
    sentinel = redis_client(THREE, max_connections=7, pool_wait_s=5, **timeouts)
    assert isinstance(plain.connection_pool, redis.BlockingConnectionPool)
    assert isinstance(sentinel.connection_pool, BlockingSentinelPool)
    for client in (plain, sentinel):
        pool = client.connection_pool
        assert pool.max_connections == 7 and pool.timeout == 5  # type: ignore[attr-defined]
        assert {k: pool.connection_kwargs[k] for k in timeouts} == timeouts
    assert sentinel.connection_pool.connection_kwargs["db"] == 2


def test_beat_finds_its_lock_through_the_sentinels_too_42() -> None:
    from worker.beat import beat_settings

    url = "redis+sentinel://:s%40cret@10.0.0.1:26379,10.0.0.2:26380/primary/3"
    conf = beat_settings(Endpoints(database_url="", redis_url=url, broker_url=url))
    # redbeat's own spelling: its scheme, and the sentinels and primary in its options.
    assert conf["redbeat_redis_url"].startswith("redis-sentinel")
    options = conf["redbeat_redis_options"]
    assert options["sentinels"] == [("10.0.0.1", 26379), ("10.0.0.2", 26380)]
    assert (options["service_name"], options["db"], options["password"]) == ("primary", 3, "s@cret")
