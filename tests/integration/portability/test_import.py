"""POST /agents-api/import: an export restored into the caller's org with new ids and its
references kept, idempotent, one transaction per session, and no model call."""

from __future__ import annotations

import io
import json
from typing import Any

import psycopg2.extensions
import psycopg2.extras
from flask.testing import FlaskClient
from sqlalchemy import text
from sqlalchemy.orm import Session, sessionmaker

from shared.auth.service import org_for_key
from shared.domain.limits import Limits
from shared.infra.db.engine import make_engine, make_session_factory
from shared.infra.db.uow import UnitOfWork
from shared.infra.queue import EVALUATE_TOPIC, SUMMARIZE_TOPIC, RecordingQueue
from shared.portability.importing import import_stream
from tests.conftest import new_key
from tests.integration.portability.export_file import body, export_lines

NDJSON = {"Content-Type": "application/x-ndjson"}
TABLES = ("sessions", "topics", "messages", "notes", "memory_changes", "forks", "fact_versions")


def _import(client: FlaskClient, auth: dict[str, str], data: bytes, query: str = "") -> Any:
    return client.post(f"/agents-api/import{query}", data=data, headers={**auth, **NDJSON})


def _counts(factory: sessionmaker[Session], org: str) -> dict[str, int]:
    """Rows of the org in each table an import writes."""
    of_org = {
        "sessions": "SELECT count(*) FROM sessions WHERE org_id = :org",
        "topics": "SELECT count(*) FROM topics t JOIN sessions s ON s.id = t.session_id"
        " WHERE s.org_id = :org",
        "messages": "SELECT count(*) FROM messages m JOIN sessions s ON s.id = m.session_id"
        " WHERE s.org_id = :org",
        "notes": "SELECT count(*) FROM notes n JOIN topics t ON t.id = n.topic_id"
        " JOIN sessions s ON s.id = t.session_id WHERE s.org_id = :org",
        "memory_changes": "SELECT count(*) FROM memory_changes c JOIN topics t"
        " ON t.id = c.topic_id JOIN sessions s ON s.id = t.session_id WHERE s.org_id = :org",
        "forks": "SELECT count(*) FROM forks f JOIN sessions s ON s.id = f.session_id"
        " WHERE s.org_id = :org",
        "fact_versions": "SELECT count(*) FROM fact_versions WHERE org_id = :org",
    }
    with factory() as session:
        return {
            name: session.execute(text(sql), {"org": org}).scalar_one()
            for name, sql in of_org.items()
        }


