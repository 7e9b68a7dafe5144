"""GET /agents-api/usage: the calling org's LLM calls and tokens since a moment, by model."""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any
from urllib.parse import quote

import pytest
from flask.testing import FlaskClient
from sqlalchemy import func, select, text
from sqlalchemy.orm import Session, sessionmaker

from shared.auth.service import org_for_key
from shared.infra.db.uow import UnitOfWork
from shared.infra.queue import RecordingQueue
from shared.llm.base import LLMCall, Usage
from shared.usage.models import LLMUsage
from shared.usage.service import record_llm_usage


def org_of(factory: sessionmaker[Session], auth: dict[str, str]) -> uuid.UUID:
    with UnitOfWork(factory, RecordingQueue()) as uow:
        org_id = org_for_key(uow=uow, key=auth["Authorization"].removeprefix("Bearer "))
    assert org_id is not None
    return org_id


def charge(
    factory: sessionmaker[Session],
    org_id: uuid.UUID,
    model: str,
    tokens: tuple[int, int] = (0, 0),
    *,
    failed: bool = False,
    days_ago: int = 0,
) -> None:
    """One call's row, as the worker's ledger writes it; `days_ago` backdates it."""
    call = LLMCall(
        org_id=org_id, model=model, purpose="summarize", failed=failed, usage=Usage(*tokens)
    )
    with UnitOfWork(factory, RecordingQueue()) as uow:
        record_llm_usage(uow=uow, org_id=org_id, call=call)
        if days_ago:
            uow.session.execute(
                text(
                    "UPDATE llm_usage SET created_at = now() - make_interval(days => :days)"
                    " WHERE id = (SELECT max(id) FROM llm_usage WHERE org_id = :org)"
                ),
                {"days": days_ago, "org": org_id},
            )
        uow.commit()


def usage(client: FlaskClient, auth: dict[str, str], since: str | None = None) -> Any:
    url = "/agents-api/usage" + (f"?since={quote(since)}" if since is not None else "")
    response = client.get(url, headers=auth)
    assert response.status_code == 200, response.json
    return response.json


def test_usage_sums_only_the_calling_orgs_calls_split_by_model(
    client: FlaskClient,
    auth: dict[str, str],
    other_auth: dict[str, str],
    session_factory: sessionmaker[Session],
) -> None:
    mine, theirs = org_of(session_factory, auth), org_of(session_factory, other_auth)
    charge(session_factory, mine, "gpt-small", (100, 10))
    charge(session_factory, mine, "gpt-small", (50, 5))
    charge(session_factory, mine, "gpt-small", failed=True)  # a call, with no tokens
    charge(session_factory, mine, "local-extractive-v1", (7, 3))
    charge(session_factory, theirs, "gpt-small", (1000, 100))

    answer = usage(client, auth)

    assert {k: v for k, v in answer.items() if k != "since"} == {
        "llmCalls": 4,
        "promptTokens": 157,
        "completionTokens": 18,
        "byModel": {
            "gpt-small": {"llmCalls": 3, "promptTokens": 150, "completionTokens": 15},
            "local-extractive-v1": {"llmCalls": 1, "promptTokens": 7, "completionTokens": 3},
        },
        "budgetExhausted": False,  # no monthly budget by default
    }
    assert usage(client, other_auth)["byModel"] == {
        "gpt-small": {"llmCalls": 1, "promptTokens": 1000, "completionTokens": 100}
    }


def test_without_since_usage_covers_the_last_30_days(
    client: FlaskClient, auth: dict[str, str], session_factory: sessionmaker[Session]
) -> None:
    org_id = org_of(session_factory, auth)
    charge(session_factory, org_id, "gpt-small", (100, 10), days_ago=40)
    charge(session_factory, org_id, "gpt-small", (20, 2))

    answer = usage(client, auth)

    assert (answer["llmCalls"], answer["promptTokens"], answer["completionTokens"]) == (1, 20, 2)
    since = dt.datetime.fromisoformat(answer["since"])
    assert since.tzinfo is not None
    assert dt.timedelta(days=29) < dt.datetime.now(dt.UTC) - since < dt.timedelta(days=31)


def test_since_counts_calls_made_at_or_after_it(
    client: FlaskClient, auth: dict[str, str], session_factory: sessionmaker[Session]
) -> None:
    org_id = org_of(session_factory, auth)
    charge(session_factory, org_id, "gpt-small", (100, 10), days_ago=40)
    charge(session_factory, org_id, "gpt-small", (20, 2))
    fifty_days_ago = (dt.datetime.now(dt.UTC) - dt.timedelta(days=50)).isoformat()

    answer = usage(client, auth, since=fifty_days_ago)

    assert (answer["llmCalls"], answer["promptTokens"], answer["completionTokens"]) == (2, 120, 12)
    assert dt.datetime.fromisoformat(answer["since"]) == dt.datetime.fromisoformat(fifty_days_ago)


