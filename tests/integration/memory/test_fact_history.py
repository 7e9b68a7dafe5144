"""The history of durable facts: every value a key held, when, and who set or removed it."""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any

import pytest
from flask.testing import FlaskClient

from shared.facts.history import fact_lines, import_fact_version
from shared.facts.service import merge_facts, read_facts
from shared.infra.db.uow import UnitOfWork
from shared.memory.scope import Scope
from tests.helpers import new_session

SCOPE = "agentId=planner&userId=ada"
FACTS = f"/agents-api/facts?{SCOPE}"


def history(client: FlaskClient, auth: dict[str, str], key: str, query: str = SCOPE) -> Any:
    response = client.get(f"/agents-api/facts/history?{query}&key={key}", headers=auth)
    assert response.status_code == 200, response.json
    return response.json


def agent_sets(client: FlaskClient, auth: dict[str, str], sid: str, key: str, value: Any) -> None:
    response = client.post(
        f"/agents-api/sessions/{sid}/tools/important_info",
        json={"arguments": {"op": "$set", "key": key, "value": value}},
        headers=auth,
    )
    assert response.json["result"] == {"key": key, "value": value}  # type: ignore[index]


def moment(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text)


def test_each_change_keeps_the_value_it_replaces_with_when_and_who(
    client: FlaskClient, auth: dict[str, str]
) -> None:
    session = new_session(client, auth, agent="planner", user="ada")
    client.put(FACTS, json={"tz": "UTC", "lang": "en"}, headers=auth)  # the user
    agent_sets(client, auth, session["id"], "tz", "CET")  # the agent, through its tool
    assert client.delete(f"/agents-api/facts/tz?{SCOPE}", headers=auth).status_code == 204
    client.put(FACTS, json={"tz": None}, headers=auth)  # JSON null is a value, not a removal

    rows = history(client, auth, "tz")["history"]
    assert [(r["value"], r["changedBy"], r["removedBy"]) for r in rows] == [
        (None, "user", None),
        ("CET", "agent", "user"),
        ("UTC", "user", None),
    ]
    newest, removed, first = rows
    assert newest["validTo"] is None  # the current value
    assert removed["validFrom"] == first["validTo"]  # replaced: the chain has no gap
    # Removed, then set again: a gap, the time the key had no value.
    assert moment(first["validFrom"]) < moment(removed["validFrom"])
    assert moment(removed["validFrom"]) < moment(removed["validTo"]) < moment(newest["validFrom"])
    # The other key changed once.
    assert [r["value"] for r in history(client, auth, "lang")["history"]] == ["en"]
    assert history(client, auth, "never")["history"] == []


def test_the_context_shows_only_the_current_values(
    client: FlaskClient, auth: dict[str, str]
) -> None:
    session = new_session(client, auth, agent="planner", user="ada")
    client.put(FACTS, json={"tz": "UTC", "old": 1}, headers=auth)
    client.put(FACTS, json={"tz": "CET"}, headers=auth)
    client.delete(f"/agents-api/facts/old?{SCOPE}", headers=auth)
    body: Any = client.get(f"/agents-api/sessions/{session['id']}/context", headers=auth).json
    assert body["layers"]["stable"]["durableFacts"] == {"tz": "CET"}


def test_another_org_or_scope_never_sees_the_history(
    client: FlaskClient, auth: dict[str, str], other_auth: dict[str, str]
) -> None:
    client.put(FACTS, json={"secret": "s1"}, headers=auth)
    client.put(FACTS, json={"secret": "s2"}, headers=auth)
    assert history(client, other_auth, "secret") == {"history": [], "nextBefore": None}
    assert history(client, auth, "secret", "agentId=planner&userId=bob")["history"] == []
    assert history(client, auth, "secret", "agentId=other&userId=ada")["history"] == []


def test_a_long_history_pages_newest_first(client: FlaskClient, auth: dict[str, str]) -> None:
    for n in range(5):
        client.put(FACTS, json={"count": n}, headers=auth)
    first = history(client, auth, "count&limit=2")
    assert [r["value"] for r in first["history"]] == [4, 3]
    second = history(client, auth, f"count&limit=2&before={first['nextBefore']}")
    third = history(client, auth, f"count&limit=2&before={second['nextBefore']}")
    assert [r["value"] for r in second["history"] + third["history"]] == [2, 1, 0]
    assert third["nextBefore"] is None


@pytest.mark.parametrize(
    ("query", "field"),
    [
        (SCOPE, "key"),
        (f"{SCOPE}&key=", "key"),
        (f"{SCOPE}&key={'k' * 201}", "key"),
        ("agentId=planner&key=tz", "userId"),
        (f"{SCOPE}&key=tz&limit=0", "limit"),
        (f"{SCOPE}&key=tz&limit=1001", "limit"),
        (f"{SCOPE}&key=tz&before=yesterday", "before"),
        (f"{SCOPE}&key=tz&before=2026-01-01T00:00:00", "before"),
    ],
)
def test_a_bad_query_is_422_naming_the_field(
    client: FlaskClient, auth: dict[str, str], query: str, field: str
) -> None:
    response = client.get(f"/agents-api/facts/history?{query}", headers=auth)
    assert response.status_code == 422, response.json
    assert field in response.json["error"]["message"]  # type: ignore[index]