def test_an_export_is_restored_with_new_ids_and_its_references_kept(
    client: FlaskClient, auth: dict[str, str], org: str, queue: RecordingQueue,
    session_factory: sessionmaker[Session],
) -> None:  # fmt: skip
    lines = export_lines(sessions=2, messages=6)
    response = _import(client, auth, body(lines))
    assert response.status_code == 200, response.json
    assert response.json["imported"] == {
        "sessions": 2, "skippedSessions": 0, "topics": 4, "messages": 12, "agents": 1,
        "facts": 2,
    }  # fmt: skip
    assert _counts(session_factory, org) == {
        "sessions": 2, "topics": 4, "messages": 12, "notes": 4, "memory_changes": 2,
        "forks": 2, "fact_versions": 2,
    }  # fmt: skip
    source_session = next(line for line in lines if '"type":"session"' in line)
    sessions: Any = client.get("/agents-api/sessions?agentId=planner&userId=ada", headers=auth).json
    ids = [s["id"] for s in sessions["sessions"]]
    assert len(ids) == 2 and all(i not in source_session for i in ids)  # new ids
    view: Any = client.get(f"/agents-api/sessions/{ids[0]}", headers=auth).json
    closed = next(t for t in view["topics"] if t["status"] == "closed")
    active = next(t for t in view["topics"] if t["status"] == "active")
    assert view["activeTopicId"] == active["id"]  # the active topic stays active
    assert closed["summary"] == "Chose PostgreSQL for the ledger."
    assert closed["memoryState"] == "promoted" and closed["messageCount"] == 2
    messages: Any = client.get(f"/agents-api/sessions/{ids[0]}/messages", headers=auth).json
    stored = messages["messages"]
    assert [m["content"] for m in stored] == [
        f"message {n}: we keep the ledger in PostgreSQL" for n in range(6)
    ]
    assert [m["topicId"] for m in stored] == [closed["id"]] * 3 + [active["id"]] * 3
    with session_factory() as session:
        topic = session.execute(
            text("SELECT message_count, tool_message_count, last_message_id,"
                 " summarized_through_id FROM topics WHERE id = :id"), {"id": closed["id"]},
        ).one()  # fmt: skip
        fork = session.execute(
            text("SELECT from_topic_id, to_topic_id, first_message_id FROM forks"
                 " WHERE session_id = :id"), {"id": ids[0]},
        ).one()  # fmt: skip
    assert (topic.message_count, topic.tool_message_count) == (2, 1)
    assert topic.last_message_id == topic.summarized_through_id == stored[2]["id"]
    assert (str(fork.from_topic_id), str(fork.to_topic_id)) == (closed["id"], active["id"])
    assert fork.first_message_id == stored[3]["id"]
    notes: Any = client.get(f"/agents-api/topics/{active['id']}/notes", headers=auth).json
    assert "deploy Friday" in str(notes)
    facts: Any = client.get("/agents-api/facts?agentId=planner&userId=ada", headers=auth).json
    assert facts["facts"] == {"tz": "CET"}
    agent: Any = client.get("/agents-api/agents/planner", headers=auth).json
    assert agent["soul"] == "plans things"
    # No model call: no summary or evaluation for a topic whose summary the file carries.
    assert not [j for j in queue.sent if j.task in (SUMMARIZE_TOPIC, EVALUATE_TOPIC)]
    # The imported active topic takes new messages as any other.
    posted = client.post(
        f"/agents-api/sessions/{ids[0]}/messages", json={"role": "user", "content": "more"},
        headers=auth,
    )  # fmt: skip
    assert posted.status_code == 201 and posted.json["topicId"] == active["id"]


def test_the_same_file_twice_changes_nothing(
    client: FlaskClient, auth: dict[str, str], org: str, session_factory: sessionmaker[Session]
) -> None:
    data = body(export_lines(sessions=3, messages=5))
    assert _import(client, auth, data).status_code == 200
    before = _counts(session_factory, org)
    again = _import(client, auth, data)
    assert again.status_code == 200
    assert again.json["imported"] == {
        "sessions": 0, "skippedSessions": 3, "topics": 0, "messages": 0, "agents": 0,
        "facts": 0,
    }  # fmt: skip
    assert _counts(session_factory, org) == before


def test_a_bad_line_names_it_and_keeps_the_sessions_before_it(
    client: FlaskClient, auth: dict[str, str], org: str, session_factory: sessionmaker[Session]
) -> None:
    lines = export_lines(sessions=2, messages=6)
    second = [n for n, line in enumerate(lines) if '"type":"session"' in line][1]
    bad = second + 1  # the closed topic's line of the second session: its 1-based number is bad + 1
    lines[bad] = lines[bad].replace('"status":"closed"', '"status":"archived"')
    response = _import(client, auth, body(lines))
    assert response.status_code == 422
    message = response.json["error"]["message"]
    assert message.startswith(f"line {bad + 1}: ")
    assert "status" in message and "1 session(s) and 6 message(s) before it" in message
    counts = _counts(session_factory, org)
    assert (counts["sessions"], counts["messages"]) == (1, 6)  # the second session: nothing


def test_a_line_that_is_not_json_is_a_400_naming_it(
    client: FlaskClient, auth: dict[str, str], org: str, session_factory: sessionmaker[Session]
) -> None:
    lines = export_lines(sessions=1, messages=6)
    lines[6] = '{"type": "message", '
    response = _import(client, auth, body(lines))
    assert response.status_code == 400
    assert response.json["error"]["message"].startswith("line 7: not JSON")
    assert _counts(session_factory, org)["sessions"] == 0


def test_an_unknown_version_or_a_missing_header_is_refused(
    client: FlaskClient, auth: dict[str, str]
) -> None:
    lines = export_lines(sessions=1)
    lines[0] = lines[0].replace('"version":1', '"version":7')
    response = _import(client, auth, body(lines))
    assert response.status_code == 422
    assert response.json["error"]["message"].startswith("line 1: ")
    assert "version 7" in response.json["error"]["message"]
    headless = _import(client, auth, body(export_lines(sessions=1)[1:]))
    assert headless.status_code == 422
    assert "line 1: the first line must be the header" in headless.json["error"]["message"]
    assert _import(client, auth, b"").status_code == 422


