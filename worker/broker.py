"""kombu's Redis transport, made to outlive a broker restart with a job in flight.

When the worker loses Redis, celery (5.7) detaches the channel's transport and then
closes the connection; closing restores the unacknowledged late-ack jobs through that
channel, and the running job's ack later goes through it too. kombu's Redis channel
then fails with an AttributeError (`transport.client` is None), which nothing expects,
and the worker exits. A connection error is what every caller on that path already
ignores or logs, so that is what a detached channel raises instead. The jobs are not
lost either way: a restarted Redis holds none, and the reconciler re-enqueues the work
PostgreSQL shows as missing.
"""

from __future__ import annotations

from typing import Any

from kombu.transport import redis as kombu_redis
from redis.exceptions import ConnectionError as RedisConnectionError

# celery's broker_transport for redis:// and rediss:// broker URLs (worker/app.py).
TRANSPORT = "worker.broker:Transport"


class Channel(kombu_redis.Channel):
    def _connparams(self, asynchronous: bool = False) -> Any:
        if self.connection.client is None:
            raise RedisConnectionError("the broker connection of this channel is gone")
        return super()._connparams(asynchronous=asynchronous)


class Transport(kombu_redis.Transport):
    Channel = Channel
