"""Export (GET /agents-api/export, `driftless export`): every line of a scope, in order,
parseable by the format's own models, and nothing of another scope or org."""

from __future__ import annotations

import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import redis
from click.testing import CliRunner
from flask.testing import FlaskClient
from sqlalchemy.orm import Session, sessionmaker

from shared.domain.limits import MAX_EXPORTS_PER_ORG
from shared.infra.config import Settings
from shared.infra.db.uow import UnitOfWork
from shared.infra.leases import OrgLeases
from shared.infra.queue import RecordingQueue
from shared.portability import format as fmt
from shared.portability.admission import KIND, LEASE_S
from shared.topics.models import Fork
from tests.conftest import new_key
from tests.helpers import new_session, post_message
from worker.cli import main


def _fill(client: FlaskClient, auth: dict[str, str], user: str) -> dict[str, Any]:
    """A session of `user` with every kind of row: two topics, a fork record, messages
    (one a tool call), notes, a curation move, and a fact changed twice."""
    client.put("/agents-api/agents/planner", json={"soul": "Plans."}, headers=auth)
    session = new_session(client, auth, agent="planner", user=user)
    sid, first_topic = session["id"], session["activeTopicId"]
    post_message(client, auth, sid, f"{user} chose PostgreSQL")
    post_message(client, auth, sid, "Noted.", role="assistant")
    client.post(
        f"/agents-api/sessions/{sid}/tools/notes",
        json={"arguments": {"op": "$set", "content": "ledger in PostgreSQL"}},
        headers=auth,
    )
    client.put(f"/agents-api/topics/{first_topic}/memory", json={"state": "promoted"}, headers=auth)
    client.put(f"/agents-api/facts?agentId=planner&userId={user}", json={"tz": "CET"}, headers=auth)
    client.put(f"/agents-api/facts?agentId=planner&userId={user}", json={"tz": "UTC"}, headers=auth)
    second: Any = client.post(f"/agents-api/sessions/{sid}/topics", json={}, headers=auth).json
    post_message(client, auth, sid, "Next: the API.")
    return {**session, "secondTopicId": second["id"]}


def _record_fork(factory: sessionmaker[Session], session: dict[str, Any]) -> None:
    with UnitOfWork(factory, RecordingQueue()) as uow:
        uow.session.add(
            Fork(
                session_id=uuid.UUID(session["id"]),
                from_topic_id=uuid.UUID(session["activeTopicId"]),
                to_topic_id=uuid.UUID(session["secondTopicId"]),
                from_title="Database",
                to_title="API",
                first_message_id=1,
            )
        )
        uow.commit()


def _export(client: FlaskClient, auth: dict[str, str], query: str = "") -> list[Any]:
    response = client.get(f"/agents-api/export{query}", headers=auth)
    assert response.status_code == 200, response.text
    assert response.mimetype == "application/x-ndjson"
    return [fmt.parse_line(line) for line in response.text.splitlines()]


def test_an_export_holds_every_line_type_in_order_and_each_parses(
    client: FlaskClient, auth: dict[str, str], session_factory: sessionmaker[Session]
) -> None:
    ada = _fill(client, auth, "ada")
    _record_fork(session_factory, ada)
    lines = _export(client, auth, "?agentId=planner&userId=ada")
    kinds = [line.type for line in lines]
    assert set(kinds) == set(fmt.LINE_TYPES)
    header = lines[0]
    assert isinstance(header, fmt.Header) and header.version == fmt.VERSION
    assert header.scope == fmt.Scope(agent_id="planner", user_id="ada")
    assert kinds.count("header") == 1 and kinds.count("session") == 1
    # The agent before the sessions, a session's lines after it, the facts last.
    assert kinds.index("agent") < kinds.index("session")
    assert kinds.index("session") < min(
        kinds.index(kind) for kind in ("topic", "fork", "message", "note", "curation")
    )
    assert kinds[-2:] == ["fact", "fact"]
    messages = [line for line in lines if isinstance(line, fmt.Message)]
    said = [m.content for m in messages if m.role != "tool"]
    assert said == ["ada chose PostgreSQL", "Noted.", "Next: the API."]
    # The notes tool call is stored as messages too (R7): its call and its result.
    assert [m.tool_name for m in messages if m.role == "tool"] == ["notes", "notes"]
    assert [m.id for m in messages] == sorted(m.id for m in messages)
    topics = {line.id for line in lines if isinstance(line, fmt.Topic)}
    assert topics == {uuid.UUID(ada["activeTopicId"]), uuid.UUID(ada["secondTopicId"])}
    (curation,) = [line for line in lines if isinstance(line, fmt.Curation)]
    assert (curation.actor, curation.to_state) == ("user", "promoted")
    facts = [line for line in lines if isinstance(line, fmt.Fact)]
    assert [(f.value, f.valid_to is None) for f in facts] == [("CET", False), ("UTC", True)]


def test_a_sessions_lines_stay_after_its_own_session_line(
    client: FlaskClient, auth: dict[str, str]
) -> None:
    for user in ("ada", "bob", "cy"):
        _fill(client, auth, user)
    lines = _export(client, auth, "?agentId=planner")
    session_of_topic: dict[uuid.UUID, uuid.UUID] = {}
    current: uuid.UUID | None = None
    seen: set[uuid.UUID] = set()
    for line in lines:
        if isinstance(line, fmt.Session):
            assert line.id not in seen  # each session once, its lines together
            current = line.id
            seen.add(current)
        elif isinstance(line, fmt.Topic | fmt.Fork | fmt.Message):
            assert line.session_id == current
            if isinstance(line, fmt.Topic):
                session_of_topic[line.id] = line.session_id
        elif isinstance(line, fmt.Note | fmt.Curation):
            assert session_of_topic[line.topic_id] == current
    assert len(seen) == 3
    assert Counter(type(line).__name__ for line in lines)["Message"] == 3 * 5


