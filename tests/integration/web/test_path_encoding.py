"""A path whose percent-escapes do not decode as UTF-8 names nothing: a 400 naming the
path, never the id U+FFFD that `%FF` and `%FE` would both become (web/paths.py)."""

from __future__ import annotations

from typing import Any

import pytest
from flask.testing import FlaskClient
from sqlalchemy import Connection, text

NOT_UTF8 = ("%FF", "%FE", "a%C3", "%C3%28", "%ED%A0%80")  # the last: a surrogate's bytes


def _agents(connection: Connection) -> int:
    return int(connection.execute(text("SELECT count(*) FROM agents")).scalar_one())


@pytest.mark.parametrize("segment", NOT_UTF8)
def test_an_id_that_is_not_utf8_is_a_400_naming_the_path_and_writes_nothing(
    client: FlaskClient, auth: dict[str, str], connection: Connection, segment: str
) -> None:
    before = _agents(connection)

    response = client.put(f"/agents-api/agents/{segment}", headers=auth, json={"soul": "s"})

    assert response.status_code == 400, response.json
    error: Any = response.json["error"]  # type: ignore[index]
    assert error["code"] == "bad_request"
    assert f"/agents-api/agents/{segment}" in error["message"]
    assert _agents(connection) == before


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/agents-api/agents/%FF"),
        ("DELETE", "/agents-api/agents/a/users/%FE"),
        ("DELETE", "/agents-api/facts/%FF?agentId=a&userId=u"),
        ("GET", "/agents-api/sessions/%FF"),
    ],
)
def test_every_route_answers_a_path_that_is_not_utf8_alike(
    client: FlaskClient, auth: dict[str, str], method: str, path: str
) -> None:
    response = client.open(path, method=method, headers=auth)

    assert response.status_code == 400, response.json
    assert response.json["error"]["code"] == "bad_request"  # type: ignore[index]
    assert response.headers["X-Content-Type-Options"] == "nosniff"  # through the app's hooks


def test_the_replacement_character_sent_as_utf8_is_an_id_like_any_other(
    client: FlaskClient, auth: dict[str, str]
) -> None:
    put = client.put("/agents-api/agents/%EF%BF%BD", headers=auth, json={"soul": "s"})

    assert put.status_code == 200, put.json
    assert put.json["agentId"] == "\ufffd"  # type: ignore[index]
