"""A message's `name` ([4.3]) through export and import: the NDJSON line carries it (null
without one; a line of an older writer may leave it out), the openai-chat import keeps
OpenAI's own `name`, and a bad one is refused as a post's is, naming the line and field."""

from __future__ import annotations

import json
from typing import Any

import pytest
from flask.testing import FlaskClient

from tests.helpers import new_session

SCOPE = "agentId=planner&userId=ada"
CHAT = "?format=openai-chat&agentId=planner&userId=ada"
TURNS = [
    {"role": "user", "name": "Caroline", "content": "I went to the support group."},
    {"role": "assistant", "name": "Melanie", "content": "That took courage."},
    {"role": "user", "content": "Thanks."},
]


def _named_session(client: FlaskClient, auth: dict[str, str]) -> None:
    sid = new_session(client, auth, agent="planner", user="ada")["id"]
    posted = client.post(
        f"/agents-api/sessions/{sid}/messages", json={"messages": TURNS}, headers=auth
    )
    assert posted.status_code == 201, posted.json


def _export(client: FlaskClient, auth: dict[str, str]) -> list[dict[str, Any]]:
    response = client.get(f"/agents-api/export?{SCOPE}", headers=auth)
    assert response.status_code == 200
    return [json.loads(line) for line in response.get_data(as_text=True).splitlines() if line]


def _import(client: FlaskClient, auth: dict[str, str], lines: list[Any], query: str = "") -> Any:
    body = "\n".join(json.dumps(line) for line in lines).encode()
    return client.post(f"/agents-api/import{query}", data=body, headers=auth)


def _messages(client: FlaskClient, auth: dict[str, str]) -> list[tuple[str, str | None, str]]:
    """(role, name, content) of the scope's messages, session by session, in order."""
    listed: Any = client.get(f"/agents-api/sessions?{SCOPE}", headers=auth).json
    rows = []
    for session in listed["sessions"]:
        page: Any = client.get(f"/agents-api/sessions/{session['id']}/messages", headers=auth).json
        rows += [(m["role"], m["name"], m["content"]) for m in page["messages"]]
    return rows


NAMED = [("user", "Caroline", TURNS[0]["content"]), ("assistant", "Melanie", TURNS[1]["content"]),
         ("user", None, "Thanks.")]  # fmt: skip


def test_export_then_import_keeps_each_messages_name_43(
    client: FlaskClient, auth: dict[str, str], other_auth: dict[str, str]
) -> None:
    _named_session(client, auth)
    exported = _export(client, auth)
    assert [line["name"] for line in exported if line["type"] == "message"] == [
        "Caroline", "Melanie", None,
    ]  # fmt: skip
    imported = _import(client, other_auth, exported)
    assert imported.status_code == 200, imported.json
    assert _messages(client, other_auth) == NAMED


def test_a_message_line_of_an_older_writer_without_name_imports_without_one_43(
    client: FlaskClient, auth: dict[str, str], other_auth: dict[str, str]
) -> None:
    _named_session(client, auth)
    older = [{k: v for k, v in line.items() if k != "name"} for line in _export(client, auth)]
    assert _import(client, other_auth, older).status_code == 200
    assert [name for _, name, _ in _messages(client, other_auth)] == [None, None, None]


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"name": "Anne Marie"}, "name: 1 to 64 characters"),
        ({"name": "x" * 65}, "name: 1 to 64 characters"),
        ({"role": "tool", "name": "Caroline"}, "name: only user and assistant messages"),
    ],
    ids=["space", "too-long", "on-a-tool-message"],
)
def test_a_bad_name_in_an_export_is_422_naming_the_line_and_writes_nothing_43(
    client: FlaskClient,
    auth: dict[str, str],
    other_auth: dict[str, str],
    change: dict[str, Any],
    why: str,
) -> None:
    _named_session(client, auth)
    lines = _export(client, auth)
    at = next(i for i, line in enumerate(lines) if line["type"] == "message")
    lines[at] = {**lines[at], **change}
    refused = _import(client, other_auth, lines)
    assert refused.status_code == 422, refused.json
    message = refused.json["error"]["message"]
    assert message.startswith(f"line {at + 1}: ") and why in message, message
    assert _messages(client, other_auth) == []


def test_an_openai_chat_history_keeps_each_speakers_name_43(
    client: FlaskClient, auth: dict[str, str]
) -> None:
    history = [
        {"role": "system", "name": "ops", "content": "You are a listener."},  # skipped
        *TURNS,
        {"role": "tool", "name": "lookup", "tool_call_id": "c1", "content": "{}"},
    ]
    imported = _import(client, auth, [history], CHAT)
    assert imported.status_code == 200, imported.json
    # A tool's `name` is its function's: stored as toolName, never as a speaker.
    assert _messages(client, auth) == [*NAMED, ("tool", None, "{}")]


def test_a_bad_name_in_a_chat_history_is_422_naming_it_and_writes_nothing_43(
    client: FlaskClient, auth: dict[str, str]
) -> None:
    history = [TURNS[0], {"role": "assistant", "name": "Mel anie", "content": "Hi."}]
    refused = _import(client, auth, [history], CHAT)
    assert refused.status_code == 422, refused.json
    assert refused.json["error"]["message"].startswith("line 1: [1].name: 1 to 64 characters")
    assert _messages(client, auth) == []
