"""shared/infra/broker.py's Transport on the real broker: on a worker's connections (marked
CONSUMER_POLLS), a consumer whose prefetch slots are all taken looks for a freed one
every FULL_POLL_S, and any other poll lasts at most IDLE_POLL_S, not the 2 s celery's
synloop (the gevent and threads pools) asks for. Other connections keep their polls."""

from __future__ import annotations

import socket
import uuid
from typing import Any

import pytest
from kombu import Connection, Exchange, Message, Queue
from kombu.transport import redis as kombu_redis

from shared.infra.broker import CONSUMER_POLLS, FULL_POLL_S, IDLE_POLL_S, Transport

SYNLOOP_TIMEOUT_S = 2.0  # what celery's synloop passes to drain_events
A_WORKERS = {CONSUMER_POLLS: True}  # as worker/context.py marks a worker's connections


@pytest.fixture
def polls(monkeypatch: pytest.MonkeyPatch) -> list[float | None]:
    """The timeout of every poll our Transport hands to kombu's."""
    asked: list[float | None] = []
    poll = kombu_redis.Transport.drain_events

    def recording(self: Any, connection: Any, timeout: float | None = None, **kw: Any) -> Any:
        asked.append(timeout)
        return poll(self, connection, timeout=timeout, **kw)

    monkeypatch.setattr(kombu_redis.Transport, "drain_events", recording)
    return asked


def test_a_full_consumer_looks_for_a_freed_slot_soon(
    broker_url: str, polls: list[float | None]
) -> None:
    name = f"test-transport-{uuid.uuid4().hex[:8]}"
    queue = Queue(name, Exchange(name), routing_key=name)
    received: list[Message] = []
    with Connection(broker_url, transport=Transport, transport_options=A_WORKERS) as connection:
        with connection.Producer() as producer:
            for n in range(2):
                producer.publish(
                    {"n": n}, exchange=queue.exchange, routing_key=name, declare=[queue]
                )
        consumer = connection.Consumer(
            [queue], callbacks=[lambda _body, message: received.append(message)], prefetch_count=1
        )
        with consumer:
            connection.drain_events(timeout=SYNLOOP_TIMEOUT_S)  # takes the one slot
            assert len(received) == 1
            assert polls[-1] == IDLE_POLL_S  # a slot was free

            with pytest.raises(socket.timeout):  # full: the second job stays queued
                connection.drain_events(timeout=SYNLOOP_TIMEOUT_S)
            assert polls[-1] == FULL_POLL_S
            assert len(received) == 1

            received[0].ack()  # the slot frees: the next poll takes the second job
            connection.drain_events(timeout=SYNLOOP_TIMEOUT_S)
            assert [m.payload for m in received] == [{"n": 0}, {"n": 1}]
            received[1].ack()
            queue(connection).delete()


@pytest.mark.parametrize(
    ("options", "timeout"),
    [
        (A_WORKERS, None),  # an unbounded drain is the caller's choice
        ({}, SYNLOOP_TIMEOUT_S),  # not a worker's: `celery inspect` collects this long
    ],
)
def test_other_polls_keep_their_timeout(
    broker_url: str, polls: list[float | None], options: dict[str, Any], timeout: float | None
) -> None:
    name = f"test-transport-{uuid.uuid4().hex[:8]}"
    queue = Queue(name, Exchange(name), routing_key=name)
    with Connection(broker_url, transport=Transport, transport_options=options) as connection:
        with connection.Producer() as producer:
            producer.publish({"n": 0}, exchange=queue.exchange, routing_key=name, declare=[queue])
        received: list[Message] = []
        with connection.Consumer([queue], callbacks=[lambda _b, m: received.append(m)]):
            connection.drain_events(timeout=timeout)
        assert polls == [timeout]
        received[0].ack()
        queue(connection).delete()


def test_a_channel_shares_one_client_for_its_acks_until_its_pool_is_replaced(
    broker_url: str,
) -> None:
    """kombu builds a redis-py client for every ack and reservation; ours builds one per
    connection pool, and a new one once a reconnect replaced the pool."""
    with Connection(broker_url, transport=Transport) as connection:
        channel: Any = connection.default_channel
        first = channel._create_client()
        assert channel._create_client() is first
        assert first.ping()
        # The async client (the consumer's BRPOP) is kombu's, one per call as before.
        assert channel._create_client(asynchronous=True) is not channel._create_client(
            asynchronous=True
        )

        channel._disconnect_pools()  # what kombu does when the connection is lost
        again = channel._create_client()
        assert again is not first
        assert again.connection_pool is channel.pool
        assert again.ping()
