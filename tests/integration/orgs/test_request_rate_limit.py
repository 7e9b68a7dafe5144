"""Requests per org: a Redis token bucket per org (shared/orgs/ratelimit.py), checked once the
key resolves; past it, 429 with Retry-After, and nothing of the request is done."""

from __future__ import annotations

import itertools
import logging
import uuid
from typing import Any

import anyio
import pytest
import redis
from flask.testing import FlaskClient
from mcp import Client
from prometheus_client import REGISTRY
from redis.backoff import NoBackoff
from redis.retry import Retry
from sqlalchemy import Connection, select, text
from sqlalchemy.orm import Session, sessionmaker

from shared.auth.models import Org
from shared.auth.service import Caller, create_api_key
from shared.bootstrap import Runtime
from shared.infra.config import Settings
from shared.infra.db.uow import UnitOfWork
from shared.infra.queue import RecordingQueue
from shared.orgs.ratelimit import (
    SPARE_MAX,
    RequestLimit,
    RequestLimiter,
    RequestRateLimited,
    bucket_key,
    spare_tokens,
)
from shared.orgs.service import DEFAULT, set_limits
from tests.helpers import new_session
from web.mcp.server import build_server

# One token every 1000 s: a bucket once emptied stays empty for the whole test.
TRICKLE = 0.001


def _org(factory: sessionmaker[Session], **limits: Any) -> tuple[str, dict[str, str]]:
    """A new org (its name) and a key's auth header, with its own limits if given."""
    name = f"rate-{uuid.uuid4().hex[:12]}"
    with UnitOfWork(factory, RecordingQueue()) as uow:
        key = create_api_key(uow=uow, org_name=name)
        uow.commit()
    if limits:
        with UnitOfWork(factory, RecordingQueue()) as uow:
            set_limits(uow=uow, org_name=name, **limits)
            uow.commit()
    return name, {"Authorization": f"Bearer {key}"}


def _put_facts(client: FlaskClient, auth: dict[str, str], user: str) -> Any:
    return client.put(f"/agents-api/facts?agentId=a&userId={user}", json={"k": user}, headers=auth)


def _hits() -> float:
    value = REGISTRY.get_sample_value("driftless_limit_hits_total", {"kind": "requests"})
    assert value is not None  # the series exists at 0 before any hit
    return value


def _scopes_written(connection: Connection, org_name: str) -> list[str]:
    return list(
        connection.execute(
            text(
                "SELECT f.user_id FROM facts f JOIN orgs o ON o.id = f.org_id"
                " WHERE o.name = :name ORDER BY f.user_id"
            ),
            {"name": org_name},
        ).scalars()
    )


@pytest.fixture
def low_default_client(
    settings: Settings, session_factory: sessionmaker[Session], queue: RecordingQueue
) -> FlaskClient:
    """The app with a fleet default of bursts of 2 and a trickle of refill."""
    from web.app import create_app

    lowered = settings.model_copy(update={"org_requests_per_s": TRICKLE, "org_request_burst": 2})
    return create_app(lowered, queue=queue, session_factory=session_factory).test_client()


def test_a_burst_past_the_orgs_bucket_is_429_with_retry_after_and_writes_nothing(
    client: FlaskClient, session_factory: sessionmaker[Session], connection: Connection
) -> None:
    name, auth = _org(session_factory, requests_per_s=TRICKLE, request_burst=3)
    assert [_put_facts(client, auth, f"u{i}").status_code for i in range(3)] == [200] * 3

    refused = _put_facts(client, auth, "u3")

    assert refused.status_code == 429
    assert refused.json["error"]["code"] == "rate_limited"
    assert "driftless orgs set" in refused.json["error"]["message"]
    # The next token is 1000 s away (Redis TIME has moved a little since the last take).
    assert 990 <= int(refused.headers["Retry-After"]) <= 1000
    assert _scopes_written(connection, name) == ["u0", "u1", "u2"]


