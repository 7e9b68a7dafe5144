"""Each org's LLM budget ([3.2]): past its tokens this month its summaries fall back (R14)
and drift is not asked, with one `org.budget_exhausted` a month; within its calls a minute
a call waits its turn, or the task retries. Another org is never held back by it."""

from __future__ import annotations

import datetime as dt
import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from flask.testing import FlaskClient
from prometheus_client import REGISTRY
from sqlalchemy.orm import Session, sessionmaker

from shared.evaluations.pipeline import evaluate_topic
from shared.infra.db.uow import UnitOfWork
from shared.infra.queue import RecordingQueue
from shared.llm.base import Completion, DriftRequest, SummaryRequest, TranscriptLine, Usage
from shared.llm.openai_provider import OpenAIProvider
from shared.llm.ratelimit import Limits, RateLimited
from shared.orgs.budget import Budget, BudgetDefaults, Budgets, month_of, org_budget
from shared.orgs.budgeted_llm import BudgetedLLM, BudgetExhausted, org_bucket_name
from shared.usage.service import UsageLedger
from shared.webhooks.events import ORG_BUDGET_EXHAUSTED
from shared.webhooks.models import Webhook
from tests.conftest import new_key
from tests.helpers import new_session, post_message
from tests.integration.orgs.budget import give_budget, spend
from tests.integration.webhooks.outbox import events_of, org_of
from tests.llm_server import FakeOpenAI, Reply

NO_BUDGET = BudgetDefaults(llm_rpm=0, monthly_tokens=0)
NO_DRIFT = {"drift": False, "first_message_id": None, "new_title": None}
SUMMARY = {"title": "Billing", "summary": "PostgreSQL, Friday.", "include_in_memory": True}


def hits(kind: str) -> float:
    return REGISTRY.get_sample_value("driftless_limit_hits_total", {"kind": kind}) or 0.0


def exhausted_total() -> float:
    return REGISTRY.get_sample_value("driftless_org_budgets_exhausted_total") or 0.0


@pytest.fixture
def new_uow(session_factory: sessionmaker[Session]) -> Any:
    return lambda: UnitOfWork(session_factory, RecordingQueue())


@pytest.fixture
def budgeted(fake_openai: FakeOpenAI, new_uow: Any, redis_client: redis.Redis) -> Iterator[Any]:
    """The real provider on the model server, its calls in the ledger, within budgets."""
    provider = OpenAIProvider(
        api_key="test", base_url=fake_openai.base_url, model="budget-model", timeout_s=5,
        max_retries=0, on_call=UsageLedger(new_uow),
    )  # fmt: skip
    yield BudgetedLLM(
        provider,
        budgets=Budgets(new_uow, defaults=NO_BUDGET, redis_client=redis_client),
        redis_client=redis_client,
    )
    provider.close()


def conversation(client: FlaskClient, auth: dict[str, str]) -> str:
    """The active topic of a new session with six messages, enough to be promoted."""
    session = new_session(client, auth)
    for i in range(6):
        role = "user" if i % 2 == 0 else "assistant"
        post_message(client, auth, session["id"], f"We decided on step {i}.", role=role)
    topic_id: str = session["activeTopicId"]
    return topic_id


def evaluate(new_uow: Any, llm: BudgetedLLM, topic_id: str) -> Any:
    """A manual evaluation: the drift call, then the summary."""
    return evaluate_topic(
        new_uow=new_uow, llm=llm, topic_id=uuid.UUID(topic_id), trigger="manual", scan_back=10
    )


