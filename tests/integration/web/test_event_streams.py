"""Live event streams are admitted and ended by the server: per-org and per-process limits
in Redis and in the process, and the idle and absolute timeouts (web/views/live.py)."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import pytest
import redis
from flask.testing import FlaskClient
from sqlalchemy.orm import Session, sessionmaker
from werkzeug.test import TestResponse

from shared.auth.service import org_for_key
from shared.infra.config import Settings
from shared.infra.db.uow import UnitOfWork
from shared.infra.live import publish
from shared.infra.live_streams import streams_key
from shared.infra.queue import FIRE_DEBOUNCE, RecordingQueue
from tests.helpers import new_session
from web.views import live

READY = "event: ready\ndata: {}\n\n"
T = TypeVar("T")


def _client(
    settings: Settings, session_factory: sessionmaker[Session], queue: RecordingQueue, **values: Any
) -> FlaskClient:
    from web.app import create_app

    app = create_app(
        settings.model_copy(update=values), queue=queue, session_factory=session_factory
    )
    client: FlaskClient = app.test_client()
    return client


class Stream:
    """One `GET …/events` driven by a thread of its own, as a server thread would drive it.

    A streamed body runs inside its request's Flask contexts, which a thread can only hold
    for one stream at a time.
    """

    def __init__(self, client: FlaskClient, auth: dict[str, str], sid: str) -> None:
        self._thread = ThreadPoolExecutor(max_workers=1)
        url = f"/agents-api/sessions/{sid}/events"
        self.response = self._run(lambda: client.get(url, headers=auth, buffered=False))
        if self.response.status_code == 200:
            assert self.next() == READY  # the body runs: the stream is established

    def _run(self, call: Callable[[], T]) -> T:
        return self._thread.submit(call).result(timeout=30)

    @property
    def status(self) -> int:
        return self.response.status_code

    def next(self) -> str:
        return self._run(lambda: _next(self.response))

    def close(self) -> None:
        """The client goes away."""
        self._run(self.response.close)
        self._thread.shutdown()


class Streams:
    """Opens event streams through a test client and closes whatever is left at the end."""

    def __init__(self, client: FlaskClient) -> None:
        self.client = client
        self.open: list[Stream] = []

    def open_one(self, auth: dict[str, str], sid: str) -> Stream:
        stream = Stream(self.client, auth, sid)
        if stream.status == 200:
            self.open.append(stream)
        else:
            stream.close()
        return stream

    def close(self, stream: Stream) -> None:
        self.open.remove(stream)
        stream.close()

    def close_all(self) -> None:
        for stream in list(self.open):
            self.close(stream)


def _next(response: TestResponse) -> str:
    chunk: bytes = next(response.response)  # type: ignore[call-overload]
    return chunk.decode()


def _org(session_factory: sessionmaker[Session], auth: dict[str, str]) -> uuid.UUID:
    with UnitOfWork(session_factory, RecordingQueue()) as uow:
        org = org_for_key(uow=uow, key=auth["Authorization"].removeprefix("Bearer "))
    assert org is not None
    return org


def _now_ms(client: redis.Redis) -> int:
    seconds, micros = client.time()
    return int(seconds) * 1000 + int(micros) // 1000


def _refusal(stream: Stream) -> tuple[int, str | None, str]:
    body: Any = stream.response.json
    return stream.status, stream.response.headers.get("Retry-After"), body["error"]["code"]


@pytest.fixture
def leases(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url)
    yield client
    client.close()


def test_an_org_at_its_stream_limit_gets_429_and_another_org_still_streams(
    settings: Settings, session_factory: sessionmaker[Session], queue: RecordingQueue,
    auth: dict[str, str], other_auth: dict[str, str], leases: redis.Redis,
) -> None:  # fmt: skip
    client = _client(settings, session_factory, queue, max_streams_per_org=2)
    streams = Streams(client)
    sid, other_sid = new_session(client, auth)["id"], new_session(client, other_auth)["id"]
    try:
        first = streams.open_one(auth, sid)
        assert streams.open_one(auth, sid).status == 200
        refused = streams.open_one(auth, sid)
        assert _refusal(refused) == (429, "30", "too_many_streams")
        assert "2 open event streams" in refused.response.json["error"]["message"]  # type: ignore[index]
        assert streams.open_one(other_auth, other_sid).status == 200
        assert leases.zcard(streams_key(_org(session_factory, auth))) == 2

        streams.close(first)  # one of the org's clients goes away: its slot is free again
        assert streams.open_one(auth, sid).status == 200
    finally:
        streams.close_all()
    assert leases.zcard(streams_key(_org(session_factory, auth))) == 0


def test_leases_of_a_crashed_process_lapse_and_stop_counting(
    settings: Settings, session_factory: sessionmaker[Session], queue: RecordingQueue,
    auth: dict[str, str], leases: redis.Redis,
) -> None:  # fmt: skip
    client = _client(settings, session_factory, queue, max_streams_per_org=2)
    streams = Streams(client)
    sid = new_session(client, auth)["id"]
    key = streams_key(_org(session_factory, auth))
    now = _now_ms(leases)
    # A process that died holding two streams (leases lapsed), and one alive elsewhere.
    leases.zadd(key, {"crashed-1": now - 1, "crashed-2": now - 60_000, "alive": now + 30_000})
    try:
        assert streams.open_one(auth, sid).status == 200
        assert _refusal(streams.open_one(auth, sid))[2] == "too_many_streams"
        # The lapsed ones are gone; the live one and ours remain.
        assert leases.zcard(key) == 2 and leases.zscore(key, "alive") is not None
    finally:
        streams.close_all()
        leases.delete(key)


def test_a_process_holds_at_most_half_its_threads_in_streams(
    settings: Settings, session_factory: sessionmaker[Session], queue: RecordingQueue,
    auth: dict[str, str], other_auth: dict[str, str], leases: redis.Redis,
) -> None:  # fmt: skip
    # Not under gunicorn: the Procfile's 8 threads are assumed, so 4 streams.
    client = _client(settings, session_factory, queue)
    streams = Streams(client)
    sid, other_sid = new_session(client, auth)["id"], new_session(client, other_auth)["id"]
    try:
        opened = [streams.open_one(auth, sid) for _ in range(live.FALLBACK_THREADS // 2)]
        assert [stream.status for stream in opened] == [200] * 4
        # The process is full for every org, and a refused stream keeps no lease.
        assert _refusal(streams.open_one(other_auth, other_sid)) == (429, "5", "streams_busy")
        assert leases.zcard(streams_key(_org(session_factory, other_auth))) == 0
        streams.close(opened[0])
        assert streams.open_one(other_auth, other_sid).status == 200
    finally:
        streams.close_all()


def test_without_redis_a_stream_is_503_and_takes_no_slot(
    settings: Settings, session_factory: sessionmaker[Session], queue: RecordingQueue,
    auth: dict[str, str],
) -> None:  # fmt: skip
    healthy = _client(settings, session_factory, queue)
    sid = new_session(healthy, auth)["id"]
    client = _client(settings, session_factory, queue, redis_url="redis://127.0.0.1:1/0")
    for _ in range(live.FALLBACK_THREADS):  # more than the process's slots
        response = client.get(f"/agents-api/sessions/{sid}/events", headers=auth)
        assert _refusal_code(response) == (503, "unavailable")


def _refusal_code(response: TestResponse) -> tuple[int, str]:
    body: Any = response.json
    return response.status_code, body["error"]["code"]


def _read_until_end(stream: Stream) -> tuple[list[str], float]:
    """Every chunk up to the server's `end` (which must be the last), and when it came."""
    chunks = []
    while True:
        chunk = stream.next()
        chunks.append(chunk)
        if chunk.startswith("event: end"):
            ended_at = time.monotonic()
            with pytest.raises(StopIteration):
                stream.next()
            return chunks, ended_at


