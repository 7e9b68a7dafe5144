"""Export, import into a new org, export again: the same but for ids and times."""

from __future__ import annotations

import json
import re
from typing import Any

from flask.testing import FlaskClient

from tests.helpers import new_session, post_message

SCOPE = "agentId=planner&userId=ada"
_UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
_TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$")
_IDS = ("id", "sessionId", "topicId", "fromTopicId", "toTopicId", "summarizedThroughMessageId",
        "firstMessageId")  # fmt: skip


def _export(client: FlaskClient, auth: dict[str, str]) -> list[dict[str, Any]]:
    response = client.get(f"/agents-api/export?{SCOPE}", headers=auth)
    assert response.status_code == 200
    return [json.loads(line) for line in response.get_data(as_text=True).splitlines() if line]


def _without_ids_and_times(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each id replaced by its order of first appearance, each time by a mark."""
    seen: dict[Any, int] = {}

    def plain(key: str, value: Any) -> Any:
        if key in _IDS and value is not None:
            return f"id{seen.setdefault(value, len(seen))}"
        if isinstance(value, str) and _TIME.match(value):
            return "time"
        return value

    return [{k: plain(k, v) for k, v in line.items()} for line in lines]


def test_export_import_export_is_the_same_but_for_ids_and_times(
    client: FlaskClient, auth: dict[str, str], other_auth: dict[str, str]
) -> None:
    client.put("/agents-api/agents/planner", json={"soul": "plans"}, headers=auth)
    session = new_session(client, auth, agent="planner", user="ada")
    sid, first = session["id"], session["activeTopicId"]
    for n in range(4):
        post_message(
            client, auth, sid, f"message {n}: the ledger", "user" if n % 2 else "assistant"
        )
    client.post(
        f"/agents-api/sessions/{sid}/tools/notes",
        json={"arguments": {"op": "$set", "content": "ledger in PostgreSQL"}}, headers=auth,
    )  # fmt: skip
    client.put(f"/agents-api/topics/{first}/memory", json={"state": "promoted"}, headers=auth)
    client.post(f"/agents-api/sessions/{sid}/topics", json={"title": "next"}, headers=auth)
    post_message(client, auth, sid, "and the deploy")
    client.put(f"/agents-api/facts?{SCOPE}", json={"tz": "UTC"}, headers=auth)
    client.put(f"/agents-api/facts?{SCOPE}", json={"tz": "CET"}, headers=auth)

    exported = _export(client, auth)
    body = "\n".join(json.dumps(line) for line in exported).encode()
    imported = client.post("/agents-api/import", data=body, headers=other_auth)
    assert imported.status_code == 200, imported.json
    again = _export(client, other_auth)
    assert all(_UUID.match(line["id"]) for line in again if line["type"] == "session")
    assert {line["id"] for line in again if line["type"] == "session"}.isdisjoint(
        line["id"] for line in exported if line["type"] == "session"
    )
    assert _without_ids_and_times(again) == _without_ids_and_times(exported)
