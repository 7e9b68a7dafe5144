"""JSON that cannot be served back is refused before anything is written ([2.1] items 3, 4).

The attacks: ~100,000 nested `[` was a RecursionError (500); a document nested 256 deep
was stored, then answered 500 by the write and by every later read of the scope (GET
/facts, GET …/context, `important_info read`); NaN, Infinity and 1e999 were a 500 or
were stored and rendered into the prompt as `NaN`.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
import redis
from flask.testing import FlaskClient
from sqlalchemy import Connection, text

from shared.context.working_memory import get_working_memory
from tests.helpers import new_session

TABLES = ("sessions", "topics", "messages", "agents", "facts", "notes")
FACTS = "/agents-api/facts?agentId=agent-1&userId=user-1"

WRITE_ROUTES = [
    ("PUT", "/agents-api/agents/a1"),
    ("POST", "/agents-api/sessions"),
    ("POST", "/agents-api/sessions/{sid}/messages"),
    ("POST", "/agents-api/sessions/{sid}/topics"),
    ("POST", "/agents-api/sessions/{sid}/evaluate"),
    ("POST", "/agents-api/sessions/{sid}/tools/important_info"),
    ("PUT", "/agents-api/sessions/{sid}/working-memory"),
    ("PUT", FACTS),
    ("PUT", "/agents-api/topics/{tid}/memory"),
]


def _counts(connection: Connection) -> dict[str, int]:
    return {t: connection.execute(text(f"SELECT count(*) FROM {t}")).scalar_one() for t in TABLES}


def _nested(depth: int, leaf: str = "1") -> str:
    """A JSON object value nested `depth` levels deep (the leaf's own level excluded)."""
    return '{"a":' * depth + leaf + "}" * depth


@pytest.fixture
def session(client: FlaskClient, auth: dict[str, str]) -> dict[str, Any]:
    return new_session(client, auth)


def _send(
    client: FlaskClient, auth: dict[str, str], method: str, path: str, raw: str, session: Any
) -> Any:
    url = path.format(sid=session["id"], tid=session["activeTopicId"])
    headers = {**auth, "Content-Type": "application/json"}
    return client.open(url, method=method, data=raw.encode(), headers=headers)


@pytest.mark.parametrize(("method", "path"), WRITE_ROUTES)
def test_a_hundred_thousand_nested_brackets_are_422_on_every_write_route(
    client: FlaskClient,
    auth: dict[str, str],
    connection: Connection,
    session: dict[str, Any],
    method: str,
    path: str,
) -> None:
    before = _counts(connection)
    response = _send(client, auth, method, path, "[" * 100_000 + "]" * 100_000, session)
    assert response.status_code == 422, response.json
    assert "nested deeper than 32" in response.json["error"]["message"]
    assert _counts(connection) == before


@pytest.mark.parametrize(
    ("path", "body"),
    [
        (FACTS, '{"k": %s}'),
        ("/agents-api/sessions/{sid}/working-memory", '{"k": %s}'),
        (
            "/agents-api/sessions/{sid}/tools/important_info",
            '{"arguments": {"op": "$set", "key": "k", "value": %s}}',
        ),
        ("/agents-api/agents/a1", '{"soul": "s", "skills": [%s], "tools": []}'),
    ],
)
def test_a_document_nested_past_the_limit_is_422_and_every_read_still_answers(
    client: FlaskClient,
    auth: dict[str, str],
    connection: Connection,
    redis_url: str,
    session: dict[str, Any],
    path: str,
    body: str,
) -> None:
    method = "POST" if "/tools/" in path else "PUT"
    before = _counts(connection)
    response = _send(client, auth, method, path, body % _nested(256), session)
    assert response.status_code == 422, response.json
    assert _counts(connection) == before
    wm = get_working_memory(redis.Redis.from_url(redis_url), uuid.UUID(session["id"]))
    assert wm is None
    # Every read of the scope answers as before.
    assert client.get(FACTS, headers=auth).status_code == 200
    assert (
        client.get(f"/agents-api/sessions/{session['id']}/context", headers=auth).status_code == 200
    )
    read = client.post(
        f"/agents-api/sessions/{session['id']}/tools/important_info",
        json={"arguments": {"op": "read"}},
        headers=auth,
    )
    assert read.status_code == 200 and read.json["ok"] is True  # type: ignore[index]


def test_the_depth_limit_counts_the_body_itself(
    client: FlaskClient, auth: dict[str, str], session: dict[str, Any]
) -> None:
    # The body object is level 1, so a value may nest 31 more levels.
    assert _send(client, auth, "PUT", FACTS, f'{{"k": {_nested(31)}}}', session).status_code == 200
    refused = _send(client, auth, "PUT", FACTS, f'{{"k": {_nested(32)}}}', session)
    assert refused.status_code == 422


NON_FINITE = ["NaN", "Infinity", "-Infinity", "1e999", "-1e999"]


@pytest.mark.parametrize("number", NON_FINITE)
@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("PUT", FACTS, '{"k": %s}'),
        ("PUT", "/agents-api/sessions/{sid}/working-memory", '{"step": %s}'),
        (
            "POST",
            "/agents-api/sessions/{sid}/tools/important_info",
            '{"arguments": {"op": "$set", "key": "k", "value": %s}}',
        ),
        ("PUT", "/agents-api/agents/a1", '{"soul": "s", "skills": [%s], "tools": []}'),
        (
            "POST",
            "/agents-api/sessions/{sid}/messages",
            '{"role": "user", "content": "x", "n": %s}',
        ),
    ],
)
def test_nan_infinity_and_out_of_range_numbers_are_422_and_never_stored(
    client: FlaskClient,
    auth: dict[str, str],
    connection: Connection,
    redis_url: str,
    session: dict[str, Any],
    number: str,
    method: str,
    path: str,
    body: str,
) -> None:
    before = _counts(connection)
    response = _send(client, auth, method, path, body % number, session)
    assert response.status_code == 422, response.json
    assert response.json["error"]["code"] == "validation_error"
    assert _counts(connection) == before
    assert get_working_memory(redis.Redis.from_url(redis_url), uuid.UUID(session["id"])) is None
    context = client.get(f"/agents-api/sessions/{session['id']}/context", headers=auth)
    assert "NaN" not in context.get_data(as_text=True)
