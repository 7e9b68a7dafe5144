"""The broker as every process sees it: the Celery settings of a driftless sender, and
kombu's Redis transport, made to outlive a broker restart with a job in flight.

`sender_settings` is what the web's producer and the worker's app share (routing by task
name, serialization, how a send fails fast), so the two stay in step without importing
each other. Plain data: the domain still never imports Celery.

On the transport:

When the worker loses Redis, celery (5.7) detaches the channel's transport and then
closes the connection; closing restores the unacknowledged late-ack jobs through that
channel, and the running job's ack later goes through it too. kombu's Redis channel
then fails with an AttributeError (`transport.client` is None), which nothing expects,
and the worker exits. A connection error is what every caller on that path already
ignores or logs, so that is what a detached channel raises instead. The jobs are not
lost either way: a restarted Redis holds none, and the reconciler re-enqueues the work
PostgreSQL shows as missing.

A redis+sentinel:// broker URL (shared/infra/redis_url.py) goes to the same transport
over kombu's Sentinel channel, which asks the sentinels for the primary at each connect:
after a failover, celery's reconnect finds the promoted replica.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from kombu import Exchange, Queue
from kombu.transport import redis as kombu_redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from shared.infra.queue import FAST_QUEUE, QUEUES, TASK_ROUTES
from shared.infra.redis_url import SENTINEL_SCHEME, is_sentinel, kombu_sentinel
from shared.infra.runtime import Endpoints

# celery's broker_transport for redis:// and rediss:// broker URLs.
TRANSPORT = "shared.infra.broker:Transport"
# ...and for redis+sentinel:// ones.
SENTINEL_TRANSPORT = "shared.infra.broker:SentinelTransport"
REDIS_SCHEMES = ("redis://", "rediss://", SENTINEL_SCHEME)
# A transport option a worker sets on its own connections (worker/context.py): its
# consumer loop polls through `drain_events`, so the Transport caps those polls. Nowhere
# else: there a poll's timeout may mean "collect replies this long" (`celery inspect`).
CONSUMER_POLLS = "driftless_consumer_polls"
# How often a consumer with every prefetch slot taken looks for a freed one (Transport).
FULL_POLL_S = 0.02
# The longest poll of a consumer without an event loop otherwise; an outstanding BRPOP
# stays in flight across polls, so a shorter poll costs a wake-up, not a round trip.
IDLE_POLL_S = 0.25


def sender_settings(endpoints: Endpoints) -> dict[str, Any]:
    """Celery settings of any app that sends driftless jobs (the worker adds its own)."""
    return {
        **_broker(endpoints.broker_url),
        # Each queue gets its own exchange and key. Left implicit, both queues bind to the
        # default exchange with the same key; an AMQP broker (CELERY_BROKER_URL may be
        # RabbitMQ) would then copy a job routed by that key into both.
        "task_queues": [Queue(name, Exchange(name), routing_key=name) for name in QUEUES],
        "task_default_queue": FAST_QUEUE,
        "task_routes": TASK_ROUTES,
        "task_serializer": "json",
        "accept_content": ["json"],
        "broker_connection_retry_on_startup": True,
        # Fail fast when the broker is down: the web's send must not hang a request.
        "broker_connection_timeout": 2,
        "task_publish_retry_policy": {
            "max_retries": 2,
            "interval_start": 0.1,
            "interval_step": 0.2,
        },
    }


def _broker(url: str) -> dict[str, Any]:
    # Redis brokers get a transport that survives a Redis restart mid-job (below).
    if is_sentinel(url):
        kombu_url, options = kombu_sentinel(url)
        # celery prefers the CELERY_BROKER_URL variable to broker_url, and the variable
        # holds our form, not kombu's; the read and write URLs come before either.
        return {
            "broker_url": kombu_url,
            "broker_read_url": kombu_url,
            "broker_write_url": kombu_url,
            "broker_transport": SENTINEL_TRANSPORT,
            "broker_transport_options": options,
        }
    return {
        "broker_url": url,
        "broker_transport": TRANSPORT if url.startswith(REDIS_SCHEMES) else None,
    }


class QoS(kombu_redis.QoS):
    """kombu's bookkeeping of a channel's unacknowledged jobs, which notices a lost broker.

    An ack (or reject) that fails on a connection error leaves its job among the
    delivered ones, so the consumer's prefetch slot is never freed. Once every slot is
    lost that way (every task that was running when Redis went away), the consumer
    stops reading and so never touches the dead connection again: the worker stayed up
    and idle for good (the fault suite's Redis restart, one run in three). A failed ack
    therefore marks the channel's broker lost; the Transport's next poll raises the
    connection error, and celery reconnects with a new channel and free slots. The job
    whose ack failed is redelivered after the visibility timeout, or was lost with a
    restarted Redis and is found by the reconciler; every task is idempotent.
    """

    def ack(self, delivery_tag: Any) -> None:
        with self._marking_the_broker_lost():
            super().ack(delivery_tag)

    def reject(self, delivery_tag: Any, requeue: bool = False) -> None:
        with self._marking_the_broker_lost():
            super().reject(delivery_tag, requeue=requeue)

    @contextmanager
    def _marking_the_broker_lost(self) -> Iterator[None]:
        try:
            yield
        except (RedisConnectionError, RedisTimeoutError):
            self.channel.broker_lost = True
            raise


class Channel(kombu_redis.Channel):
    QoS = QoS
    # Set by QoS when an ack failed on a connection error; read by Transport.
    broker_lost = False
    # The redis-py client the channel's acks and reservations share (below).
    _shared_client: Any = None

    def _connparams(self, asynchronous: bool = False) -> Any:
        if self.connection.client is None:
            raise RedisConnectionError("the broker connection of this channel is gone")
        return super()._connparams(asynchronous=asynchronous)

    def _create_client(self, asynchronous: bool = False) -> Any:
        # kombu builds a new redis-py client for every ack and every reservation (QoS);
        # building one costs more than the pipeline it then sends: 3 % of a gevent
        # worker's CPU (py-spy). A client over a pool is safe to share among threads and
        # greenlets (each command checks a connection out of the pool), so one serves
        # until the channel replaces its pool (after a reconnect).
        if asynchronous:
            return super()._create_client(asynchronous=True)
        client = self._shared_client
        if client is None or client.connection_pool is not self.pool:
            client = self._shared_client = super()._create_client()
        return client


class Transport(kombu_redis.Transport):
    Channel = Channel

    def drain_events(self, connection: Any, timeout: float | None = None, **kwargs: Any) -> Any:
        if self._broker_lost():
            raise RedisConnectionError("an ack failed: the broker connection was lost")
        # A consumer whose prefetch slots are all taken stops reading the queue until an
        # ack frees one. Without an event loop (the gevent and threads pools: celery's
        # synloop) nothing tells it when that happens: it waits out its whole poll (1-2
        # s) while tasks finish and slots stand empty. A worker whose tasks each wait 1 s
        # on the LLM then ran a third of its slots. So look again soon while full.
        # The synloop also notices a shutdown only between polls: a 2 s poll kept an idle
        # worker up to 2 s past its SIGTERM (deploys, `driftless up`'s Ctrl-C).
        if timeout is not None and self._polls_for_a_consumer():
            timeout = min(timeout, FULL_POLL_S if self._every_slot_taken() else IDLE_POLL_S)
        return super().drain_events(connection, timeout=timeout, **kwargs)

    def _broker_lost(self) -> bool:
        channels: list[Any] = self.channels or []
        return any(channel.broker_lost for channel in channels)

    def _polls_for_a_consumer(self) -> bool:
        options: dict[str, Any] = getattr(self.client, "transport_options", None) or {}
        return bool(options.get(CONSUMER_POLLS))

    def _every_slot_taken(self) -> bool:
        channels: list[Any] = self.channels or []
        return any(channel.active_queues and not channel.qos.can_consume() for channel in channels)


class SentinelChannel(Channel, kombu_redis.SentinelChannel):
    """Channel's behaviour (above) over the connection pool of the primary Sentinel names."""


class SentinelTransport(Transport):
    Channel = SentinelChannel
    default_port = kombu_redis.SentinelTransport.default_port  # type: ignore[assignment]