def test_an_idle_stream_is_ended_by_the_server_and_pings_do_not_count(
    settings: Settings, session_factory: sessionmaker[Session], queue: RecordingQueue,
    auth: dict[str, str], redis_url: str, leases: redis.Redis, monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    monkeypatch.setattr(live, "PING_S", 0.2)
    client = _client(settings, session_factory, queue, stream_idle_s=1)
    session = new_session(client, auth)
    streams = Streams(client)
    stream = streams.open_one(auth, session["id"])
    opened_at = time.monotonic()
    time.sleep(0.6)
    published_at = time.monotonic()
    publish(redis.Redis.from_url(redis_url), session["id"], "fork", session["activeTopicId"])
    try:
        chunks, ended_at = _read_until_end(stream)
    finally:
        streams.close_all()
    assert chunks[-1] == 'event: end\ndata: {"reason": "idle"}\n\n'
    assert sum(c.startswith("event: session") for c in chunks) == 1
    assert chunks.count(": ping\n\n") >= 3  # pings flowed, yet the stream went idle
    # The event restarted the idle clock: the end came a full idle period after it.
    assert ended_at - published_at >= 1.0 and ended_at - opened_at >= 1.6
    # The server ended it: that is not the client leaving, so no disconnect trigger.
    assert not [job for job in queue.sent if job.task == FIRE_DEBOUNCE]
    assert leases.zcard(streams_key(_org(session_factory, auth))) == 0


def test_a_stream_ends_at_its_age_limit_even_while_events_flow(
    settings: Settings, session_factory: sessionmaker[Session], queue: RecordingQueue,
    auth: dict[str, str], redis_url: str,
) -> None:  # fmt: skip
    client = _client(settings, session_factory, queue, stream_max_s=1, stream_idle_s=300)
    session = new_session(client, auth)
    streams = Streams(client)
    opened_at = time.monotonic()
    stream = streams.open_one(auth, session["id"])
    stop = threading.Event()
    publisher = redis.Redis.from_url(redis_url)

    def keep_publishing() -> None:
        while not stop.wait(0.1):
            publish(publisher, session["id"], "summary", session["activeTopicId"])

    thread = threading.Thread(target=keep_publishing, daemon=True)
    thread.start()
    try:
        chunks, ended_at = _read_until_end(stream)
    finally:
        stop.set()
        thread.join(timeout=5)
        streams.close_all()
    assert chunks[-1] == 'event: end\ndata: {"reason": "lifetime"}\n\n'
    assert sum(c.startswith("event: session") for c in chunks) >= 3
    assert ended_at - opened_at >= 1.0
    assert not [job for job in queue.sent if job.task == FIRE_DEBOUNCE]


def test_r27_the_client_going_away_is_still_the_disconnect_trigger(
    settings: Settings, session_factory: sessionmaker[Session], queue: RecordingQueue,
    auth: dict[str, str], leases: redis.Redis,
) -> None:  # fmt: skip
    client = _client(settings, session_factory, queue)
    streams = Streams(client)
    streams.close(streams.open_one(auth, new_session(client, auth)["id"]))
    assert [job.kwargs["trigger"] for job in queue.sent if job.task == FIRE_DEBOUNCE] == [
        "disconnect"
    ]
    assert leases.zcard(streams_key(_org(session_factory, auth))) == 0


def test_a_stream_whose_body_never_ran_gives_its_slot_back(
    settings: Settings, session_factory: sessionmaker[Session], queue: RecordingQueue,
    auth: dict[str, str],
) -> None:  # fmt: skip
    client = _client(settings, session_factory, queue, max_streams_per_org=1)
    sid = new_session(client, auth)["id"]
    for _ in range(3):  # each closed before its first chunk was read
        response = client.get(f"/agents-api/sessions/{sid}/events", headers=auth, buffered=False)
        assert response.status_code == 200
        response.close()