def test_a_since_with_another_offset_is_the_same_moment(
    client: FlaskClient, auth: dict[str, str], session_factory: sessionmaker[Session]
) -> None:
    org_id = org_of(session_factory, auth)
    charge(session_factory, org_id, "gpt-small", (20, 2))
    with UnitOfWork(session_factory, RecordingQueue()) as uow:
        made_at = uow.session.scalar(select(func.max(LLMUsage.created_at)))
    assert made_at is not None
    # One second after the call, written in UTC+02:00: after it, so it is not counted.
    later = (made_at + dt.timedelta(seconds=1)).astimezone(dt.timezone(dt.timedelta(hours=2)))
    earlier = later - dt.timedelta(seconds=2)

    assert usage(client, auth, since=later.isoformat())["llmCalls"] == 0
    assert usage(client, auth, since=earlier.isoformat())["llmCalls"] == 1


def test_a_since_with_an_offset_postgresql_has_no_name_for_is_still_a_moment(
    client: FlaskClient, auth: dict[str, str], session_factory: sessionmaker[Session]
) -> None:
    charge(session_factory, org_of(session_factory, auth), "gpt-small", (20, 2))
    # Python reads offsets up to ±23:59; PostgreSQL refuses past ±15:59.
    answer = usage(client, auth, since="2020-06-11T06:53:04+17:18")
    assert answer["since"] == "2020-06-10T13:35:04Z"
    assert answer["llmCalls"] == 1


def test_a_since_in_the_future_answers_zeros(
    client: FlaskClient, auth: dict[str, str], session_factory: sessionmaker[Session]
) -> None:
    charge(session_factory, org_of(session_factory, auth), "gpt-small", (20, 2))
    answer = usage(client, auth, since="2999-01-01T00:00:00Z")
    assert answer == {
        "since": "2999-01-01T00:00:00Z",
        "llmCalls": 0,
        "promptTokens": 0,
        "completionTokens": 0,
        "byModel": {},
        "budgetExhausted": False,
    }


def test_an_org_with_no_calls_answers_zeros(
    client: FlaskClient,
    auth: dict[str, str],
    other_auth: dict[str, str],
    session_factory: sessionmaker[Session],
) -> None:
    charge(session_factory, org_of(session_factory, other_auth), "gpt-small", (20, 2))
    answer = usage(client, auth)
    assert (answer["llmCalls"], answer["promptTokens"], answer["byModel"]) == (0, 0, {})


@pytest.mark.parametrize(
    ("since", "problem"),
    [
        ("2026-01-01T00:00:00", "has no timezone"),  # a local time: which moment?
        ("2026-01-01", "has no timezone"),
        ("1700000000", "must be an ISO-8601 timestamp"),  # Unix time is not ISO-8601
        ("yesterday", "must be an ISO-8601 timestamp"),
        ("2026-13-01T00:00:00Z", "must be an ISO-8601 timestamp"),
        ("9999-12-31T23:00:00-05:00", "out of range"),  # the year 10000, in UTC
        ("0001-01-01T00:00:00+05:00", "out of range"),
    ],
)
def test_a_since_that_is_not_an_iso_timestamp_with_a_timezone_is_422_naming_since(
    client: FlaskClient,
    auth: dict[str, str],
    session_factory: sessionmaker[Session],
    since: str,
    problem: str,
) -> None:
    with UnitOfWork(session_factory, RecordingQueue()) as uow:
        rows_before = uow.session.scalar(select(func.count()).select_from(LLMUsage))
    response = client.get(f"/agents-api/usage?since={quote(since)}", headers=auth)
    body: Any = response.json
    assert response.status_code == 422, body
    assert body["error"]["code"] == "validation_error"
    assert body["error"]["message"].startswith("since: ")
    assert problem in body["error"]["message"]
    with UnitOfWork(session_factory, RecordingQueue()) as uow:
        assert uow.session.scalar(select(func.count()).select_from(LLMUsage)) == rows_before


def test_usage_needs_a_key(client: FlaskClient) -> None:
    assert client.get("/agents-api/usage").status_code == 401


def test_deleting_an_org_deletes_its_usage_rows(
    auth: dict[str, str], session_factory: sessionmaker[Session]
) -> None:
    org_id = org_of(session_factory, auth)
    charge(session_factory, org_id, "gpt-small", (20, 2))
    with UnitOfWork(session_factory, RecordingQueue()) as uow:
        uow.session.execute(text("DELETE FROM orgs WHERE id = :org"), {"org": org_id})
        left = uow.session.scalar(
            select(func.count()).select_from(LLMUsage).where(LLMUsage.org_id == org_id)
        )
    assert left == 0
