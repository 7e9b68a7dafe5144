"""The built-in tools through HTTP (R7, R8, R19–R23)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from flask.testing import FlaskClient
from sqlalchemy import Connection, text

from shared.curation.rules import KEEP_SET_BY_USER
from tests.helpers import new_session, post_message


def call(
    client: FlaskClient, auth: dict[str, str], sid: str, name: str, arguments: Any, **extra: Any
) -> Any:
    response = client.post(
        f"/agents-api/sessions/{sid}/tools/{name}",
        json={"arguments": arguments, **extra},
        headers=auth,
    )
    assert response.status_code == 200, response.json
    return response.json


@pytest.fixture
def session(client: FlaskClient, auth: dict[str, str]) -> dict[str, Any]:
    return new_session(client, auth)


def test_r8_the_four_built_in_tools_are_openai_functions(
    client: FlaskClient, auth: dict[str, str]
) -> None:
    tools: Any = client.get("/agents-api/tools", headers=auth).json
    names = [t["function"]["name"] for t in tools["tools"]]
    assert names == ["notes", "important_info", "manage_topic_memory", "recall"]
    for tool in tools["tools"]:
        assert tool["type"] == "function"
        assert tool["function"]["parameters"]["type"] == "object"


def test_r7_a_tool_call_and_its_result_are_stored_in_the_thread(
    client: FlaskClient, auth: dict[str, str], session: dict[str, Any]
) -> None:
    sid = session["id"]
    post_message(client, auth, sid, "note that we chose Postgres")
    result = call(
        client, auth, sid, "notes", {"op": "$set", "content": "chose Postgres"}, toolCallId="c-1"
    )
    assert result["ok"] is True and result["toolCallId"] == "c-1"
    messages: Any = client.get(f"/agents-api/sessions/{sid}/messages", headers=auth).json
    tool_messages = [m for m in messages["messages"] if m["role"] == "tool"]
    assert [(m["toolName"], m["toolCallId"]) for m in tool_messages] == [("notes", "c-1")] * 2
    assert json.loads(tool_messages[0]["content"])["call"]["arguments"]["content"] == (
        "chose Postgres"
    )
    assert json.loads(tool_messages[1]["content"])["ok"] is True
    assert all(m["topicId"] == session["activeTopicId"] for m in tool_messages)
    topic: Any = client.get(f"/agents-api/topics/{session['activeTopicId']}", headers=auth).json
    assert topic["messageCount"] == 1  # R12 counts user + assistant only


def test_r23_notes_append_read_and_replace(
    client: FlaskClient, auth: dict[str, str], session: dict[str, Any]
) -> None:
    sid = session["id"]
    call(client, auth, sid, "notes", {"op": "$set", "content": "decided: Postgres"})
    call(client, auth, sid, "notes", {"op": "$set", "content": "decided: Redis broker"})
    read = call(client, auth, sid, "notes", {"op": "read"})
    assert read["result"]["content"] == "decided: Postgres\ndecided: Redis broker"
    call(client, auth, sid, "notes", {"op": "update", "content": "only Postgres"})
    assert call(client, auth, sid, "notes", {"op": "read"})["result"]["content"] == (
        "only Postgres"
    )


def test_r23_notes_of_another_topic_of_the_session_by_id(
    client: FlaskClient, auth: dict[str, str], session: dict[str, Any], connection: Connection
) -> None:
    sid, first = session["id"], session["activeTopicId"]
    call(client, auth, sid, "notes", {"op": "$set", "content": "first topic notes"})
    client.post(f"/agents-api/sessions/{sid}/topics", json={}, headers=auth)
    read = call(client, auth, sid, "notes", {"op": "read", "topicId": first})
    assert read["result"]["content"] == "first topic notes"
    assert call(client, auth, sid, "notes", {"op": "read"})["result"]["content"] == ""
    active_documents = connection.execute(
        text("SELECT count(*) FROM notes WHERE topic_id = :t AND status = 'active'"),
        {"t": first},
    ).scalar_one()
    assert active_documents == 1  # R24: archived only once the summary is stored


def test_r23_notes_of_a_foreign_topic_are_refused(
    client: FlaskClient, auth: dict[str, str], session: dict[str, Any]
) -> None:
    other = new_session(client, auth, user="someone-else")
    result = call(
        client, auth, session["id"], "notes", {"op": "read", "topicId": other["activeTopicId"]}
    )
    assert result["ok"] is False and "not a topic of this session" in result["error"]


def test_r22_important_info_set_read_unset(
    client: FlaskClient, auth: dict[str, str], session: dict[str, Any]
) -> None:
    sid = session["id"]
    call(client, auth, sid, "important_info", {"op": "$set", "key": "tz", "value": "UTC+1"})
    call(client, auth, sid, "important_info", {"op": "$set", "key": "team", "value": ["a", "b"]})
    call(client, auth, sid, "important_info", {"op": "$set", "key": "tz", "value": "UTC+2"})
    everything = call(client, auth, sid, "important_info", {"op": "read"})
    assert everything["result"] == {"facts": {"tz": "UTC+2", "team": ["a", "b"]}}
    one = call(client, auth, sid, "important_info", {"op": "read", "key": "team"})
    assert one["result"] == {"key": "team", "value": ["a", "b"]}
    call(client, auth, sid, "important_info", {"op": "$unset", "key": "tz"})
    missing = call(client, auth, sid, "important_info", {"op": "read", "key": "tz"})
    assert missing["ok"] is False
    # The same document is the scope's, whichever session or route reads it.
    facts: Any = client.get("/agents-api/facts?agentId=agent-1&userId=user-1", headers=auth).json
    assert facts == {"facts": {"team": ["a", "b"]}}


def test_r19_agent_curation_through_the_tool(
    client: FlaskClient, auth: dict[str, str], session: dict[str, Any]
) -> None:
    sid, tid = session["id"], session["activeTopicId"]
    promoted = call(client, auth, sid, "manage_topic_memory", {"action": "promote", "topicId": tid})
    assert promoted["result"] == {"topicId": tid, "memoryState": "promoted"}
    history: Any = client.get(f"/agents-api/topics/{tid}/history", headers=auth).json
    assert [(c["actor"], c["toState"]) for c in history["changes"]] == [("agent", "promoted")]


def test_r20_a_refused_curation_is_a_result_not_an_http_error(
    client: FlaskClient, auth: dict[str, str], session: dict[str, Any]
) -> None:
    sid, tid = session["id"], session["activeTopicId"]
    client.put(f"/agents-api/topics/{tid}/memory", json={"state": "promoted"}, headers=auth)
    refused = call(client, auth, sid, "manage_topic_memory", {"action": "demote", "topicId": tid})
    assert refused == {
        "ok": False,
        "error": KEEP_SET_BY_USER,
        "result": None,
        "toolCallId": refused["toolCallId"],
    }
    topic: Any = client.get(f"/agents-api/topics/{tid}", headers=auth).json
    assert topic["memoryState"] == "promoted"


def test_r21_agent_deprecate_refused_after_user_deprecation(
    client: FlaskClient, auth: dict[str, str], session: dict[str, Any]
) -> None:
    sid, tid = session["id"], session["activeTopicId"]
    client.put(f"/agents-api/topics/{tid}/memory", json={"state": "deprecated"}, headers=auth)
    client.put(f"/agents-api/topics/{tid}/memory", json={"state": "none"}, headers=auth)
    refused = call(
        client, auth, sid, "manage_topic_memory", {"action": "deprecate", "topicId": tid}
    )
    assert refused["ok"] is False and "deprecation" in refused["error"]


def test_r19_the_agent_curates_only_its_own_scope(
    client: FlaskClient, auth: dict[str, str], session: dict[str, Any]
) -> None:
    other_user = new_session(client, auth, user="another-user")
    refused = call(
        client,
        auth,
        session["id"],
        "manage_topic_memory",
        {"action": "promote", "topicId": other_user["activeTopicId"]},
    )
    assert refused["ok"] is False and "not found" in refused["error"]


@pytest.mark.parametrize(
    ("name", "arguments", "field"),
    [
        ("notes", {"op": "$push", "content": "x"}, "op"),
        ("notes", {"op": "$set"}, "content"),
        ("notes", {"op": "read", "topicId": "nope"}, "topicId"),
        ("important_info", {"op": "$set", "key": "k"}, "value"),
        ("important_info", {"op": "$unset"}, "key"),
        ("important_info", {"op": "$set", "key": "", "value": 1}, "key"),
        ("manage_topic_memory", {"action": "undeprecate", "topicId": "x"}, "action"),
        ("manage_topic_memory", {"action": "promote"}, "topicId"),
    ],
)
def test_malformed_tool_arguments_are_422_and_write_nothing(
    client: FlaskClient,
    auth: dict[str, str],
    session: dict[str, Any],
    connection: Connection,
    name: str,
    arguments: dict[str, Any],
    field: str,
) -> None:
    count = "SELECT count(*) FROM messages WHERE session_id = :s"
    before = connection.execute(text(count), {"s": session["id"]}).scalar_one()
    response = client.post(
        f"/agents-api/sessions/{session['id']}/tools/{name}",
        json={"arguments": arguments},
        headers=auth,
    )
    assert response.status_code == 422
    assert field in response.json["error"]["message"]  # type: ignore[index]
    assert connection.execute(text(count), {"s": session["id"]}).scalar_one() == before


def test_an_unknown_tool_is_404(
    client: FlaskClient, auth: dict[str, str], session: dict[str, Any]
) -> None:
    response = client.post(
        f"/agents-api/sessions/{session['id']}/tools/search", json={"arguments": {}}, headers=auth
    )
    assert response.status_code == 404
    assert "search" in response.json["error"]["message"]  # type: ignore[index]