def test_the_scope_narrows_the_export_and_another_org_sees_nothing(
    client: FlaskClient, auth: dict[str, str], other_auth: dict[str, str]
) -> None:
    _fill(client, auth, "ada")
    _fill(client, auth, "bob")
    only_bob = _export(client, auth, "?agentId=planner&userId=bob")
    users = {line.user_id for line in only_bob if isinstance(line, fmt.Session | fmt.Fact)}
    assert users == {"bob"}
    assert not [line for line in _export(client, auth, "?agentId=other") if line.type != "header"]
    # The same agent and user ids, asked by another org: only its own (empty) header.
    theirs = _export(client, other_auth, "?agentId=planner&userId=bob")
    assert [line.type for line in theirs] == ["header"]


def test_after_erasure_the_users_export_holds_the_header_and_the_agents_profile(
    client: FlaskClient, auth: dict[str, str]
) -> None:
    _fill(client, auth, "ada")
    assert client.delete("/agents-api/agents/planner/users/ada", headers=auth).status_code == 200
    lines = _export(client, auth, "?agentId=planner&userId=ada")
    # The profile belongs to the agent, not to the user: erasure leaves it, export keeps it.
    assert [line.type for line in lines] == ["header", "agent"]


def test_the_export_streams_its_lines_as_it_reads_them(
    client: FlaskClient, auth: dict[str, str]
) -> None:
    session = new_session(client, auth, agent="planner", user="ada")
    batch = [{"role": "user", "content": f"message {n}"} for n in range(1_000)]
    for _ in range(3):
        response = client.post(
            f"/agents-api/sessions/{session['id']}/messages", json={"messages": batch}, headers=auth
        )
        assert response.status_code == 201, response.json
    response = client.get("/agents-api/export?agentId=planner&userId=ada", headers=auth)
    assert response.is_streamed
    body = iter(response.response)
    first = next(body)  # a chunk of lines out before the rest is read
    assert fmt.parse_line(first.splitlines()[0]).type == "header"
    rest = b"".join(body)
    assert 0 < len(first) < len(rest)
    assert (first + rest).decode().count('"type":"message"') == 3_000
    response.close()


def test_an_org_past_its_exports_at_once_is_told_to_retry(
    client: FlaskClient, auth: dict[str, str], org: str, redis_url: str
) -> None:
    leases = OrgLeases(redis.Redis.from_url(redis_url), kind=KIND, lease_s=LEASE_S)
    held = [leases.acquire(org_id=uuid.UUID(org), limit=99) for _ in range(MAX_EXPORTS_PER_ORG)]
    try:
        response = client.get("/agents-api/export", headers=auth)
        assert response.status_code == 429
        assert response.json["error"]["code"] == "too_busy"  # type: ignore[index]
        assert int(response.headers["Retry-After"]) > 0
    finally:
        for lease in held:
            leases.release(org_id=uuid.UUID(org), lease_id=lease)  # type: ignore[arg-type]
    # A finished export gives its slot back: the next ones are admitted.
    for _ in range(MAX_EXPORTS_PER_ORG + 1):
        assert client.get("/agents-api/export", headers=auth).status_code == 200


def test_export_an_org_to_a_file_from_the_command_line(
    settings: Settings,
    committed_factory: sessionmaker[Session],
    database_url: str,
    redis_url: str,
    tmp_path: Path,
) -> None:
    from shared.auth.models import Org
    from shared.auth.service import org_for_key
    from web.app import create_app

    key = new_key(committed_factory)
    auth = {"Authorization": f"Bearer {key}"}
    client = create_app(
        settings, queue=RecordingQueue(), session_factory=committed_factory
    ).test_client()
    _fill(client, auth, "ada")
    _fill(client, auth, "bob")
    with UnitOfWork(committed_factory, RecordingQueue()) as uow:
        org_name = uow.session.get(Org, org_for_key(uow=uow, key=key)).name  # type: ignore[union-attr]
    out = tmp_path / "org.ndjson"
    result = CliRunner().invoke(
        main,
        ["export", "--org", org_name, "-o", str(out)],
        env={"DATABASE_URL": database_url, "REDIS_URL": redis_url},
    )
    assert result.exit_code == 0, result.output
    lines = [fmt.parse_line(line) for line in out.read_text().splitlines()]
    assert lines[0] == fmt.Header(
        exported_at=lines[0].exported_at,  # type: ignore[union-attr]
        scope=fmt.Scope(agent_id=None, user_id=None),
    )
    sessions = {line.user_id for line in lines if isinstance(line, fmt.Session)}
    assert sessions == {"ada", "bob"}
    assert sum(isinstance(line, fmt.Message) for line in lines) == 2 * 5
    unknown = CliRunner().invoke(
        main,
        ["export", "--org", "no-such-org", "-o", str(tmp_path / "x.ndjson")],
        env={"DATABASE_URL": database_url, "REDIS_URL": redis_url},
    )
    assert unknown.exit_code != 0 and "no-such-org" in unknown.output
