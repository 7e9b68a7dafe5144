"""Live updates: workers publish what changed in a session; the console listens (SSE).

Redis pub/sub is fire-and-forget on purpose: a missed event only delays a screen
refresh, and the console re-reads everything it shows from the API.

A web process listens through one `LiveHub`: one Redis connection subscribed to every
session's channel (a pattern), read by one thread that hands each event to the open
streams of its session, in the order Redis sent them. A thousand streams cost one
connection, not a thousand. Under gevent, monkey-patched `threading` and `queue` make
that thread a greenlet and the waits cooperative; plain threads work the same way.

A process that shuts down ends its streams (`end_all`): each listener is woken and told
why, so its stream can say goodbye (`event: end`) rather than be cut by the server.
"""

from __future__ import annotations

import contextlib
import json
import logging
import queue
import threading
import time
import uuid
import weakref
from collections.abc import Callable

import redis
from redis.client import PubSub

from shared.infra.redis_url import redis_client

log = logging.getLogger(__name__)

PREFIX = "driftless:live:"
PATTERN = PREFIX + "*"
# How long the reader waits for a message before it checks whether anyone still listens.
READ_S = 1.0
# A client that reads slower than its session changes loses events beyond this many
# (a missed event only delays a refresh), instead of growing the process's memory.
BACKLOG = 100
# How long a new stream waits for the hub's subscription (Redis answers in milliseconds).
SUBSCRIBE_TIMEOUT_S = 5.0
RETRY_S = 1.0


def channel(session_id: uuid.UUID | str) -> str:
    return f"{PREFIX}{{{session_id}}}"


def publish(client: redis.Redis, session_id: uuid.UUID | str, kind: str, topic_id: object) -> None:
    """Tell listeners of the session that `kind` happened to `topic_id` (best effort)."""
    event = json.dumps({"type": kind, "topicId": str(topic_id)})
    try:
        client.publish(channel(session_id), event)
    except redis.RedisError:
        log.warning("could not publish a live %s event for session %s", kind, session_id)


# Why this process ends its streams (None while it serves), and the hubs to tell.
_ending: str | None = None
_hubs: weakref.WeakSet[LiveHub] = weakref.WeakSet()


def end_all(reason: str) -> None:
    """End every stream of this process, and any that opens from now on, for `reason`."""
    global _ending
    _ending = reason
    for hub in list(_hubs):
        hub.end_listeners(reason)


def listening() -> int:
    """How many listeners this process has open, across its hubs."""
    return sum(hub.listening() for hub in list(_hubs))


class Listener:
    """One stream's events, in order; `close()` exactly once when the stream ends."""

    def __init__(self, hub: LiveHub, name: str) -> None:
        self._hub, self.channel = hub, name
        # None: a wake-up, put there by `end()`.
        self._events: queue.Queue[str | None] = queue.Queue(BACKLOG)
        # Why the process ended this stream; its stream says so and returns.
        self.ended: str | None = _ending

    def next(self, timeout: float) -> str | None:
        """The next event's data, or None if none came within `timeout` seconds or the
        listener was ended (see `ended`)."""
        if self.ended:
            return None
        try:
            return self._events.get(timeout=max(0.0, timeout))
        except queue.Empty:
            return None

    def deliver(self, data: str) -> None:
        try:
            self._events.put_nowait(data)
        except queue.Full:
            log.warning("live stream of %s is %d events behind; dropped one", self.channel, BACKLOG)

    def end(self, reason: str) -> None:
        """Wake the stream with `reason` to end."""
        self.ended = reason
        # A full queue needs no wake-up: its reader is not waiting.
        with contextlib.suppress(queue.Full):
            self._events.put_nowait(None)

    def close(self) -> None:
        self._hub.remove(self)


class _Reader:
    """The hub's subscription: one connection and the thread that reads it."""

    def __init__(self, client: redis.Redis) -> None:
        subscriber: Callable[[], PubSub] = client.pubsub  # redis-py leaves it unannotated
        self.pubsub = subscriber()
        self.subscribed = threading.Event()


