"""The usage ledger: every LLM call a job makes is a row charged to its topic's org, and
counted by org in the metrics, whichever provider made it and whatever became of it."""

from __future__ import annotations

import json
import logging
import uuid
from typing import Any

import pytest
import redis
from flask.testing import FlaskClient
from prometheus_client import REGISTRY
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from shared.evaluations.models import Evaluation
from shared.evaluations.pipeline import evaluate_topic
from shared.evaluations.summarize import summarize_topic
from shared.infra.config import Settings
from shared.infra.db.engine import make_engine, make_session_factory
from shared.infra.db.uow import UnitOfWork
from shared.infra.queue import RecordingQueue
from shared.llm.base import LLMCall, SummaryRequest, TranscriptLine, Usage
from shared.llm.factory import make_llm
from shared.llm.local_provider import LOCAL_MODEL, LocalProvider
from shared.llm.openai_provider import OpenAIProvider
from shared.usage.models import LLMUsage
from shared.usage.service import UsageLedger
from tests.helpers import new_session, post_message
from tests.integration.usage.ledger import rows_of
from tests.llm_server import FakeOpenAI, Reply

SUMMARY = {"title": "Billing", "summary": "PostgreSQL, Friday.", "include_in_memory": True}
NO_DRIFT = {"drift": False, "first_message_id": None, "new_title": None}


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def conversation(client: FlaskClient, auth: dict[str, str]) -> tuple[uuid.UUID, str]:
    """(the org, the active topic) of a new session with six messages."""
    session = new_session(client, auth)
    for i in range(6):
        role = "user" if i % 2 == 0 else "assistant"
        post_message(client, auth, session["id"], f"We decided on step {i}.", role=role)
    return uuid.UUID(session["orgId"]), session["activeTopicId"]


@pytest.fixture
def new_uow(session_factory: sessionmaker[Session], queue: RecordingQueue) -> Any:
    return lambda: UnitOfWork(session_factory, queue)


@pytest.fixture
def ledger(new_uow: Any) -> UsageLedger:
    return UsageLedger(new_uow)


@pytest.fixture
def llm(fake_openai: FakeOpenAI, ledger: UsageLedger) -> Any:
    """The real provider on the fake server, with the ledger as its listener."""
    provider = OpenAIProvider(
        api_key="test", base_url=fake_openai.base_url, model="ledger-model", timeout_s=5,
        max_retries=0, on_call=ledger,
    )  # fmt: skip
    yield provider
    provider.close()


def test_an_evaluations_drift_call_and_summary_call_are_both_charged_to_the_topics_org(
    client: FlaskClient,
    auth: dict[str, str],
    other_auth: dict[str, str],
    session_factory: sessionmaker[Session],
    new_uow: Any,
    fake_openai: FakeOpenAI,
    llm: OpenAIProvider,
) -> None:
    org_id, tid = conversation(client, auth)
    other_org, _ = conversation(client, other_auth)
    fake_openai.queue(
        Reply(json.dumps(NO_DRIFT), usage=(30, 4)), Reply(json.dumps(SUMMARY), usage=(120, 17))
    )

    outcome = evaluate_topic(
        new_uow=new_uow, llm=llm, topic_id=uuid.UUID(tid), trigger="manual", scan_back=10
    )

    assert outcome.outcome == "refresh"
    assert rows_of(session_factory, org_id) == [
        ("ledger-model", "detect_drift", "ok", 30, 4),
        ("ledger-model", "summarize", "ok", 120, 17),
    ]
    assert rows_of(session_factory, other_org) == []


def test_the_local_providers_calls_are_charged_under_its_model_and_match_the_audit_row(
    client: FlaskClient,
    auth: dict[str, str],
    session_factory: sessionmaker[Session],
    new_uow: Any,
    ledger: UsageLedger,
) -> None:
    org_id, tid = conversation(client, auth)
    labels = {"model": LOCAL_MODEL, "purpose": "summarize", "outcome": "ok"}
    calls_before = sample("driftless_llm_calls_total", **labels)

    summarize_topic(
        new_uow=new_uow, llm=LocalProvider(on_call=ledger), topic_id=uuid.UUID(tid),
        trigger="manual",
    )  # fmt: skip

    with UnitOfWork(session_factory, RecordingQueue()) as uow:
        audit = uow.session.scalars(select(Evaluation).where(Evaluation.topic_id == tid)).one()
    [(model, purpose, outcome, prompt, completion)] = rows_of(session_factory, org_id)
    assert (model, purpose, outcome) == (LOCAL_MODEL, "summarize", "ok")
    assert (prompt, completion) == (audit.prompt_tokens, audit.completion_tokens)
    assert prompt > 0 and completion > 0
    assert sample("driftless_llm_calls_total", **labels) == calls_before + 1


