"""The web as the Procfile runs it (gunicorn's gevent worker) against real PostgreSQL and Redis.

- A process's streams share one Redis subscription, and each gets its own session's
  events, in the order they were published.
- A request waiting for PostgreSQL (psycopg2 patched by psycogreen, web/app.py) does not
  stop the process: /healthz answers while new sessions wait on a lock, and more of
  them than the pool has connections wait for one instead of failing.
- A client that always has its next request waiting (pipelining) is answered in turn
  with the process's other connections, not before all of them (web/server.py).
"""

from __future__ import annotations

import http.client
import json
import socket
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import psycopg2
import pytest
import redis

from shared.infra.live import publish
from tests.faults.conftest import new_api_key, report
from tests.faults.http import Answer, Api
from tests.faults.procs import PrivateRedis, Processes, driftless_env, free_port, wait_until

TIMEOUT_S = 20.0
POOL = 2  # connections per process
POSTS = 10 * POOL  # writes at once


class Events:
    """One open `GET …/events`, read event by event (comments and pings skipped)."""

    def __init__(self, port: int, key: str, sid: str) -> None:
        self.connection = http.client.HTTPConnection("127.0.0.1", port, timeout=TIMEOUT_S)
        headers = {"Authorization": f"Bearer {key}", "Accept": "text/event-stream"}
        self.connection.request("GET", f"/agents-api/sessions/{sid}/events", headers=headers)
        self.response = self.connection.getresponse()
        assert self.response.status == 200, self.response.read()
        assert self.next() == ("ready", "{}")

    def next(self) -> tuple[str, str]:
        """(event, data) of the next event."""
        event, data = "", ""
        while True:
            line = self.response.fp.readline().decode().rstrip("\n")
            if line.startswith("event: "):
                event = line.removeprefix("event: ")
            elif line.startswith("data: "):
                data = line.removeprefix("data: ")
            elif line == "" and event:
                return event, data

    def close(self) -> None:
        self.response.close()
        self.connection.close()


@pytest.fixture
def web(
    processes: Processes, private_redis: PrivateRedis, fresh_database: str
) -> Iterator[tuple[Api, str]]:
    """One gevent worker process with a pool of POOL connections and no overflow."""
    env = driftless_env(
        DATABASE_URL=fresh_database,
        REDIS_URL=private_redis.url,
        CELERY_BROKER_URL=private_redis.url,
        DRIFTLESS_LLM="local",
        DRIFTLESS_DB_POOL_SIZE=str(POOL),
        DRIFTLESS_DB_MAX_OVERFLOW="0",
    )
    port = free_port()
    processes.web(env, port, workers=1)
    yield Api(port, new_api_key(fresh_database), TIMEOUT_S), private_redis.url


def _subscribers(client: redis.Redis) -> list[dict[str, object]]:
    return [c for c in client.client_list() if int(c.get("psub", 0)) or int(c.get("sub", 0))]


