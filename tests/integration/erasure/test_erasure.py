"""User erasure: one call removes an org + agent + user everywhere, and nothing else."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
import redis
from click.testing import CliRunner
from flask.testing import FlaskClient
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from shared.context.working_memory import get_working_memory
from shared.erasure.service import erase_user
from shared.infra.config import Settings
from shared.infra.fair import FairJob, FairQueue, subject_of
from shared.infra.held import HeldJobs
from shared.infra.queue import EMBED_BATCH, EVALUATE_TOPIC, SUMMARIZE_TOPIC, Job, RecordingQueue
from shared.memory.cache import MemoryCache
from shared.memory.scope import Scope
from shared.memory.versions import MemoryVersion
from shared.reconcile.claims import Claims
from shared.triggers.debounce import _keys
from tests.conftest import new_key
from tests.helpers import new_session, post_message
from tests.integration.reevaluations.system import clear_fair_lists
from worker.cli import main


def _fill(client: FlaskClient, auth: dict[str, str], user: str) -> dict[str, Any]:
    session = new_session(client, auth, agent="planner", user=user)
    sid = session["id"]
    post_message(client, auth, sid, f"{user} decided to use PostgreSQL")
    client.post(
        f"/agents-api/sessions/{sid}/tools/notes",
        json={"arguments": {"op": "$set", "content": "note"}},
        headers=auth,
    )
    client.put(
        f"/agents-api/topics/{session['activeTopicId']}/memory",
        json={"state": "promoted"},
        headers=auth,
    )
    client.put(f"/agents-api/facts?agentId=planner&userId={user}", json={"tz": "CET"}, headers=auth)
    client.put(f"/agents-api/sessions/{sid}/working-memory", json={"step": 1}, headers=auth)
    client.post(f"/agents-api/sessions/{sid}/evaluate", json={"trigger": "manual"}, headers=auth)
    client.get(f"/agents-api/memory?agentId=planner&userId={user}", headers=auth)  # cached
    client.post(f"/agents-api/sessions/{sid}/topics", json={}, headers=auth)
    return session


def test_erasing_a_user_removes_their_rows_and_redis_state_and_nothing_else(
    client: FlaskClient,
    auth: dict[str, str],
    redis_url: str,
    session_factory: sessionmaker[Session],
) -> None:
    ada, bob = _fill(client, auth, "ada"), _fill(client, auth, "bob")
    response = client.delete("/agents-api/agents/planner/users/ada", headers=auth)
    assert response.status_code == 200
    erased: Any = response.json
    assert erased["erased"] == {
        "sessions": 1, "topics": 2, "messages": 3, "notes": 1, "evaluations": 0,
        "memoryChanges": 1, "forks": 0, "facts": 1, "factVersions": 1, "redisKeys": 3,
    }  # fmt: skip
    assert client.get(f"/agents-api/sessions/{ada['id']}", headers=auth).status_code == 404
    assert client.get("/agents-api/facts?agentId=planner&userId=ada", headers=auth).json == {
        "facts": {}
    }
    memory: Any = client.get("/agents-api/memory?agentId=planner&userId=ada", headers=auth).json
    assert memory["entries"] == []
    client_redis = redis.Redis.from_url(redis_url)
    assert get_working_memory(client_redis, uuid.UUID(ada["id"])) is None
    assert not client_redis.exists(*_keys(uuid.UUID(ada["activeTopicId"])))
    # Bob, in the same org and agent, is untouched.
    assert client.get(f"/agents-api/sessions/{bob['id']}", headers=auth).status_code == 200
    bob_memory: Any = client.get("/agents-api/memory?agentId=planner&userId=bob", headers=auth).json
    assert [e["topicId"] for e in bob_memory["entries"]] == [bob["activeTopicId"]]
    with session_factory() as db:
        versioned = db.scalars(
            select(MemoryVersion.user_id).where(
                MemoryVersion.org_id == uuid.UUID(bob["orgId"]), MemoryVersion.agent_id == "planner"
            )
        )
        assert set(versioned) == {"bob"}  # the memory version row names the user: gone too
    again = client.delete("/agents-api/agents/planner/users/ada", headers=auth).json
    assert again["erased"]["sessions"] == 0  # type: ignore[index]


@pytest.fixture
def roomy_client(
    settings: Settings, session_factory: sessionmaker[Session], queue: RecordingQueue
) -> FlaskClient:
    """The web with room for three running campaigns per org (the default is two)."""
    from web.app import create_app

    roomy = settings.model_copy(update={"campaigns_per_org": 3})
    client: FlaskClient = create_app(
        roomy, queue=queue, session_factory=session_factory
    ).test_client()
    return client


def test_erasure_removes_the_reevaluation_campaigns_narrowed_to_the_user(
    roomy_client: FlaskClient, auth: dict[str, str]
) -> None:
    client = roomy_client
    _fill(client, auth, "ada"), _fill(client, auth, "bob")
    for user in ("ada", "bob"):
        answer = client.post(
            "/agents-api/reevaluations", json={"agentId": "planner", "userId": user}, headers=auth
        )
        assert answer.status_code == 202, answer.json
    everyone = client.post("/agents-api/reevaluations", json={"agentId": "planner"}, headers=auth)

    client.delete("/agents-api/agents/planner/users/ada", headers=auth)

    listed: Any = client.get("/agents-api/reevaluations", headers=auth).json
    # The campaign's filter named ada; the agent-wide one names no user and stays.
    assert [(c["agentId"], c["userId"]) for c in listed["reevaluations"]] == [
        ("planner", None),
        ("planner", "bob"),
    ]
    assert listed["reevaluations"][0]["id"] == everyone.json["id"]  # type: ignore[index]


def _keys_naming(client: redis.Redis, scope: Scope, ids: list[str]) -> list[bytes]:
    needles = [scope.cache_tag, scope.agent_id + ":" + scope.user_id, *ids]
    return [key for key in client.scan_iter(count=1000) if any(n.encode() in key for n in needles)]


def test_after_erasure_no_redis_key_names_the_user(
    client: FlaskClient, auth: dict[str, str], redis_url: str
) -> None:
    """[2.1] item 7: the memory generation key outlived erasure, and erasure created it
    even for a user who never had a cached block."""
    client_redis = redis.Redis.from_url(redis_url)
    ada = _fill(client, auth, "ada")
    org_id = uuid.UUID(ada["orgId"])
    topic_ids = [
        t["id"]
        for t in client.get(f"/agents-api/sessions/{ada['id']}", headers=auth).json["topics"]
    ]  # type: ignore[index]
    scope = Scope(org_id=org_id, agent_id="planner", user_id="ada")
    MemoryCache(client_redis).invalidate(scope)  # what the invalidation job leaves: a generation
    # Their model jobs' marks (shared/infra/held.py): one popped and running, one sent
    # to the broker with a countdown; and a reconcile claim on a topic's vector.
    clear_fair_lists(client_redis)
    fair = FairQueue(client_redis)
    fair.push("live", FairJob(SUMMARIZE_TOPIC, {"topic_id": topic_ids[0]}, str(org_id)))
    assert fair.take("live", runner="worker-1").job is not None
    HeldJobs(client_redis).sent_delayed(
        subject_of(EVALUATE_TOPIC, {"topic_id": topic_ids[1]}), countdown_s=30
    )
    Claims(client_redis, ttl_s=60).record_sent(
        [Job(EMBED_BATCH, {"message_ids": [], "topic_ids": [topic_ids[0]]})]
    )
    ids = [ada["id"], *topic_ids]
    assert len(_keys_naming(client_redis, scope, ids)) >= 4  # the attack's precondition

    assert client.delete("/agents-api/agents/planner/users/ada", headers=auth).status_code == 200
    assert _keys_naming(client_redis, scope, ids) == []

    # A user this service never cached anything for leaves nothing behind either.
    never = Scope(org_id=org_id, agent_id="planner", user_id="never-seen")
    assert (
        client.delete("/agents-api/agents/planner/users/never-seen", headers=auth).status_code
        == 200
    )
    assert _keys_naming(client_redis, never, []) == []


def test_another_org_cannot_erase_a_user(
    client: FlaskClient, auth: dict[str, str], other_auth: dict[str, str]
) -> None:
    ada = _fill(client, auth, "ada")
    erased: Any = client.delete("/agents-api/agents/planner/users/ada", headers=other_auth).json
    assert erased["erased"]["sessions"] == 0
    assert client.get(f"/agents-api/sessions/{ada['id']}", headers=auth).status_code == 200


def test_erase_from_the_command_line(
    settings: Any, committed_factory: sessionmaker[Session], database_url: str, redis_url: str
) -> None:
    from shared.auth.service import org_for_key
    from shared.infra.db.uow import UnitOfWork
    from shared.infra.queue import RecordingQueue
    from web.app import create_app

    key = new_key(committed_factory)
    auth = {"Authorization": f"Bearer {key}"}
    client = create_app(
        settings, queue=RecordingQueue(), session_factory=committed_factory
    ).test_client()
    _fill(client, auth, "cli-user")
    with UnitOfWork(committed_factory, RecordingQueue()) as uow:
        org_id = org_for_key(uow=uow, key=key)
        from shared.auth.models import Org

        org_name = uow.session.get(Org, org_id).name  # type: ignore[union-attr]
    result = CliRunner().invoke(
        main,
        ["erase", "--org", org_name, "--agent", "planner", "--user", "cli-user", "--yes"],
        env={"DATABASE_URL": database_url, "REDIS_URL": redis_url},
    )
    assert result.exit_code == 0, result.output
    assert '"sessions": 1' in result.output and '"facts": 1' in result.output
    assert (
        MemoryCache(redis.Redis.from_url(redis_url)).get(
            Scope(org_id=org_id, agent_id="planner", user_id="cli-user")  # type: ignore[arg-type]
        )
        is None
    )


def test_redis_down_still_erases_the_rows_and_leaves_the_keys_to_expire(
    client: FlaskClient,
    auth: dict[str, str],
    session_factory: sessionmaker[Session],
) -> None:
    from shared.erasure.service import erase_user_everywhere
    from shared.infra.db.uow import UnitOfWork
    from shared.infra.queue import RecordingQueue

    ada = _fill(client, auth, "ada")
    down = redis.Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.2)
    erased = erase_user_everywhere(
        new_uow=lambda: UnitOfWork(session_factory, RecordingQueue()),
        redis_client=down,
        scope=Scope(org_id=uuid.UUID(ada["orgId"]), agent_id="planner", user_id="ada"),
    )
    assert erased.counts["sessions"] == 1
    assert "redisKeys" not in erased.counts  # the keys expire on their own
    assert client.get(f"/agents-api/sessions/{ada['id']}", headers=auth).status_code == 404


def test_erasure_is_not_cut_short_by_the_web_statement_timeout(settings: Settings) -> None:
    """The web bounds its queries ([3.2]); a user's erasure is one transaction that must
    finish however many rows it holds, so it lifts the bound for itself."""
    from web.app import create_app

    app = create_app(settings.model_copy(update={"web_statement_timeout_ms": 50}))
    runtime = app.extensions["driftless"]
    try:
        with runtime.unit_of_work() as uow:
            scope = Scope(org_id=uuid.uuid4(), agent_id="agent-1", user_id="user-1")
            erase_user(uow=uow, scope=scope)
            # Past the timeout, in the erasure's own transaction: still running.
            uow.connection().exec_driver_sql("SELECT pg_sleep(0.2)")
            bound = uow.connection().exec_driver_sql("SHOW statement_timeout").scalar_one()
    finally:
        runtime.close()
    assert bound == "0"
