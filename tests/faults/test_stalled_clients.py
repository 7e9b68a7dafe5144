"""[4.1] Clients that stall hold nothing of the web's database (the probe's items 1 and 7),
through gunicorn's gevent worker as the Procfile runs it, with a pool of POOL connections.

- Imports that send a header and a session line, then stop: no transaction is open while
  they wait, another org's reads answer at once (they answered 503 after the pool's
  10 s), the org's third import is a 429, and the stalled ones are ended after
  DRIFTLESS_CLIENT_STALL_S, their slots given back.
- Exports nobody reads: past the cap a 429, and each stalled one is aborted after
  DRIFTLESS_CLIENT_STALL_S, its snapshot (the transaction) and its slot given back (they
  were held for as long as the client kept its socket open).
"""

from __future__ import annotations

import http.client
import json
import socket
from collections.abc import Iterator
from typing import Any

import psycopg2
import pytest
from sqlalchemy.engine import make_url

from tests import services
from tests.faults.conftest import new_api_key
from tests.faults.http import Api
from tests.faults.procs import PrivateRedis, Processes, driftless_env, free_port, wait_until
from tests.integration.portability.export_file import body, export_lines

POOL = 2  # connections of the one web process
STALL_S = 2  # DRIFTLESS_CLIENT_STALL_S
TIMEOUT_S = 30.0


@pytest.fixture
def clients() -> Iterator[list[socket.socket]]:
    """The raw clients a test opens, closed at its end."""
    opened: list[socket.socket] = []
    yield opened
    for client in opened:
        client.close()


@pytest.fixture
def web(
    processes: Processes, private_redis: PrivateRedis, fresh_database: str
) -> Iterator[tuple[int, str]]:
    env = driftless_env(
        DATABASE_URL=fresh_database,
        REDIS_URL=private_redis.url,
        CELERY_BROKER_URL=private_redis.url,
        DRIFTLESS_LLM="local",
        DRIFTLESS_DB_POOL_SIZE=str(POOL),
        DRIFTLESS_DB_MAX_OVERFLOW="0",
        DRIFTLESS_CLIENT_STALL_S=str(STALL_S),
    )
    port = free_port()
    processes.web(env, port, workers=1)
    yield port, fresh_database


def _idle_in_transaction(database_url: str) -> int:
    """Backends of the test's database idle in a transaction: what waits on a client."""
    database = make_url(database_url).database
    connection = psycopg2.connect(services.admin_database_url())
    try:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity"
                " WHERE datname = %s AND state LIKE 'idle in transaction%%'",
                (database,),
            )
            return int(cursor.fetchone()[0])
    finally:
        connection.close()


def _send(
    opened: list[socket.socket], port: int, head: str, data: bytes = b"",
    *, receive_buffer: int | None = None,
) -> socket.socket:  # fmt: skip
    """A client that sends `head` and `data`, then nothing more (and reads nothing)."""
    client = socket.socket()
    opened.append(client)
    if receive_buffer is not None:  # before connecting: the window it advertises
        client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
    client.settimeout(TIMEOUT_S)
    client.connect(("127.0.0.1", port))
    client.sendall(head.encode() + data)
    return client


def _import_head(port: int, key: str, length: int) -> str:
    return (
        f"POST /agents-api/import HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        f"Authorization: Bearer {key}\r\nContent-Type: application/x-ndjson\r\n"
        f"Content-Length: {length}\r\n\r\n"
    )


def _import(port: int, key: str, data: bytes) -> tuple[int, Any]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=TIMEOUT_S)
    try:
        connection.request(
            "POST", "/agents-api/import", body=data,
            headers={"Authorization": f"Bearer {key}", "Content-Type": "application/x-ndjson"},
        )  # fmt: skip
        response = connection.getresponse()
        return response.status, json.loads(response.read())
    finally:
        connection.close()


def _large(lines: list[str], chars: int) -> list[str]:
    """`lines` with each message's content `chars` long."""
    for n, line in enumerate(lines):
        row = json.loads(line)
        if row["type"] == "message":
            row["content"] = f"{n} " + "x" * chars
            lines[n] = json.dumps(row)
    return lines


def _status(client: socket.socket) -> int:
    """The status line's code of what the server answered `client`."""
    return int(client.recv(4096).split(b" ", 2)[1])


def test_stalled_imports_hold_no_connection_and_past_the_cap_are_429_41(
    web: tuple[int, str], clients: list[socket.socket]
) -> None:
    port, database_url = web
    mine, theirs = new_api_key(database_url), new_api_key(database_url)
    other = Api(port, theirs, TIMEOUT_S)
    their_session = other.new_session()["id"]
    lines = _large(export_lines(sessions=1, messages=8), 40_000)
    # The header, the agent and most of the session (past the web's 64 KiB read buffer);
    # then nothing more.
    start = body(lines)[:200_000]
    stalled = [
        _send(clients, port, _import_head(port, mine, 10_000_000), start) for _ in range(POOL)
    ]
    # The stalled imports' lines are read (the agent is written): nothing waits open.
    mine_api = Api(port, mine, TIMEOUT_S)
    wait_until(
        lambda: mine_api.get("/agents-api/agents/planner").status == 200,
        timeout=TIMEOUT_S, what="the stalled imports' agent line",
    )  # fmt: skip
    assert _idle_in_transaction(database_url) == 0
    # Another org is served at once (before: 503 after the pool's 10 s), and the org's
    # third import is told to retry.
    assert other.get(f"/agents-api/sessions/{their_session}").status == 200
    third = _send(clients, port, _import_head(port, mine, len(start) + 1), start)
    assert _status(third) == 429
    # The stalled ones end after DRIFTLESS_CLIENT_STALL_S: their slots come back.
    for client in stalled:
        assert _status(client) == 400  # the client disconnected, as werkzeug says
    status, answer = _import(port, mine, body(lines))
    assert status == 200, answer
    assert answer["imported"]["sessions"] == 1


def test_stalled_exports_are_aborted_and_give_back_their_snapshot_and_slot_41(
    web: tuple[int, str], clients: list[socket.socket]
) -> None:
    port, database_url = web
    key = new_api_key(database_url)
    # About 12 MB of messages: more than the kernel buffers between the web and a
    # client that reads nothing, so the web's writes stall.
    lines = _large(export_lines(sessions=1, messages=130), 90_000)
    status, answer = _import(port, key, body(lines))
    assert status == 200, answer
    head = (
        f"GET /agents-api/export HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        f"Authorization: Bearer {key}\r\n\r\n"
    )
    stalled = [_send(clients, port, head, receive_buffer=4096) for _ in range(2)]
    for client in stalled:  # admitted and streaming (a peek reads nothing off the socket)
        assert client.recv(12, socket.MSG_PEEK) == b"HTTP/1.1 200"
    third = _send(clients, port, head)
    assert _status(third) == 429
    # Within DRIFTLESS_CLIENT_STALL_S (and a margin) the stalled exports are cut off:
    # no snapshot left open, and the org's next export is admitted and read whole.
    wait_until(
        lambda: _idle_in_transaction(database_url) == 0,
        timeout=TIMEOUT_S, what=lambda: f"{_idle_in_transaction(database_url)} idle exports",
    )  # fmt: skip
    api = Api(port, key, TIMEOUT_S)
    export = api.get("/agents-api/export")
    assert export.status == 200
    assert str(export.body).count('"type":"message"') == 130