@pytest.mark.faults
def test_a_processes_streams_share_one_subscription_and_get_their_sessions_events_in_order(
    web: tuple[Api, str],
) -> None:
    api, redis_url = web
    sessions = [api.new_session(user=f"user-{i}") for i in range(3)]
    streams = [Events(api.port, api.key, s["id"]) for s in sessions for _ in range(5)]
    publisher = redis.Redis.from_url(redis_url)
    try:
        subscribers = _subscribers(publisher)
        for n in range(5):
            for session in sessions:
                publish(publisher, session["id"], "summary", f"{session['id']}-{n}")
        received = [[stream.next() for _ in range(5)] for stream in streams]
    finally:
        for stream in streams:
            stream.close()
    report(
        f"gevent web: {len(streams)} streams of 3 sessions on one process:"
        f" {len(subscribers)} Redis subscriber connection(s)"
    )
    assert len(subscribers) == 1, subscribers
    for index, events in enumerate(received):
        sid = sessions[index // 5]["id"]
        assert [(e, json.loads(d)["topicId"]) for e, d in events] == [
            ("session", f"{sid}-{n}") for n in range(5)
        ]


@pytest.mark.faults
def test_writes_waiting_on_postgresql_leave_healthz_answering_and_wait_for_a_connection(
    web: tuple[Api, str], fresh_database: str
) -> None:
    api, _ = web
    api.new_session()  # the process has connected once
    blocker = psycopg2.connect(fresh_database)
    try:
        with blocker.cursor() as cursor:
            cursor.execute("LOCK TABLE sessions IN ACCESS EXCLUSIVE MODE")
        pool = ThreadPoolExecutor(max_workers=POSTS)
        pending = [pool.submit(_new_session, api, n) for n in range(POSTS)]
        # Every pooled connection is stuck on the lock; the other posts wait for one.
        wait_until(
            lambda: _waiting_on_locks(fresh_database) == POOL,
            timeout=TIMEOUT_S, what="the pool's connections to wait on the lock",
        )  # fmt: skip
        healthz = [api.get("/healthz") for _ in range(5)]
        assert not any(future.done() for future in pending)
    finally:
        blocker.rollback()
        blocker.close()
    posts = [future.result(timeout=TIMEOUT_S) for future in pending]
    pool.shutdown()
    report(
        f"gevent web: {POSTS} new sessions on a pool of {POOL} held by a table lock: /healthz"
        f" {[a.status for a in healthz]} meanwhile; afterwards {[a.status for a in posts]}"
    )
    assert [a.status for a in healthz] == [200] * 5
    assert [a.status for a in posts] == [201] * POSTS


def _new_session(api: Api, n: int) -> Answer:
    return api.post("/agents-api/sessions", {"agentId": "agent", "userId": f"user-{n}"})


def _waiting_on_locks(database_url: str) -> int:
    connection = psycopg2.connect(database_url)
    try:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity"
                " WHERE wait_event_type = 'Lock' AND datname = current_database()"
            )
            (count,) = cursor.fetchone() or (0,)
            return int(count)
    finally:
        connection.close()


PIPELINED = 100
HEALTHZ = b"GET /healthz HTTP/1.1\r\nHost: driftless\r\n\r\n"


@pytest.mark.faults
def test_a_pipelining_client_is_answered_in_turn_with_the_other_connections(
    web: tuple[Api, str],
) -> None:
    api, _ = web
    fast, other = (socket.create_connection(("127.0.0.1", api.port), TIMEOUT_S) for _ in "ab")
    with fast, other:
        for connection in (fast, other):  # both accepted, their greenlets waiting to read
            connection.sendall(HEALTHZ)
            assert _answers(connection, 1) == 1
        fast.sendall(HEALTHZ * PIPELINED)
        answered_first = _answers(fast, 1)  # its greenlet is answering them now
        other.sendall(HEALTHZ)
        assert _answers(other, 1) == 1
        # What `fast` has been sent so far. gunicorn's stock gevent worker answers all
        # of its pipelined requests first: the next one is always there to read, so its
        # greenlet never yields (PIPELINED of PIPELINED, checked against the stock class).
        fast.setblocking(False)
        answered_first += _answers(fast, PIPELINED, wait=False)
        report(f"pipelined requests answered before the other connection's: {answered_first}")
        assert answered_first < PIPELINED


def _answers(connection: socket.socket, most: int, *, wait: bool = True) -> int:
    """Read up to `most` whole /healthz answers (each ends with its JSON body and a
    newline); without `wait`, only those already received."""
    received = b""
    while received.count(b"HTTP/1.1 200") < most or not received.endswith(b"}\n"):
        try:
            chunk = connection.recv(65536)
        except BlockingIOError:
            if wait:
                raise
            break
        if not chunk:
            break
        received += chunk
    return received.count(b"HTTP/1.1 200")
