"""Durable facts (R22) and the memory block (R11, R16, R18) through HTTP."""

from __future__ import annotations

from typing import Any

import pytest
from flask.testing import FlaskClient
from sqlalchemy import Connection, text

from shared.auth.service import hash_key
from tests.helpers import new_session

FACTS = "/agents-api/facts?agentId=planner&userId=ada"
MEMORY = "/agents-api/memory?agentId=planner&userId=ada"


def test_r22_facts_merge_by_key_and_delete(client: FlaskClient, auth: dict[str, str]) -> None:
    assert client.get(FACTS, headers=auth).json == {"facts": {}}
    first: Any = client.put(FACTS, json={"tz": "UTC", "lang": "en"}, headers=auth).json
    assert first == {"facts": {"tz": "UTC", "lang": "en"}}
    merged: Any = client.put(FACTS, json={"tz": "CET", "plan": {"tier": 2}}, headers=auth).json
    assert merged == {"facts": {"tz": "CET", "lang": "en", "plan": {"tier": 2}}}
    assert (
        client.delete("/agents-api/facts/lang?agentId=planner&userId=ada", headers=auth).status_code
        == 204
    )
    assert (
        client.delete("/agents-api/facts/lang?agentId=planner&userId=ada", headers=auth).status_code
        == 204
    )  # idempotent
    assert client.get(FACTS, headers=auth).json == {"facts": {"tz": "CET", "plan": {"tier": 2}}}


def test_r22_facts_are_scoped_to_org_agent_and_user(
    client: FlaskClient, auth: dict[str, str], other_auth: dict[str, str]
) -> None:
    client.put(FACTS, json={"secret": 1}, headers=auth)
    assert client.get(FACTS, headers=other_auth).json == {"facts": {}}
    assert client.get("/agents-api/facts?agentId=planner&userId=bob", headers=auth).json == {
        "facts": {}
    }


@pytest.mark.parametrize(
    ("url", "body", "status"),
    [
        (FACTS, {}, 422),
        (FACTS, [1], 422),
        (FACTS, {"": 1}, 422),
        ("/agents-api/facts?agentId=planner", {"a": 1}, 422),
        (FACTS, {"blob": "x" * 70_000}, 413),
    ],
)
def test_bad_facts_writes_are_rejected_and_write_nothing(
    client: FlaskClient,
    auth: dict[str, str],
    connection: Connection,
    url: str,
    body: Any,
    status: int,
) -> None:
    response = client.put(url, json=body, headers=auth)
    assert response.status_code == status
    # Nothing written for this test's org (other tests commit facts of their own orgs).
    key_hash = hash_key(auth["Authorization"].removeprefix("Bearer "))
    written = connection.execute(
        text(
            "SELECT count(*) FROM facts WHERE org_id ="
            " (SELECT org_id FROM api_keys WHERE key_hash = :h)"
        ),
        {"h": key_hash},
    ).scalar_one()
    assert written == 0


def _curated_topic(client: FlaskClient, auth: dict[str, str], state: str) -> str:
    """A closed topic of planner/ada that the user put in `state`."""
    session = new_session(client, auth, agent="planner", user="ada")
    tid: str = session["activeTopicId"]
    client.post(f"/agents-api/sessions/{session['id']}/topics", json={}, headers=auth)
    client.put(f"/agents-api/topics/{tid}/memory", json={"state": state}, headers=auth)
    return tid


def test_r18_memory_shows_promoted_summaries_and_deprecated_titles(
    client: FlaskClient, auth: dict[str, str], connection: Connection
) -> None:
    kept = _curated_topic(client, auth, "promoted")
    reversed_ = _curated_topic(client, auth, "deprecated")
    _curated_topic(client, auth, "none")
    for tid, title in ((kept, "Stack"), (reversed_, "Use MongoDB")):
        connection.execute(
            text("UPDATE topics SET title = :t, summary = 'the summary' WHERE id = :id"),
            {"t": title, "id": tid},
        )
    memory: Any = client.get(MEMORY, headers=auth).json
    assert [(e["title"], e["summary"], e["deprecated"]) for e in memory["entries"]] == [
        ("Stack", "the summary", False),
        ("Use MongoDB", None, True),
    ]
    assert memory["truncated"] is False and memory["dropped"] == 0
    assert memory["tokens"] > 0


def test_r16_memory_over_budget_drops_the_oldest(
    client: FlaskClient, auth: dict[str, str], connection: Connection, settings: Any
) -> None:
    long_summary = "word " * 600  # ≈ 750 tokens each; the budget (2000) holds two
    tids = [_curated_topic(client, auth, "promoted") for _ in range(4)]
    for i, tid in enumerate(tids):
        connection.execute(
            text("UPDATE topics SET title = :t, summary = :s WHERE id = :id"),
            {"t": f"T{i}", "s": long_summary, "id": tid},
        )
    memory: Any = client.get(MEMORY, headers=auth).json
    assert [e["title"] for e in memory["entries"]] == ["T2", "T3"]
    assert memory["truncated"] is True and memory["dropped"] == 2
    assert memory["tokens"] <= settings.memory_token_budget


def test_memory_of_another_scope_is_empty(
    client: FlaskClient, auth: dict[str, str], other_auth: dict[str, str]
) -> None:
    _curated_topic(client, auth, "promoted")
    assert client.get(MEMORY, headers=other_auth).json["entries"] == []  # type: ignore[index]
    other_user: Any = client.get("/agents-api/memory?agentId=planner&userId=bob", headers=auth).json
    assert other_user["entries"] == []


def test_memory_needs_both_scope_parameters(client: FlaskClient, auth: dict[str, str]) -> None:
    response = client.get("/agents-api/memory?agentId=planner", headers=auth)
    assert response.status_code == 422
    assert "userId" in response.json["error"]["message"]  # type: ignore[index]
