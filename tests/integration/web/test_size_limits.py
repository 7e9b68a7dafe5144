"""Every size limit holds on every path that writes the same thing ([2.1] item 6).

The attack: the facts cap lived in the PUT /facts view, so five `important_info $set` of
200 KB built a 1 MB facts document (a 250k-token stable prefix), after which the user's
own `PUT /facts {"small": 1}` was 413; the tool messages stored 200 KB of arguments past
the 100,000-character message limit. The caps now live in the domain (shared/domain/limits.py).
"""

from __future__ import annotations

from typing import Any

import pytest
from flask.testing import FlaskClient
from sqlalchemy import Connection, text

from shared.domain.errors import Invalid
from shared.domain.limits import (
    MAX_FACT_VALUE_BYTES,
    MAX_FACTS_BYTES,
    MAX_MESSAGE_CHARS,
    MAX_NOTES_CHARS,
    json_size,
)
from shared.infra.db.uow import UnitOfWork
from shared.sessions.service import active_topic, append_message, load_session
from tests.helpers import new_session

FACTS = "/agents-api/facts?agentId=agent-1&userId=user-1"


def _tool(client: FlaskClient, auth: dict[str, str], sid: str, name: str, **arguments: Any) -> Any:
    return client.post(
        f"/agents-api/sessions/{sid}/tools/{name}", json={"arguments": arguments}, headers=auth
    )


def _longest_message(connection: Connection, sid: str) -> int:
    longest = connection.execute(
        text("SELECT coalesce(max(length(content)), 0) FROM messages WHERE session_id = :s"),
        {"s": sid},
    ).scalar_one()
    return int(longest)


def test_five_200kb_important_info_sets_store_nothing_and_the_users_put_still_works(
    client: FlaskClient, auth: dict[str, str], connection: Connection
) -> None:
    sid = new_session(client, auth)["id"]
    for i in range(5):
        response = _tool(
            client, auth, sid, "important_info", op="$set", key=f"k{i}", value="x" * 200_000
        )
        assert response.status_code == 422, response.json
        assert "arguments" in response.json["error"]["message"]
    assert client.get(FACTS, headers=auth).json == {"facts": {}}
    assert _longest_message(connection, sid) == 0  # no tool message stored either
    assert client.put(FACTS, json={"small": 1}, headers=auth).status_code == 200


def test_tool_sets_stop_at_the_facts_document_cap_with_a_refusal_the_agent_can_read(
    client: FlaskClient, auth: dict[str, str], connection: Connection
) -> None:
    sid = new_session(client, auth)["id"]
    value = "v" * (MAX_FACT_VALUE_BYTES - 100)
    answers = [
        _tool(client, auth, sid, "important_info", op="$set", key=f"k{i}", value=value).json
        for i in range(6)
    ]
    assert [a["ok"] for a in answers] == [True, True, True, True, False, False]
    assert "the facts document would exceed" in answers[4]["error"]
    facts: Any = client.get(FACTS, headers=auth).json
    assert sorted(facts["facts"]) == ["k0", "k1", "k2", "k3"]
    assert json_size(facts["facts"]) <= MAX_FACTS_BYTES
    assert _longest_message(connection, sid) < MAX_MESSAGE_CHARS
    # The refusal left room: the user's own small write still fits.
    assert client.put(FACTS, json={"small": 1}, headers=auth).status_code == 200


def test_one_fact_value_over_its_cap_is_refused_on_both_paths(
    client: FlaskClient, auth: dict[str, str]
) -> None:
    big = "x" * (MAX_FACT_VALUE_BYTES + 1)
    put = client.put(FACTS, json={"big": big}, headers=auth)
    assert put.status_code == 413 and put.json["error"]["code"] == "too_large"  # type: ignore[index]
    sid = new_session(client, auth)["id"]
    tool: Any = _tool(client, auth, sid, "important_info", op="$set", key="big", value=big).json
    assert tool["ok"] is False and "the fact 'big' would exceed" in tool["error"]
    assert client.get(FACTS, headers=auth).json == {"facts": {}}


def test_notes_appends_stop_at_the_notes_cap(client: FlaskClient, auth: dict[str, str]) -> None:
    sid = new_session(client, auth)["id"]
    chunk = "n" * 6_000
    answers = [_tool(client, auth, sid, "notes", op="$set", content=chunk).json for _ in range(4)]
    assert [a["ok"] for a in answers] == [True, True, True, False]
    assert "update" in answers[3]["error"]
    notes: Any = _tool(client, auth, sid, "notes", op="read").json
    assert len(notes["result"]["content"]) <= MAX_NOTES_CHARS


def test_working_memory_over_its_cap_is_413(client: FlaskClient, auth: dict[str, str]) -> None:
    sid = new_session(client, auth)["id"]
    response = client.put(
        f"/agents-api/sessions/{sid}/working-memory", json={"blob": "x" * 20_000}, headers=auth
    )
    assert response.status_code == 413


def test_a_message_past_the_limit_is_refused_by_the_domain_whoever_writes_it(
    client: FlaskClient, auth: dict[str, str], uow: UnitOfWork
) -> None:
    """The tool path and any future writer share append_message's check, not a view's."""
    created = new_session(client, auth)
    with uow:
        org_id = uow.session.execute(
            text("SELECT org_id FROM sessions WHERE id = :s"), {"s": created["id"]}
        ).scalar_one()
        session = load_session(uow=uow, org_id=org_id, session_id=created["id"], lock=True)
        topic = active_topic(uow=uow, session_id=session.id)
        with pytest.raises(Invalid, match="at most 100000"):
            append_message(
                uow=uow, session=session, topic=topic, role="tool",
                content="x" * (MAX_MESSAGE_CHARS + 1),
            )  # fmt: skip
