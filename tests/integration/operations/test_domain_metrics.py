"""Domain metrics move when the thing they count happens (and only when it commits):
LLM calls, fallbacks, curation changes by actor, forks, debounce outcomes."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from flask.testing import FlaskClient
from prometheus_client import REGISTRY, CollectorRegistry, Counter
from sqlalchemy.orm import Session, sessionmaker

from shared.evaluations.pipeline import evaluate_topic
from shared.evaluations.summarize import summarize_topic
from shared.infra.db.uow import UnitOfWork
from shared.infra.metrics import count_on_commit
from shared.infra.queue import Job, RecordingQueue
from shared.llm.base import DriftRequest, LLMError, SummaryRequest, TranscriptLine
from shared.llm.local_provider import LOCAL_MODEL, LocalProvider
from shared.llm.openai_provider import OpenAIProvider
from shared.triggers.debounce import Debouncer
from shared.triggers.service import debounce_trigger
from tests.helpers import new_session, post_message
from tests.llm_server import FakeOpenAI, Reply

SUMMARY = {
    "title": "Billing stack",
    "summary": "PostgreSQL for invoices.",
    "include_in_memory": True,
}
REQUEST = SummaryRequest(lines=[TranscriptLine(id=1, role="user", content="We ship on Friday.")])


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


class Delta:
    """How much one sample moved since this was made."""

    def __init__(self, name: str, **labels: str) -> None:
        self.name, self.labels = name, labels
        self.before = sample(name, **labels)

    @property
    def moved(self) -> float:
        return sample(self.name, **self.labels) - self.before


def conversation(client: FlaskClient, auth: dict[str, str], turns: int) -> dict[str, Any]:
    session = new_session(client, auth, agent="planner", user="ada")
    for i in range(turns):
        role = "user" if i % 2 == 0 else "assistant"
        post_message(client, auth, session["id"], f"We decided on step {i}.", role=role)
    return session


@pytest.fixture
def summarize(session_factory: sessionmaker[Session], queue: RecordingQueue) -> Any:
    def run(topic_id: str, llm: Any) -> Any:
        return summarize_topic(
            new_uow=lambda: UnitOfWork(session_factory, queue),
            llm=llm,
            topic_id=uuid.UUID(topic_id),
            trigger="topic_closed",
        )

    return run


# --- LLM calls ------------------------------------------------------------------------


def test_an_answered_call_counts_the_call_its_tokens_and_its_latency(
    fake_openai: FakeOpenAI, openai_llm: OpenAIProvider
) -> None:
    labels = {"model": "test-model", "purpose": "summarize"}
    calls = Delta("driftless_llm_calls_total", outcome="ok", **labels)
    prompt = Delta("driftless_llm_tokens_total", kind="prompt", **labels)
    completion = Delta("driftless_llm_tokens_total", kind="completion", **labels)
    latency = Delta("driftless_llm_call_seconds_count", **labels)
    fake_openai.queue(Reply(content=json.dumps(SUMMARY), usage=(120, 17)))

    openai_llm.summarize(REQUEST)

    assert (calls.moved, prompt.moved, completion.moved, latency.moved) == (1, 120, 17, 1)


def test_a_failed_call_counts_as_an_error_without_tokens(
    fake_openai: FakeOpenAI, openai_llm: OpenAIProvider
) -> None:
    labels = {"model": "test-model", "purpose": "detect_drift"}
    errors = Delta("driftless_llm_calls_total", outcome="error", **labels)
    ok = Delta("driftless_llm_calls_total", outcome="ok", **labels)
    tokens = Delta("driftless_llm_tokens_total", kind="prompt", **labels)
    fake_openai.fail(500)
    with pytest.raises(LLMError):
        openai_llm.detect_drift(
            DriftRequest(topic_title=None, topic_summary=None, earlier=[], window=REQUEST.lines)
        )
    assert (errors.moved, ok.moved, tokens.moved) == (1, 0, 0)


def test_the_local_provider_is_counted_under_its_own_model() -> None:
    labels = {"model": LOCAL_MODEL, "purpose": "summarize"}
    calls = Delta("driftless_llm_calls_total", outcome="ok", **labels)
    prompt = Delta("driftless_llm_tokens_total", kind="prompt", **labels)
    completion = LocalProvider().summarize(REQUEST)
    assert calls.moved == 1
    assert prompt.moved == completion.usage.prompt_tokens > 0


# --- fallbacks ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reply", "reason"),
    [(Reply(status=500), "llm_error"), (Reply(content='{"title": 3'), "unusable_answer")],
)
def test_r14_a_fallback_summary_is_counted_with_its_reason(
    client: FlaskClient, auth: dict[str, str], summarize: Any, fake_openai: FakeOpenAI,
    openai_llm: OpenAIProvider, reply: Reply, reason: str,
) -> None:  # fmt: skip
    tid = conversation(client, auth, 6)["activeTopicId"]
    fallbacks = Delta("driftless_fallbacks_total", call="summarize", reason=reason)
    fake_openai.queue(reply, reply)  # the client retries a 500 once
    assert summarize(tid, openai_llm).outcome == "fallback"
    assert fallbacks.moved == 1


def test_a_counter_moves_only_when_its_transaction_commits(
    session_factory: sessionmaker[Session],
) -> None:
    counter = Counter("probe_total", "a probe", registry=CollectorRegistry())
    with UnitOfWork(session_factory, RecordingQueue()) as uow:
        count_on_commit(uow.session, counter)
        # no commit: rolled back when the unit of work closes
    assert counter._value.get() == 0
    with UnitOfWork(session_factory, RecordingQueue()) as uow:
        count_on_commit(uow.session, counter)
        assert counter._value.get() == 0  # not before the commit either
        uow.commit()
        uow.commit()  # a second commit of the same unit counts nothing more
    assert counter._value.get() == 1


# --- curation by actor ------------------------------------------------------------------


def test_r17_promotion_and_deprecation_are_counted_by_actor(
    client: FlaskClient, auth: dict[str, str]
) -> None:
    session = conversation(client, auth, 2)
    sid, tid = session["id"], session["activeTopicId"]
    agent_promoted = Delta("driftless_memory_changes_total", change="promoted", actor="agent")
    user_demoted = Delta("driftless_memory_changes_total", change="demoted", actor="user")
    user_deprecated = Delta("driftless_memory_changes_total", change="deprecated", actor="user")

    response = client.post(
        f"/agents-api/sessions/{sid}/tools/manage_topic_memory",
        json={"arguments": {"action": "promote", "topicId": tid}},
        headers=auth,
    )
    assert response.status_code == 200, response.json
    assert (agent_promoted.moved, user_demoted.moved) == (1, 0)
    client.put(f"/agents-api/topics/{tid}/memory", json={"state": "deprecated"}, headers=auth)
    assert (user_demoted.moved, user_deprecated.moved) == (1, 1)
    # The same state again changes nothing, and counts nothing.
    client.put(f"/agents-api/topics/{tid}/memory", json={"state": "deprecated"}, headers=auth)
    assert (user_demoted.moved, user_deprecated.moved) == (1, 1)


def test_r11_the_summarizers_promotion_is_counted(
    client: FlaskClient, auth: dict[str, str], summarize: Any, fake_openai: FakeOpenAI,
    openai_llm: OpenAIProvider,
) -> None:  # fmt: skip
    tid = conversation(client, auth, 6)["activeTopicId"]
    promoted = Delta("driftless_memory_changes_total", change="promoted", actor="summarizer")
    fake_openai.answer_json(SUMMARY)
    assert summarize(tid, openai_llm).keep_in_memory is True
    assert promoted.moved == 1
    summarize(tid, openai_llm)  # current already: no call, no write, no count
    assert promoted.moved == 1


# --- forks ----------------------------------------------------------------------------


def test_r6_a_committed_fork_is_counted(
    client: FlaskClient, auth: dict[str, str], session_factory: sessionmaker[Session],
    fake_openai: FakeOpenAI, openai_llm: OpenAIProvider,
) -> None:  # fmt: skip
    session = new_session(client, auth)
    ids = [
        post_message(client, auth, session["id"], f"message {i}", role=role)["id"]
        for i, role in enumerate(["user", "assistant"] * 4)
    ]
    forks = Delta("driftless_forks_total")
    drift = {"drift": True, "first_message_id": ids[4], "new_title": "Another subject"}
    fake_openai.queue(json.dumps(drift), json.dumps(SUMMARY))
    outcome = evaluate_topic(
        new_uow=lambda: UnitOfWork(session_factory, RecordingQueue()), llm=openai_llm,
        topic_id=uuid.UUID(session["activeTopicId"]), trigger="manual", scan_back=10,
    )  # fmt: skip
    assert outcome.outcome == "fork"
    assert forks.moved == 1


# --- debounce ---------------------------------------------------------------------------


class BrokenQueue:
    def send(self, job: Job) -> None:
        raise ConnectionError("broker down")


@pytest.fixture
def debouncer(redis_url: str) -> Iterator[Debouncer]:
    client = redis.Redis.from_url(redis_url)
    yield Debouncer(client, debounce_ms=60_000, max_wait_ms=60_000)
    client.close()


def test_r27_r28_r29_each_debounce_outcome_is_counted(debouncer: Debouncer) -> None:
    moved = {
        outcome: Delta("driftless_debounce_triggers_total", trigger="navigation", outcome=outcome)
        for outcome in ("scheduled", "coalesced", "suppressed", "dropped")
    }
    topic = uuid.uuid4()

    def trigger(queue: Any, topic_id: uuid.UUID = topic) -> str:
        return debounce_trigger(
            debouncer=debouncer, queue=queue, topic_id=topic_id, last_message_id=7,
            trigger="navigation",
        )  # fmt: skip

    assert trigger(RecordingQueue()) == "scheduled"
    assert trigger(RecordingQueue()) == "coalesced"
    assert trigger(BrokenQueue(), uuid.uuid4()) == "dropped"
    debouncer.forget(topic, debouncer.trigger(topic, last_message_id=7).token)
    debouncer.mark_evaluated(topic, last_message_id=7)
    assert trigger(RecordingQueue()) == "suppressed"
    assert {outcome: delta.moved for outcome, delta in moved.items()} == {
        "scheduled": 1, "coalesced": 1, "suppressed": 1, "dropped": 1,
    }  # fmt: skip
