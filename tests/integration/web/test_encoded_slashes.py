"""Path parameters that hold `/` reach their route when sent encoded (web/paths.py)."""

from __future__ import annotations

from flask.testing import FlaskClient


def test_an_agent_id_holding_a_slash_is_one_path_segment(
    client: FlaskClient, auth: dict[str, str]
) -> None:
    put = client.put("/agents-api/agents/team%2Fbot", headers=auth, json={"soul": "odd"})
    assert put.status_code == 200, put.json

    assert client.get("/agents-api/agents/team%2Fbot", headers=auth).json["agentId"] == "team/bot"  # type: ignore[index]
    # Sent unencoded, the slash separates segments: no such route.
    assert client.get("/agents-api/agents/team/bot", headers=auth).status_code == 404
    # A literal "%2F" in an id is sent as %252F and stays itself.
    put = client.put("/agents-api/agents/team%252Fbot", headers=auth, json={"soul": "odd"})
    assert put.json["agentId"] == "team%2Fbot"  # type: ignore[index]