def test_another_org_is_served_while_one_org_is_past_its_limit(
    client: FlaskClient, session_factory: sessionmaker[Session]
) -> None:
    _, busy = _org(session_factory, requests_per_s=TRICKLE, request_burst=1)
    _, other = _org(session_factory)
    assert _put_facts(client, busy, "u").status_code == 200
    assert _put_facts(client, busy, "u").status_code == 429

    assert [_put_facts(client, other, f"u{i}").status_code for i in range(5)] == [200] * 5
    assert _put_facts(client, busy, "u").status_code == 429


def test_an_orgs_override_raises_the_fleet_default_and_default_gives_it_back(
    low_default_client: FlaskClient, session_factory: sessionmaker[Session]
) -> None:
    name, raised = _org(session_factory, request_burst=5)
    _, plain = _org(session_factory)

    assert [_put_facts(low_default_client, plain, "u").status_code for _ in range(3)] == [
        200, 200, 429,
    ]  # fmt: skip
    assert [_put_facts(low_default_client, raised, "u").status_code for _ in range(6)] == [
        *[200] * 5, 429,
    ]  # fmt: skip
    with UnitOfWork(session_factory, RecordingQueue()) as uow:
        limits = set_limits(uow=uow, org_name=name, request_burst=DEFAULT)
        uow.commit()
    assert (limits.requests_per_s, limits.request_burst) == (None, None)
    with UnitOfWork(session_factory, RecordingQueue()) as uow:
        org = uow.session.scalar(select(Org).where(Org.name == name))
        assert org is not None and org.request_burst is None


def test_an_org_with_no_limit_is_never_refused(
    low_default_client: FlaskClient, session_factory: sessionmaker[Session]
) -> None:
    _, unlimited = _org(session_factory, requests_per_s=0)
    assert [_put_facts(low_default_client, unlimited, "u").status_code for _ in range(10)] == [
        200
    ] * 10


def test_each_refused_request_counts_in_driftless_limit_hits_total(
    client: FlaskClient, session_factory: sessionmaker[Session]
) -> None:
    _, auth = _org(session_factory, requests_per_s=TRICKLE, request_burst=1)
    before = _hits()
    statuses = [_put_facts(client, auth, "u").status_code for _ in range(4)]
    assert statuses == [200, 429, 429, 429]
    assert _hits() - before == 3


def test_a_batch_import_at_full_speed_stays_within_the_default_limit(
    client: FlaskClient, session_factory: sessionmaker[Session]
) -> None:
    _, auth = _org(session_factory)
    statuses = {_put_facts(client, auth, f"u{i}").status_code for i in range(200)}
    assert statuses == {200}


def test_health_metrics_and_the_openapi_document_are_not_limited(
    low_default_client: FlaskClient,
) -> None:
    for path in ("/healthz", "/metrics", "/agents-api/openapi.json"):
        assert {low_default_client.get(path).status_code for _ in range(5)} == {200}, path


def test_requests_pass_when_redis_is_down_and_the_outage_is_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Fail open: nothing listens on port 1.
    down = redis.Redis(host="127.0.0.1", port=1, retry=Retry(NoBackoff(), 0))
    limiter = RequestLimiter(down, default=RequestLimit(per_s=TRICKLE, burst=1))
    caller = Caller(org_id=uuid.uuid4())
    with caplog.at_level(logging.WARNING, logger="shared.orgs.ratelimit"):
        for _ in range(3):
            limiter.admit(caller)  # no RequestRateLimited although the burst is 1
    [logged] = caplog.records
    assert "Redis is unavailable" in logged.getMessage()
    down.close()