def test_r14_past_its_monthly_tokens_an_org_gets_a_fallback_summary_and_no_drift_call(
    client: FlaskClient,
    auth: dict[str, str],
    other_auth: dict[str, str],
    session_factory: sessionmaker[Session],
    new_uow: Any,
    fake_openai: FakeOpenAI,
    budgeted: BudgetedLLM,
) -> None:
    spent_org = org_of(session_factory, auth)
    give_budget(session_factory, spent_org, monthly_tokens=1000)
    spend(session_factory, spent_org, 1000)
    topic_id = conversation(client, auth)
    refused_before = hits("monthly_tokens")

    outcome = evaluate(new_uow, budgeted, topic_id)

    assert fake_openai.calls == 0  # neither the drift call nor the summary reached the model
    assert outcome.outcome == "fallback"  # no drift: the topic goes on, with R14's summary
    topic: Any = client.get(f"/agents-api/topics/{topic_id}", headers=auth).json
    assert (topic["summarySource"], topic["memoryState"]) == ("fallback", "none")
    assert hits("monthly_tokens") == refused_before + 2
    usage: Any = client.get("/agents-api/usage", headers=auth).json
    assert usage["budgetExhausted"] is True

    # Another org, with tokens left, is asked as ever: drift, then the summary.
    fake_openai.queue(json.dumps(NO_DRIFT), json.dumps(SUMMARY))
    other_topic = conversation(client, other_auth)
    evaluate(new_uow, budgeted, other_topic)
    assert fake_openai.calls == 2
    theirs: Any = client.get(f"/agents-api/topics/{other_topic}", headers=other_auth).json
    assert (theirs["summarySource"], theirs["memoryState"]) == ("llm", "promoted")
    assert client.get("/agents-api/usage", headers=other_auth).json["budgetExhausted"] is False


def test_the_tokens_a_call_uses_count_against_the_month_and_the_next_call_is_refused(
    auth: dict[str, str],
    session_factory: sessionmaker[Session],
    fake_openai: FakeOpenAI,
    budgeted: BudgetedLLM,
) -> None:
    org_id = org_of(session_factory, auth)
    give_budget(session_factory, org_id, monthly_tokens=100)
    spend(session_factory, org_id, 90)
    fake_openai.queue(Reply(json.dumps(SUMMARY), usage=(8, 4)))
    request = SummaryRequest(lines=[TranscriptLine(1, "user", "hello")], org_id=org_id)

    budgeted.summarize(request)  # 90 used: it goes, and uses 12 more
    with pytest.raises(BudgetExhausted):
        budgeted.summarize(request)
    assert fake_openai.calls == 1


def test_org_budget_exhausted_is_recorded_once_a_month(
    auth: dict[str, str],
    session_factory: sessionmaker[Session],
    new_uow: Any,
    budgeted: BudgetedLLM,
    redis_client: redis.Redis,
) -> None:
    org_id = org_of(session_factory, auth)
    with UnitOfWork(session_factory, RecordingQueue()) as uow:  # a subscription to it
        uow.session.add(
            Webhook(org_id=org_id, url="https://example.com/", events=[ORG_BUDGET_EXHAUSTED],
                    sealed_secret="unused")
        )  # fmt: skip
        uow.commit()
    give_budget(session_factory, org_id, monthly_tokens=50)
    spend(session_factory, org_id, 60)
    counted_before = exhausted_total()
    drift = DriftRequest(topic_title=None, topic_summary=None, earlier=[], window=[], org_id=org_id)

    for _ in range(3):
        with pytest.raises(BudgetExhausted):
            budgeted.detect_drift(drift)
    # Another process that has not seen it yet: the row's compare-and-set holds it to one.
    Budgets(new_uow, defaults=NO_BUDGET, redis_client=redis_client).note_exhausted(
        org_id, budgeted.budgets.of(org_id)
    )

    month = month_of(dt.datetime.now(dt.UTC))
    [(type_, sent)] = events_of(session_factory, auth)
    assert type_ == "org.budget_exhausted"
    assert sent["data"]["month"] == f"{month:%Y-%m}"
    assert (sent["data"]["monthlyTokens"], sent["data"]["tokensUsed"]) == (50, 60)
    assert exhausted_total() == counted_before + 1

    # The next month (explicit arithmetic: the 1st plus 31 days is always the next month),
    # run out again, it is sent again.
    next_month = month_of(month_start_plus(month, days=31))
    Budgets(new_uow, defaults=NO_BUDGET, redis_client=redis_client).note_exhausted(
        org_id, Budget(llm_rpm=0, monthly_tokens=50, month=next_month, tokens_used=50)
    )
    assert [t for t, _ in events_of(session_factory, auth)] == ["org.budget_exhausted"] * 2
    assert exhausted_total() == counted_before + 2


def month_start_plus(month: dt.date, *, days: int) -> dt.datetime:
    return dt.datetime(month.year, month.month, 1, tzinfo=dt.UTC) + dt.timedelta(days=days)


