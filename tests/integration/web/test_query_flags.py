"""A yes/no query parameter is `true` or `false`; any other word is a 422 naming it,
as every other bad query parameter is answered (web/schemas/common.py, QueryFlag)."""

from __future__ import annotations

from typing import Any

import pytest
from flask.testing import FlaskClient
from sqlalchemy import Connection, text

from tests.helpers import new_session

UNCLEAR = ("yes", "no", "1", "0", "on", "True", "t", "")
SCOPE = {"agentId": "a1", "userId": "u1"}


def _messages(connection: Connection) -> int:
    return int(connection.execute(text("SELECT count(*) FROM messages")).scalar_one())


@pytest.mark.parametrize("word", UNCLEAR)
def test_context_is_true_or_false_and_nothing_else(
    client: FlaskClient, auth: dict[str, str], connection: Connection, word: str
) -> None:
    sid = new_session(client, auth)["id"]
    before = _messages(connection)

    response = client.post(
        f"/agents-api/sessions/{sid}/messages",
        headers=auth,
        query_string={"context": word},
        json={"role": "user", "content": "hello"},
    )

    assert response.status_code == 422, response.json
    body: Any = response.json
    assert [f["field"] for f in body["error"]["fields"]] == ["context"]
    assert _messages(connection) == before


@pytest.mark.parametrize("word", UNCLEAR)
def test_include_deprecated_is_true_or_false_and_nothing_else(
    client: FlaskClient, auth: dict[str, str], word: str
) -> None:
    query = {**SCOPE, "q": "hello", "includeDeprecated": word}

    response = client.get("/agents-api/search", headers=auth, query_string=query)

    assert response.status_code == 422, response.json
    body: Any = response.json
    assert [f["field"] for f in body["error"]["fields"]] == ["includeDeprecated"]


@pytest.mark.parametrize(("word", "with_context"), [("true", True), ("false", False)])
def test_context_true_and_false_still_mean_what_they_say(
    client: FlaskClient, auth: dict[str, str], word: str, with_context: bool
) -> None:
    sid = new_session(client, auth)["id"]

    response = client.post(
        f"/agents-api/sessions/{sid}/messages",
        headers=auth,
        query_string={"context": word},
        json={"role": "user", "content": "hello"},
    )

    assert response.status_code == 201, response.json
    assert ("context" in response.json) is with_context  # type: ignore[operator]
    search = {**SCOPE, "q": "hello", "includeDeprecated": word}
    assert client.get("/agents-api/search", headers=auth, query_string=search).status_code == 200