class LiveHub:
    """This process's one subscription to every session channel, shared by its streams.

    The reader runs only while someone listens: the last listener to leave stops it and
    closes its connection (a process without streams holds none).
    """

    def __init__(self, redis_url: str) -> None:
        self._redis_url = redis_url
        # Its connection's name in Redis's CLIENT LIST.
        self.name = f"driftless-live-hub-{uuid.uuid4().hex[:8]}"
        self._lock = threading.Lock()
        self._listeners: dict[str, set[Listener]] = {}
        self._reader: _Reader | None = None
        _hubs.add(self)

    def listen(self, session_id: uuid.UUID | str) -> Listener:
        """A listener of the session's events, once the hub is subscribed to them.

        Raises redis.ConnectionError when Redis does not confirm the subscription."""
        listener = Listener(self, channel(session_id))
        with self._lock:
            self._listeners.setdefault(listener.channel, set()).add(listener)
            reader = self._reader
            if reader is None:
                reader = self._reader = self._start()
        if not reader.subscribed.wait(SUBSCRIBE_TIMEOUT_S):
            listener.close()
            raise redis.ConnectionError("live events: Redis did not confirm the subscription")
        return listener

    def remove(self, listener: Listener) -> None:
        with self._lock:
            listeners = self._listeners.get(listener.channel)
            if listeners is not None:
                listeners.discard(listener)
                if not listeners:
                    del self._listeners[listener.channel]

    def end_listeners(self, reason: str) -> None:
        """End every open listener for `reason` (the process shuts down)."""
        with self._lock:
            listeners = [listener for group in self._listeners.values() for listener in group]
        for listener in listeners:
            listener.end(reason)

    def listening(self) -> int:
        """How many listeners are open (for logs and tests)."""
        with self._lock:
            return sum(len(listeners) for listeners in self._listeners.values())

    @property
    def running(self) -> bool:
        """Whether the hub holds a subscription (it does while anyone listens)."""
        with self._lock:
            return self._reader is not None

    def _start(self) -> _Reader:
        # No read timeout (it waits for events by design); keepalive and health checks
        # notice a connection that died without a word.
        client = redis_client(
            self._redis_url, socket_keepalive=True, health_check_interval=30, client_name=self.name
        )
        reader = _Reader(client)
        thread = threading.Thread(target=self._run, args=(reader,), name="live-hub", daemon=True)
        thread.start()
        return reader

    def _run(self, reader: _Reader) -> None:
        pubsub = reader.pubsub
        try:
            while self._keep(reader):
                try:
                    if not pubsub.patterns:
                        pubsub.psubscribe(PATTERN)
                    message = pubsub.get_message(timeout=READ_S)
                except redis.RedisError:
                    # redis-py reconnects at the next read and subscribes again; events
                    # published meanwhile are lost, as any pub/sub message is.
                    reader.subscribed.clear()
                    log.warning("live events: Redis connection lost; retrying", exc_info=True)
                    time.sleep(RETRY_S)
                    continue
                if message is not None:
                    self._dispatch(reader, message)
        finally:
            pubsub.close()

    def _keep(self, reader: _Reader) -> bool:
        """Whether the reader goes on; it forgets itself when nobody listens anymore."""
        with self._lock:
            if self._listeners:
                return True
            if self._reader is reader:
                self._reader = None
            return False

    def _dispatch(self, reader: _Reader, message: dict[str, object]) -> None:
        if message["type"] == "psubscribe":
            reader.subscribed.set()
            return
        if message["type"] != "pmessage":
            return
        name, data = message["channel"], message["data"]
        name = name.decode() if isinstance(name, bytes) else str(name)
        text = data.decode() if isinstance(data, bytes) else str(data)
        with self._lock:
            listeners = list(self._listeners.get(name, ()))
        for listener in listeners:
            listener.deliver(text)
