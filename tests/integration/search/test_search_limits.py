"""One org's searches cannot take the web from the others ([3.2]): at most
`searches_per_org` at once across the fleet (429 with Retry-After past it), and every
web query ends at the web's statement timeout (503 `timeout`, not a 500)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from flask.testing import FlaskClient
from prometheus_client import REGISTRY
from sqlalchemy.orm import Session, sessionmaker

from shared.auth.service import org_for_key
from shared.bootstrap import Runtime
from shared.domain.errors import TooBusy
from shared.domain.limits import Limits
from shared.infra.config import Settings
from shared.infra.db.uow import UnitOfWork
from shared.infra.leases import OrgLeases
from shared.infra.queue import RecordingQueue
from shared.memory.scope import Scope
from shared.search import admission
from shared.search.service import SearchQuery, search
from tests.helpers import new_session, post_message

SEARCH = "/agents-api/search?agentId=agent-1&userId=user-1&q=fridge"


@pytest.fixture
def capped(settings: Settings, session_factory: sessionmaker[Session]) -> Iterator[Any]:
    """The web with two searches per org."""
    from web.app import create_app

    limited = settings.model_copy(update={"searches_per_org": 2})
    app = create_app(limited, queue=RecordingQueue(), session_factory=session_factory)
    yield app
    app.extensions["driftless"].close()


@pytest.fixture
def data(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url)
    yield client
    client.close()


def _org(session_factory: sessionmaker[Session], auth: dict[str, str]) -> uuid.UUID:
    with UnitOfWork(session_factory, RecordingQueue()) as uow:
        org = org_for_key(uow=uow, key=auth["Authorization"].removeprefix("Bearer "))
    assert org is not None
    return org


def _searches(org: uuid.UUID, client: redis.Redis) -> int:
    return int(client.zcard(OrgLeases(client, kind="searches", lease_s=30).key(org)))


def _refusals() -> float:
    value = REGISTRY.get_sample_value("driftless_limit_hits_total", {"kind": "searches"})
    return value or 0.0


def test_an_org_past_its_searches_is_refused_while_another_org_reads_on(
    capped: Any,
    session_factory: sessionmaker[Session],
    data: redis.Redis,
    auth: dict[str, str],
    other_auth: dict[str, str],
) -> None:
    client: FlaskClient = capped.test_client()
    mine, theirs = new_session(client, auth), new_session(client, other_auth)
    for sid, headers in ((mine["id"], auth), (theirs["id"], other_auth)):
        post_message(client, headers, sid, "The spare key is on the fridge.")
    # Two searches of the org running (on this process or another): its whole share.
    leases = OrgLeases(data, kind="searches", lease_s=30)
    org = _org(session_factory, auth)
    running = [leases.acquire(org_id=org, limit=2) for _ in range(2)]
    refused_before = _refusals()

    refused = client.get(SEARCH, headers=auth)
    recalled = client.post(
        f"/agents-api/sessions/{mine['id']}/tools/recall",
        headers=auth,
        json={"arguments": {"query": "fridge"}, "toolCallId": "call_busy"},
    )
    other_search = client.get(SEARCH, headers=other_auth)
    other_context = client.get(f"/agents-api/sessions/{theirs['id']}/context", headers=other_auth)

    assert refused.status_code == 429, refused.json
    assert refused.headers["Retry-After"] == str(admission.RETRY_AFTER_S)
    assert refused.json is not None and refused.json["error"]["code"] == "too_busy"
    # The recall tool (HTTP and MCP) shares the cap; a refused call is not stored, so
    # its retry under the same id runs the search once a slot is free.
    assert recalled.status_code == 429 and "Retry-After" in recalled.headers
    assert other_search.status_code == 200 and len(other_search.json["results"]) == 1  # type: ignore[index]
    assert other_context.status_code == 200
    assert _refusals() == refused_before + 2

    leases.release(org_id=org, lease_id=running[0] or "")
    assert client.get(SEARCH, headers=auth).status_code == 200
    retried = client.post(
        f"/agents-api/sessions/{mine['id']}/tools/recall",
        headers=auth,
        json={"arguments": {"query": "fridge"}, "toolCallId": "call_busy"},
    )
    assert retried.status_code == 200 and retried.json["ok"] is True  # type: ignore[index]
    assert len(retried.json["result"]["results"]) == 1  # type: ignore[index]
    assert _searches(org, data) == 1  # the searches gave their slots back; one still runs


def test_a_search_gives_its_slot_back_when_it_ends(
    session_factory: sessionmaker[Session],
    client: FlaskClient,
    auth: dict[str, str],
    data: redis.Redis,
) -> None:
    sid = new_session(client, auth)["id"]
    post_message(client, auth, sid, "The spare key is on the fridge.")
    org = _org(session_factory, auth)
    scope = Scope(org_id=org, agent_id="agent-1", user_id="user-1")
    limits = Limits(searches_per_org=1)

    for _ in range(3):  # one at a time: each finds the slot free again
        with UnitOfWork(session_factory, RecordingQueue(), limits, data) as uow:
            assert len(search(uow=uow, query=SearchQuery(scope=scope, q="fridge")).hits) == 1
    assert _searches(org, data) == 0


def test_a_slot_is_given_back_when_the_search_raises(
    session_factory: sessionmaker[Session], data: redis.Redis
) -> None:
    org = uuid.uuid4()
    with UnitOfWork(session_factory, RecordingQueue(), Limits(searches_per_org=1), data) as uow:
        with pytest.raises(RuntimeError), admission.search_slot(uow=uow, org_id=org):
            assert _searches(org, data) == 1
            with pytest.raises(TooBusy) as busy, admission.search_slot(uow=uow, org_id=org):
                pass
            assert busy.value.retry_after_s == admission.RETRY_AFTER_S
            raise RuntimeError("the search failed")
        assert _searches(org, data) == 0
        with admission.search_slot(uow=uow, org_id=org):
            pass


def test_the_leases_of_a_process_that_died_lapse(data: redis.Redis) -> None:
    org = uuid.uuid4()
    leases = OrgLeases(data, kind="searches", lease_s=0.2)
    assert leases.acquire(org_id=org, limit=1) is not None  # never given back
    assert leases.acquire(org_id=org, limit=1) is None

    time.sleep(0.3)

    assert leases.acquire(org_id=org, limit=1) is not None
    assert 0 < int(data.pttl(leases.key(org))) <= 200  # the key goes with its last lease


# --- the web's statement timeout --------------------------------------------------------


def _statement_timeout(runtime: Runtime) -> str:
    with runtime.unit_of_work() as uow:
        value: str = uow.connection().exec_driver_sql("SHOW statement_timeout").scalar_one()
    return value


def test_only_the_web_bounds_its_statements(settings: Settings) -> None:
    from web.app import create_app

    web = create_app(settings.model_copy(update={"web_statement_timeout_ms": 1500}))
    unbounded = create_app(settings.model_copy(update={"web_statement_timeout_ms": 0}))
    other = Runtime(settings, pool_size=1, max_overflow=0)  # a worker's, the CLI's
    try:
        assert _statement_timeout(web.extensions["driftless"]) == "1500ms"
        assert _statement_timeout(unbounded.extensions["driftless"]) == "0"
        assert _statement_timeout(other) == "0"
    finally:
        for runtime in (web.extensions["driftless"], unbounded.extensions["driftless"], other):
            runtime.close()


def test_a_query_past_the_statement_timeout_is_a_503_with_retry_after(
    settings: Settings,
) -> None:
    from web.app import create_app
    from web.runtime import unit_of_work

    app = create_app(settings.model_copy(update={"web_statement_timeout_ms": 50}))

    # A view whose query outlasts the timeout, as a search over long messages can.
    def slow() -> str:
        with unit_of_work() as uow:
            uow.connection().exec_driver_sql("SELECT pg_sleep(2)")
        return "finished"

    app.add_url_rule("/slow", "slow", slow)
    try:
        answer = app.test_client().get("/slow")
    finally:
        app.extensions["driftless"].close()

    assert answer.status_code == 503, answer.json
    assert answer.json is not None and answer.json["error"]["code"] == "timeout"
    assert int(answer.headers["Retry-After"]) > 0
