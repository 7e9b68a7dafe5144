"""One Redis subscription per process feeds every live stream of it (shared/infra/live.py)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator

import pytest
import redis

from shared.infra.live import Listener, LiveHub, publish

PATIENCE_S = 10.0


@pytest.fixture
def client(redis_url: str) -> Iterator[redis.Redis]:
    connection = redis.Redis.from_url(redis_url)
    yield connection
    connection.close()


def _hub_connections(client: redis.Redis, hub: LiveHub) -> list[dict[str, object]]:
    """The Redis clients that are this hub's subscription."""
    return [c for c in client.client_list() if c.get("name") == hub.name]


def _until(condition: Callable[[], object], what: str) -> None:
    deadline = time.monotonic() + PATIENCE_S
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(0.05)


def _drain(listener: Listener, count: int) -> list[str]:
    events = []
    for _ in range(count):
        event = listener.next(timeout=PATIENCE_S)
        assert event is not None, f"{len(events)} of {count} events came"
        events.append(event)
    return events


def test_listeners_share_one_subscription_and_get_their_sessions_events_in_order(
    redis_url: str, client: redis.Redis
) -> None:
    hub = LiveHub(redis_url)
    one, other = uuid.uuid4(), uuid.uuid4()
    listeners = [hub.listen(one), hub.listen(one), hub.listen(other)]
    try:
        assert len(_hub_connections(client, hub)) == 1
        for n in range(20):
            publish(client, one, "summary", f"one-{n}")
            publish(client, other, "fork", f"other-{n}")
        expected = {
            one: [f'{{"type": "summary", "topicId": "one-{n}"}}' for n in range(20)],
            other: [f'{{"type": "fork", "topicId": "other-{n}"}}' for n in range(20)],
        }
        for listener, session in zip(listeners, (one, one, other), strict=True):
            assert _drain(listener, 20) == expected[session]
        assert listeners[0].next(timeout=0.2) is None  # nothing of the other session
    finally:
        for listener in listeners:
            listener.close()
    # The last listener gone, the hub gives its connection back.
    _until(lambda: not hub.running, "the hub's reader to stop")
    _until(lambda: not _hub_connections(client, hub), "the hub's connection to close")
    assert hub.listening() == 0


def test_the_hub_subscribes_again_after_its_connection_is_killed(
    redis_url: str, client: redis.Redis
) -> None:
    hub = LiveHub(redis_url)
    session = uuid.uuid4()
    listener = hub.listen(session)
    try:
        (killed,) = _hub_connections(client, hub)
        client.client_kill_filter(_id=killed["id"])
        # Events published while it reconnects are lost (pub/sub); once it is back, they flow.
        _until(
            lambda: [
                c
                for c in _hub_connections(client, hub)
                if c["id"] != killed["id"] and int(str(c.get("psub", 0))) == 1
            ],
            "the hub to reconnect and subscribe again",
        )
        _until(
            lambda: (
                publish(client, session, "fork", "after") is None
                and listener.next(timeout=0.2) is not None
            ),
            "an event after the reconnect",
        )
    finally:
        listener.close()