def test_each_attempt_of_the_rate_limiters_retries_is_a_call_of_its_own(
    client: FlaskClient,
    auth: dict[str, str],
    session_factory: sessionmaker[Session],
    new_uow: Any,
    ledger: UsageLedger,
    fake_openai: FakeOpenAI,
    redis_url: str,
) -> None:
    org_id, tid = conversation(client, auth)
    model = f"retried-{uuid.uuid4().hex[:8]}"  # a rate-limit bucket of this test alone
    settings = Settings(
        llm="openai", openai_base_url=fake_openai.base_url, llm_model=model, llm_rpm=6000,
        llm_max_retries=1,
    )  # fmt: skip
    llm = make_llm(settings, redis_client=redis.Redis.from_url(redis_url), on_call=ledger)
    fake_openai.queue(Reply(None, status=500), Reply(json.dumps(SUMMARY), usage=(120, 17)))

    outcome = summarize_topic(new_uow=new_uow, llm=llm, topic_id=uuid.UUID(tid), trigger="manual")

    assert outcome.outcome == "refresh"
    assert fake_openai.calls == 2
    assert rows_of(session_factory, org_id) == [
        (model, "summarize", "error", 0, 0),
        (model, "summarize", "ok", 120, 17),
    ]


def test_a_ledger_that_cannot_write_never_fails_the_summary(
    client: FlaskClient,
    auth: dict[str, str],
    session_factory: sessionmaker[Session],
    new_uow: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    org_id, tid = conversation(client, auth)
    down = make_engine("postgresql://nobody@127.0.0.1:1/none", pool_size=1, max_overflow=0)
    broken = UsageLedger(lambda: UnitOfWork(make_session_factory(down), RecordingQueue()))
    labels = {"model": LOCAL_MODEL, "purpose": "summarize", "outcome": "ok"}
    calls_before = sample("driftless_llm_calls_total", **labels)

    with caplog.at_level(logging.WARNING, logger="shared.usage.service"):
        outcome = summarize_topic(
            new_uow=new_uow, llm=LocalProvider(on_call=broken), topic_id=uuid.UUID(tid),
            trigger="manual",
        )  # fmt: skip
    down.dispose()

    assert outcome.outcome == "refresh"
    topic: Any = client.get(f"/agents-api/topics/{tid}", headers=auth).json
    assert topic["summarySource"] == "llm"
    assert any("could not record a summarize call" in r.getMessage() for r in caplog.records)
    assert rows_of(session_factory, org_id) == []
    # The metrics still counted the call: it was made.
    assert sample("driftless_llm_calls_total", **labels) == calls_before + 1


def all_rows(factory: sessionmaker[Session]) -> int:
    with UnitOfWork(factory, RecordingQueue()) as uow:
        return int(uow.session.scalar(select(func.count()).select_from(LLMUsage)) or 0)


def test_a_call_made_for_no_topic_is_counted_but_charged_to_no_org(
    session_factory: sessionmaker[Session], ledger: UsageLedger
) -> None:
    rows_before = all_rows(session_factory)
    labels = {"model": LOCAL_MODEL, "purpose": "summarize", "outcome": "ok"}
    calls_before = sample("driftless_llm_calls_total", **labels)
    request = SummaryRequest(lines=[TranscriptLine(id=1, role="user", content="We ship Friday.")])

    LocalProvider(on_call=ledger).summarize(request)
    ledger(LLMCall(org_id=None, model="m", purpose="summarize", failed=False, usage=Usage(1, 1)))

    assert all_rows(session_factory) == rows_before
    assert sample("driftless_llm_calls_total", **labels) == calls_before + 1
