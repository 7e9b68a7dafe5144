"""[4.1] An import applies the API's rules: every imported object passes the caps and
shapes of its route (a bad line is a 4xx naming its line and writes nothing of its
session), and what the context cannot render is refused by the route too."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from flask.testing import FlaskClient
from sqlalchemy import text
from sqlalchemy.orm import Session, sessionmaker

from tests.helpers import new_session
from tests.integration.portability.export_file import body, export_lines

NDJSON = {"Content-Type": "application/x-ndjson"}
AGENT = "/agents-api/agents/planner"
FACTS = "/agents-api/facts?agentId=planner&userId=ada"


def _import(client: FlaskClient, auth: dict[str, str], lines: list[dict[str, Any]]) -> Any:
    data = body([json.dumps(line) for line in lines])
    return client.post("/agents-api/import", data=data, headers={**auth, **NDJSON})


def _lines() -> list[dict[str, Any]]:
    """One session's export, as objects to spoil."""
    return [json.loads(line) for line in export_lines(sessions=1, messages=6)]


def _first(lines: list[dict[str, Any]], kind: str) -> int:
    return next(n for n, line in enumerate(lines) if line["type"] == kind)


def _sessions(session_factory: sessionmaker[Session], org: str) -> int:
    with session_factory() as session:
        return session.execute(
            text("SELECT count(*) FROM sessions WHERE org_id = :org"), {"org": org}
        ).scalar_one()


def _refused(response: Any, line: int, *words: str) -> str:
    message: str = response.json["error"]["message"]
    assert 400 <= response.status_code < 500 and response.status_code != 404, message
    assert message.startswith(f"line {line}: "), message
    assert all(word in message for word in words), message
    return message


@pytest.mark.parametrize(
    ("field", "value", "named"),
    [
        ("soul", "s" * 900_000, "soul"),
        ("tools", [{"function": "x"}], "tools.0"),
        ("tools", ["search"], "tools.0"),
        ("skills", ["s"] * 201, "skills"),
    ],
)
def test_an_imported_agent_passes_the_routes_caps_and_shapes_41(
    client: FlaskClient, auth: dict[str, str], field: str, value: Any, named: str
) -> None:
    lines = _lines()
    at = _first(lines, "agent")
    lines[at][field] = value
    _refused(_import(client, auth, lines), at + 1, named)
    assert client.get(AGENT, headers=auth).status_code == 404  # nothing written


def test_put_agents_refuses_tools_that_are_not_function_definitions_41(
    client: FlaskClient, auth: dict[str, str]
) -> None:
    refused = client.put(AGENT, json={"tools": [{"function": "x"}]}, headers=auth)
    assert refused.status_code == 422
    assert "tools.0" in refused.json["error"]["message"]
    nameless = client.put(AGENT, json={"tools": [{"description": "no name"}]}, headers=auth)
    assert nameless.status_code == 422 and "tools.0.name" in nameless.json["error"]["message"]
    assert client.get(AGENT, headers=auth).status_code == 404
    wrapped = {"type": "function", "function": {"name": "lookup", "description": "Find."}}
    tools = [wrapped, {"name": "search", "parameters": {"type": "object"}}]
    assert client.put(AGENT, json={"tools": tools}, headers=auth).status_code == 200
    session = new_session(client, auth, agent="planner", user="ada")
    posted = client.post(
        f"/agents-api/sessions/{session['id']}/messages?context=true",
        json={"role": "user", "content": "hello"}, headers=auth,
    )  # fmt: skip
    assert posted.status_code == 201, posted.json
    names = [
        t.get("function", t)["name"] for t in posted.json["context"]["layers"]["stable"]["tools"]
    ]
    assert names[-2:] == ["lookup", "search"]


@pytest.mark.parametrize(
    ("kind", "field", "value", "named"),
    [
        ("note", "content", "n" * 900_000, "20000 characters"),
        ("topic", "summary", "s" * 400_000, "summary"),
        ("topic", "title", "t" * 10_000, "title"),
        ("fork", "fromTitle", "t" * 10_000, "fromTitle"),
        ("topic", "createdAt", "0001-01-01T00:00:00+14:00", "createdAt"),
        ("message", "createdAt", "9999-12-31T23:59:59-01:00", "createdAt"),
    ],
)
def test_an_imported_session_keeps_the_prompts_caps_and_the_time_range_41(
    client: FlaskClient, auth: dict[str, str], org: str,
    session_factory: sessionmaker[Session], kind: str, field: str, value: str, named: str,
) -> None:  # fmt: skip
    lines = _lines()
    at = _first(lines, kind)
    lines[at][field] = value
    _refused(_import(client, auth, lines), at + 1, named)
    assert _sessions(session_factory, org) == 0  # nothing of the line's session


def test_an_import_timestamp_outside_the_years_1_to_9999_is_a_422_41(
    client: FlaskClient, auth: dict[str, str]
) -> None:
    lines = _lines()
    lines[0]["exportedAt"] = "0001-01-01T00:00:00+14:00"
    response = _import(client, auth, lines)
    assert response.status_code == 422
    _refused(response, 1, "exportedAt", "years 1 to 9999")


def test_a_fact_from_the_far_end_of_time_is_refused_and_facts_stay_writable_41(
    client: FlaskClient, auth: dict[str, str]
) -> None:
    lines = _lines()
    at = _first(lines, "fact")
    lines[at + 1]["validFrom"] = "9999-12-31T23:59:59.999999Z"
    response = _import(client, auth, lines)
    assert response.status_code == 422
    _refused(response, at + 2, "validFrom", "future")
    # The user's next writes of the key work: no stuck value.
    assert client.put(FACTS, json={"tz": "PST"}, headers=auth).status_code == 200
    gone = client.delete("/agents-api/facts/tz?agentId=planner&userId=ada", headers=auth)
    assert gone.status_code == 204
    assert client.get(FACTS, headers=auth).json["facts"] == {}


def test_a_profile_stored_before_the_rule_still_reads_and_renders_41(
    client: FlaskClient, auth: dict[str, str], session_factory: sessionmaker[Session]
) -> None:
    agent = f"legacy-{uuid.uuid4().hex[:8]}"
    assert client.put(f"/agents-api/agents/{agent}", json={}, headers=auth).status_code == 200
    with session_factory() as session:  # as a row written before the route refused these
        session.execute(
            text("UPDATE agents SET tools = CAST(:tools AS jsonb) WHERE agent_id = :agent"),
            {"tools": json.dumps([{"function": "x"}, "search"]), "agent": agent},
        )
        session.commit()
    read = client.get(f"/agents-api/agents/{agent}", headers=auth)
    assert read.status_code == 200 and read.json["tools"] == [{"function": "x"}, "search"]
    session_id = new_session(client, auth, agent=agent, user="ada")["id"]
    posted = client.post(
        f"/agents-api/sessions/{session_id}/messages?context=true",
        json={"role": "user", "content": "hello"}, headers=auth,
    )  # fmt: skip
    assert posted.status_code == 201, posted.json