def test_erasure_removes_the_history(client: FlaskClient, auth: dict[str, str]) -> None:
    client.put(FACTS, json={"tz": "UTC"}, headers=auth)
    client.put(FACTS, json={"tz": "CET"}, headers=auth)
    client.put("/agents-api/facts?agentId=planner&userId=bob", json={"tz": "PST"}, headers=auth)
    erased: Any = client.delete("/agents-api/agents/planner/users/ada", headers=auth).json
    assert erased["erased"]["factVersions"] == 2
    assert history(client, auth, "tz")["history"] == []
    bob = history(client, auth, "tz", "agentId=planner&userId=bob")["history"]
    assert [r["value"] for r in bob] == ["PST"]  # another user of the agent keeps theirs


T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def test_an_imported_version_is_laid_in_once_and_a_current_one_becomes_current(
    uow: UnitOfWork, org: str
) -> None:
    with uow:
        scope = Scope(uuid.UUID(org), "planner", "ada")
        old = {"key": "tz", "value": "UTC", "changed_by": "agent"}
        assert import_fact_version(
            uow=uow, scope=scope, valid_from=T0, valid_to=T0 + dt.timedelta(days=1), **old
        )
        current = {"key": "tz", "value": "CET", "changed_by": "user"}
        one_day = T0 + dt.timedelta(days=1)
        assert import_fact_version(
            uow=uow, scope=scope, valid_from=one_day, valid_to=None, **current
        )
        # The same versions again: nothing changes.
        assert not import_fact_version(
            uow=uow, scope=scope, valid_from=one_day, valid_to=None, **current
        )
        assert not import_fact_version(
            uow=uow, scope=scope, valid_from=T0, valid_to=T0 + dt.timedelta(days=1), **old
        )
        assert read_facts(uow=uow, scope=scope) == {"tz": "CET"}

        # A later change by the user closes the imported current value where it begins.
        merge_facts(uow=uow, scope=scope, facts={"tz": "JST"}, changed_by="user")
        # An import of a value older than the scope's current one does not replace it.
        older = {"key": "tz", "value": "PST", "changed_by": "import"}
        two_days = T0 + dt.timedelta(days=2)
        assert import_fact_version(
            uow=uow, scope=scope, valid_from=two_days, valid_to=None, **older
        )
        assert read_facts(uow=uow, scope=scope) == {"tz": "JST"}

        lines = list(fact_lines(uow=uow, org_id=scope.org_id, agent_id="planner", user_id="ada"))
        assert [(v.value, v.changed_by) for v in lines] == [
            ("UTC", "agent"),
            ("CET", "user"),
            ("PST", "import"),
            ("JST", "user"),
        ]  # oldest first
        assert [v.valid_to is None for v in lines] == [False, False, False, True]
        # Both end where the user's value begins (an imported timeline is laid in as it was).
        assert lines[1].valid_to == lines[2].valid_to == lines[3].valid_from
        assert list(fact_lines(uow=uow, org_id=uuid.uuid4())) == []


def test_the_migration_gives_each_existing_fact_one_current_version() -> None:
    """0019's backfill: one row per key, valid from the document's last change, by 'user'."""
    from alembic import command
    from sqlalchemy import create_engine, text

    from shared.infra.db.engine import sqlalchemy_url
    from shared.infra.db.migrate import alembic_config
    from tests import services

    name = f"{services.TEST_DATABASE}_facts_backfill"
    url = services.recreate_database(services.admin_database_url(), name)
    command.upgrade(alembic_config(url), "0018")
    engine = create_engine(sqlalchemy_url(url))
    try:
        with engine.begin() as db:
            org_id = db.execute(
                text("INSERT INTO orgs (id, name) VALUES (gen_random_uuid(), 'o') RETURNING id")
            ).scalar_one()
            db.execute(
                text(
                    "INSERT INTO facts (id, org_id, agent_id, user_id, document, updated_at)"
                    " VALUES (gen_random_uuid(), :o, 'planner', 'ada', :d,"
                    " '2026-03-01T00:00:00Z'), (gen_random_uuid(), :o, 'planner', 'bob', '{}',"
                    " now())"
                ),
                {"o": org_id, "d": '{"tz": "CET", "plan": {"tier": 2}, "gone": null}'},
            )
        command.upgrade(alembic_config(url), "0019")
        with engine.connect() as db:
            rows = db.execute(
                text(
                    "SELECT user_id, key, value, valid_from, valid_to, changed_by"
                    " FROM fact_versions ORDER BY key"
                )
            ).all()
        since = dt.datetime(2026, 3, 1, tzinfo=dt.UTC)
        assert [tuple(r) for r in rows] == [
            ("ada", "gone", None, since, None, "user"),
            ("ada", "plan", {"tier": 2}, since, None, "user"),
            ("ada", "tz", "CET", since, None, "user"),
        ]
    finally:
        engine.dispose()
        services.drop_database(services.admin_database_url(), name)
