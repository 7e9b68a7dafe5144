"""The `recall` tool: the search API's results for the session's own scope, stored in
the thread like every tool call (R7), and never found again by a later search."""

from __future__ import annotations

import json
from typing import Any

import pytest
from flask.testing import FlaskClient

from tests.helpers import new_session, post_message


def recall(client: FlaskClient, auth: dict[str, str], sid: str, arguments: Any) -> Any:
    return client.post(
        f"/agents-api/sessions/{sid}/tools/recall", headers=auth, json={"arguments": arguments}
    )


def test_r7_recall_answers_the_search_of_the_sessions_scope_and_joins_the_thread(
    client: FlaskClient, auth: dict[str, str]
) -> None:
    earlier = new_session(client, auth)
    post_message(client, auth, earlier["id"], "Our wifi password is on the fridge.")
    now = new_session(client, auth)

    answer = recall(client, auth, now["id"], {"query": "wifi password", "limit": 3})

    assert answer.status_code == 200, answer.json
    body: Any = answer.json
    searched: Any = client.get(
        "/agents-api/search?agentId=agent-1&userId=user-1&q=wifi+password&limit=3", headers=auth
    ).json
    assert body["ok"] is True and body["result"]["results"] == searched["results"]
    assert [hit["sessionId"] for hit in body["result"]["results"]] == [earlier["id"]]
    thread: Any = client.get(f"/agents-api/sessions/{now['id']}/messages", headers=auth).json
    stored = [(m["role"], m["toolName"]) for m in thread["messages"]]
    assert stored == [("tool", "recall"), ("tool", "recall")]  # the call, then its result
    assert json.loads(thread["messages"][1]["content"])["result"] == body["result"]


def test_a_recalls_stored_result_is_not_found_by_the_next_recall(
    client: FlaskClient, auth: dict[str, str]
) -> None:
    session = new_session(client, auth)
    post_message(client, auth, session["id"], "The spare key is under the blue pot.")
    recall(client, auth, session["id"], {"query": "spare key"})

    again: Any = recall(client, auth, session["id"], {"query": "spare key"}).json

    assert len(again["result"]["results"]) == 1  # the message, not the tool messages


def test_recall_never_reaches_another_users_words(
    client: FlaskClient, auth: dict[str, str], other_auth: dict[str, str]
) -> None:
    theirs = new_session(client, auth, user="user-2")
    post_message(client, auth, theirs["id"], "My bank PIN is 4321.")
    other_org = new_session(client, other_auth)
    post_message(client, other_auth, other_org["id"], "My bank PIN is 4321.")
    mine = new_session(client, auth)

    answer: Any = recall(client, auth, mine["id"], {"query": "bank PIN"}).json

    assert answer["result"]["results"] == []


@pytest.mark.parametrize(
    ("arguments", "field"),
    [
        ({}, "query"),
        ({"query": ""}, "query"),
        ({"query": "x" * 5_000}, "query"),
        ({"query": "x", "limit": 0}, "limit"),
        ({"query": "x", "limit": 51}, "limit"),
        ({"query": 7}, "query"),
        ({"query": "x", "kind": "topic"}, "kind"),
    ],
)
def test_bad_recall_arguments_are_422_naming_the_field_and_store_nothing(
    client: FlaskClient, auth: dict[str, str], arguments: dict[str, Any], field: str
) -> None:
    session = new_session(client, auth)

    answer = recall(client, auth, session["id"], arguments)

    assert answer.status_code == 422, answer.json
    assert field in answer.json["error"]["message"]  # type: ignore[index]
    thread: Any = client.get(f"/agents-api/sessions/{session['id']}/messages", headers=auth).json
    assert thread["messages"] == []


def test_a_blank_recall_is_a_refusal_the_agent_can_read(
    client: FlaskClient, auth: dict[str, str]
) -> None:
    session = new_session(client, auth)

    answer: Any = recall(client, auth, session["id"], {"query": "   "}).json

    assert answer["ok"] is False and "q" in answer["error"]