def test_the_month_turning_gives_the_tokens_back(
    auth: dict[str, str], session_factory: sessionmaker[Session]
) -> None:
    org_id = org_of(session_factory, auth)
    give_budget(session_factory, org_id, monthly_tokens=100)
    spend(session_factory, org_id, 500, months_ago=1)  # last month's calls
    spend(session_factory, org_id, 40)

    with UnitOfWork(session_factory, RecordingQueue()) as uow:
        budget = org_budget(uow=uow, org_id=org_id, defaults=NO_BUDGET)
        fleet = org_budget(
            uow=uow, org_id=org_of(session_factory, auth), defaults=BudgetDefaults(7, 9)
        )

    assert (budget.tokens_used, budget.exhausted) == (40, False)
    assert (fleet.llm_rpm, fleet.monthly_tokens) == (7, 100)  # its own tokens, the fleet's rpm


class CountingLLM:
    """An LLM that answers at once and counts its calls."""

    model = "counting"

    def __init__(self) -> None:
        self.calls = 0

    def summarize(self, request: SummaryRequest) -> Completion:
        self.calls += 1
        return Completion(json.dumps(SUMMARY), self.model, Usage(1, 1))

    def detect_drift(self, request: DriftRequest) -> Completion:
        self.calls += 1
        return Completion(json.dumps(NO_DRIFT), self.model, Usage(1, 1))


def limited(new_uow: Any, redis_client: redis.Redis, sleeps: list[float]) -> BudgetedLLM:
    def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        time.sleep(seconds)

    return BudgetedLLM(
        CountingLLM(), budgets=Budgets(new_uow, defaults=NO_BUDGET, redis_client=redis_client),
        redis_client=redis_client,
        max_wait_s=2.0, sleep=sleep,
    )  # fmt: skip


def fresh_org(session_factory: sessionmaker[Session], llm_rpm: int) -> Any:
    auth = {"Authorization": f"Bearer {new_key(session_factory)}"}
    org_id = org_of(session_factory, auth)
    give_budget(session_factory, org_id, llm_rpm=llm_rpm)
    return org_id


def test_calls_beyond_an_orgs_calls_a_minute_wait_and_another_org_does_not(
    client: FlaskClient,
    session_factory: sessionmaker[Session],
    new_uow: Any,
    redis_client: redis.Redis,
) -> None:
    rpm = 600
    # What the bucket lets through at once: the fleet limiter's arithmetic (ratelimit.py).
    at_once = int(Limits(rpm=rpm, tpm=0).request_capacity)
    busy, calm = fresh_org(session_factory, rpm), fresh_org(session_factory, rpm)
    sleeps: list[float] = []
    llm = limited(new_uow, redis_client, sleeps)
    hits_before = hits("llm_rpm")
    request = SummaryRequest(lines=[TranscriptLine(1, "user", "hi")], org_id=busy)

    for _ in range(at_once):
        llm.summarize(request)
    assert sleeps == []
    llm.summarize(request)  # one too many within the minute: it waits its turn
    assert len(sleeps) == 1 and 0 < sleeps[0] < 1
    assert hits("llm_rpm") == hits_before + 1

    llm.summarize(SummaryRequest(lines=request.lines, org_id=calm))
    assert len(sleeps) == 1  # the other org's bucket is its own
    assert llm.inner.calls == at_once + 2  # type: ignore[attr-defined]
    redis_client.delete(
        *[f"driftless:llm-rate:{{{org_bucket_name(o)}}}:requests" for o in (busy, calm)]
    )


def test_past_the_wait_limit_the_call_is_rate_limited_for_the_task_to_retry(
    client: FlaskClient,
    session_factory: sessionmaker[Session],
    new_uow: Any,
    redis_client: redis.Redis,
) -> None:
    org_id = fresh_org(session_factory, 1)  # one call a minute
    llm = limited(new_uow, redis_client, [])
    request = DriftRequest(
        topic_title=None, topic_summary=None, earlier=[], window=[], org_id=org_id
    )
    hits_before = hits("llm_rpm")

    llm.detect_drift(request)
    with pytest.raises(RateLimited) as refused:
        llm.detect_drift(request)

    assert refused.value.retry_after_s > 2.0  # the worker retries the task after this
    assert llm.inner.calls == 1  # type: ignore[attr-defined]
    assert hits("llm_rpm") == hits_before + 1