def test_a_line_past_its_bound_is_413_and_deep_json_422(
    client: FlaskClient, auth: dict[str, str]
) -> None:
    header = export_lines(sessions=0)[0]
    huge = _import(client, auth, body([header, "x" * (1024 * 1024 + 10)]))
    assert huge.status_code == 413 and huge.json["error"]["message"].startswith("line 2: ")
    deep = _import(client, auth, body([header, "[" * 100_000]))
    assert deep.status_code == 422 and "nested deeper" in deep.json["error"]["message"]


def test_an_import_lands_only_in_the_callers_org(
    client: FlaskClient, auth: dict[str, str], other_auth: dict[str, str]
) -> None:
    data = body(export_lines(sessions=1))
    assert _import(client, auth, data).status_code == 200
    theirs = _import(client, other_auth, data)  # the same file in another org: its own copy
    assert theirs.json["imported"]["sessions"] == 1
    mine: Any = client.get("/agents-api/sessions?agentId=planner&userId=ada", headers=auth).json
    other: Any = client.get(
        "/agents-api/sessions?agentId=planner&userId=ada", headers=other_auth
    ).json
    assert {s["id"] for s in mine["sessions"]}.isdisjoint(s["id"] for s in other["sessions"])
    sid = mine["sessions"][0]["id"]
    assert client.get(f"/agents-api/sessions/{sid}", headers=other_auth).status_code == 404


def test_what_copy_escapes_is_stored_as_the_file_has_it(
    client: FlaskClient, auth: dict[str, str]
) -> None:
    # Messages are written with COPY's text format: its delimiter, line ends, backslash and
    # its NULL marker must come back as the characters, not as what they mean to COPY.
    tricky = ["tab\there", "two\nlines\r\nend", "back\\slash", "\\N", "\\.", "a\\tb", "é ✓"]
    lines = export_lines(sessions=1, messages=len(tricky))
    for n, content in enumerate(tricky):
        at = next(i for i, line in enumerate(lines) if f'"content":"message {n}:' in line)
        message = json.loads(lines[at])
        message["content"] = content
        if message["role"] == "tool":
            message["toolName"], message["toolCallId"] = "a\tb\\N", "\\N"
        lines[at] = json.dumps(message)
    assert _import(client, auth, body(lines)).status_code == 200
    sessions: Any = client.get("/agents-api/sessions?agentId=planner&userId=ada", headers=auth).json
    sid = sessions["sessions"][0]["id"]
    stored: Any = client.get(f"/agents-api/sessions/{sid}/messages", headers=auth).json
    assert [m["content"] for m in stored["messages"]] == tricky
    tools = [m for m in stored["messages"] if m["role"] == "tool"]
    assert tools and all((m["toolName"], m["toolCallId"]) == ("a\tb\\N", "\\N") for m in tools)


def test_a_green_connection_that_cannot_copy_imports_all_the_same(
    session_factory: sessionmaker[Session],
) -> None:
    # The gevent web's connections are green (psycogreen's wait callback), and psycopg2
    # has no COPY on them; the import inserts there instead. Committed, on an engine whose
    # connections are made green (the suite's own connection is not).
    url = session_factory.kw["bind"].engine.url.render_as_string(hide_password=False)
    psycopg2.extensions.set_wait_callback(psycopg2.extras.wait_select)
    try:
        engine = make_engine(url)
        factory = make_session_factory(engine)
        with UnitOfWork(factory, RecordingQueue()) as uow:
            org = org_for_key(uow=uow, key=new_key(factory))
        imported = import_stream(
            new_uow=lambda: UnitOfWork(factory, RecordingQueue()), org_id=org,
            stream=io.BytesIO(body(export_lines(sessions=1, messages=6))), limits=Limits(),
        )  # fmt: skip
        counts = _counts(factory, str(org))
        engine.dispose()
    finally:
        psycopg2.extensions.set_wait_callback(None)
    assert imported.as_dict()["messages"] == 6
    assert counts["messages"] == 6