def test_an_mcp_tool_call_past_the_orgs_bucket_is_a_rate_limited_tool_error(
    client: FlaskClient,
    settings: Settings,
    session_factory: sessionmaker[Session],
    queue: RecordingQueue,
) -> None:
    _, auth = _org(session_factory, requests_per_s=TRICKLE, request_burst=2)
    session = new_session(client, auth)  # the first token
    rt = Runtime(settings, session_factory=session_factory, queue=queue)
    server = build_server(rt, api_key=auth["Authorization"].removeprefix("Bearer "))
    arguments = {"sessionId": session["id"], "op": "read"}

    async def two_calls() -> list[Any]:
        async with Client(server) as mcp:
            return [await mcp.call_tool("notes", arguments) for _ in range(2)]

    served, refused = anyio.run(two_calls)

    assert not served.is_error
    assert refused.is_error
    assert refused.structured_content is not None
    assert refused.structured_content["error"]["code"] == "rate_limited"
    assert "retry in" in refused.structured_content["error"]["message"]


def test_a_tiny_rate_keeps_the_bucket_closed_instead_of_failing_open_41(redis_url: str) -> None:
    # 1e-20 a second: the bucket's refill time overflowed Redis's expiry, the script
    # failed and the limiter, failing open on a Redis error, admitted every request.
    client = redis.Redis.from_url(redis_url)
    limiter = RequestLimiter(client, default=RequestLimit(per_s=1e-20, burst=1))
    caller = Caller(org_id=uuid.uuid4())
    limiter.admit(caller)
    with pytest.raises(RequestRateLimited) as refused:
        limiter.admit(caller)
    assert refused.value.retry_after_s > 86_400  # a month's cap, not a negative overflow
    client.close()


def _level(client: redis.Redis, org_id: uuid.UUID) -> float:
    return float(client.hget(bucket_key(org_id), "level"))  # type: ignore[arg-type]


def test_a_hot_org_spends_spare_tokens_without_a_round_trip_42(redis_url: str) -> None:
    # A round trip per request was a sixth of a post's CPU in the web: a request of an org
    # whose bucket is well filled takes spares that its next requests spend in-process.
    client = redis.Redis.from_url(redis_url)
    limiter = RequestLimiter(
        client, default=RequestLimit(per_s=TRICKLE, burst=2000), spare_ttl_s=600
    )
    caller = Caller(org_id=uuid.uuid4())
    assert spare_tokens(2000) == SPARE_MAX
    limiter.admit(caller)
    assert _level(client, caller.org_id) == pytest.approx(2000 - 1 - SPARE_MAX, abs=0.01)

    for _ in range(SPARE_MAX):
        limiter.admit(caller)
    assert _level(client, caller.org_id) == pytest.approx(2000 - 1 - SPARE_MAX, abs=0.01)

    limiter.admit(caller)  # the spares are spent: the next request goes to Redis again
    assert _level(client, caller.org_id) == pytest.approx(2000 - 2 * (1 + SPARE_MAX), abs=0.01)
    client.close()


def test_spare_tokens_never_admit_more_than_the_bucket_holds_42(redis_url: str) -> None:
    # Two processes serving one org, each taking spares: together they admit exactly the
    # bucket's tokens, and the lower half one token a request.
    client = redis.Redis.from_url(redis_url)
    limit = RequestLimit(per_s=TRICKLE, burst=640)
    processes = [RequestLimiter(client, default=limit, spare_ttl_s=600) for _ in range(2)]
    caller = Caller(org_id=uuid.uuid4())
    assert spare_tokens(640) == 10
    admitted, refused, levels = 0, [False, False], []
    while not all(refused):
        for index, limiter in enumerate(processes):
            try:
                limiter.admit(caller)
                admitted += 1
                levels.append(_level(client, caller.org_id))
            except RequestRateLimited:
                refused[index] = True

    assert admitted == 640
    lower_half = [level for level in levels if level < 320]
    steps = {round(a - b, 2) for a, b in itertools.pairwise(lower_half)}
    assert steps <= {0.0, 1.0}  # a spare spent (no write) or one token taken
    client.close()


def test_a_burst_under_64_takes_no_spare_tokens_42() -> None:
    assert [spare_tokens(burst) for burst in (1, 3, 63, 64, 200, 10_000)] == [0, 0, 0, 1, 3, 15]
