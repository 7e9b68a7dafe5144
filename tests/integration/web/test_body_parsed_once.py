"""A request's JSON body is parsed once, by the body check (web/body.py), whose limits
(depth, finite numbers) are the ones that hold; the body model reads that document."""

from __future__ import annotations

from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from tests.helpers import new_session


def test_a_message_post_parses_its_body_once(
    app: Flask, client: FlaskClient, auth: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    sid = new_session(client, auth)["id"]
    parsed_by_flask: list[Any] = []
    loads = app.json.loads

    def counted_loads(text: Any, **kwargs: Any) -> Any:
        parsed_by_flask.append(text)
        return loads(text, **kwargs)

    monkeypatch.setattr(app.json, "loads", counted_loads)
    answer = client.post(
        f"/agents-api/sessions/{sid}/messages",
        json={"role": "user", "content": "parsed once"},
        headers=auth,
    )
    assert answer.status_code == 201, answer.get_json()
    assert parsed_by_flask == []
    stored = client.get(f"/agents-api/sessions/{sid}/messages", headers=auth).get_json()
    assert [m["content"] for m in stored["messages"]] == ["parsed once"]
