"""The pipeline's events: a summary is `topic.summarized` (and a promotion by the
summarizer `topic.memory_changed`), a silent fork is `topic.forked`, each in the
transaction that stores it; nothing is recorded when no subscription wants it."""

from __future__ import annotations

import json
import uuid
from typing import Any

from flask.testing import FlaskClient
from sqlalchemy.orm import Session, sessionmaker

from shared.evaluations.pipeline import evaluate_topic
from shared.evaluations.summarize import summarize_topic
from shared.infra.db.uow import UnitOfWork
from shared.infra.queue import RecordingQueue
from shared.llm.openai_provider import OpenAIProvider
from shared.webhooks.events import EVENT_TYPES
from tests.helpers import new_session, post_message
from tests.integration.webhooks.outbox import events_of
from tests.llm_server import FakeOpenAI

SUMMARY = {"title": "Billing", "summary": "Invoices go out Friday.", "include_in_memory": True}


def subscribe_to_everything(client: FlaskClient, auth: dict[str, str]) -> None:
    body = {"url": "http://127.0.0.1:9/", "events": list(EVENT_TYPES)}
    assert client.post("/agents-api/webhooks", headers=auth, json=body).status_code == 201


def events(session_factory: sessionmaker[Session], auth: dict[str, str]) -> dict[str, Any]:
    """The org's events' data by type."""
    return {type_: body["data"] for type_, body in events_of(session_factory, auth)}


def conversation(client: FlaskClient, auth: dict[str, str]) -> tuple[dict[str, Any], list[int]]:
    session = new_session(client, auth)
    ids = [
        post_message(client, auth, session["id"], f"message {i}", role=role)["id"]
        for i, role in enumerate(["user", "assistant"] * 4)
    ]
    return session, ids


def summarize(session_factory: sessionmaker[Session], llm: OpenAIProvider, topic_id: str) -> None:
    summarize_topic(
        new_uow=lambda: UnitOfWork(session_factory, RecordingQueue()), llm=llm,
        topic_id=uuid.UUID(topic_id), trigger="topic_closed",
    )  # fmt: skip


def test_a_closed_topics_summary_is_a_summarized_event_and_its_promotion_a_memory_change(
    client: FlaskClient,
    auth: dict[str, str],
    session_factory: sessionmaker[Session],
    fake_openai: FakeOpenAI,
    openai_llm: OpenAIProvider,
) -> None:
    subscribe_to_everything(client, auth)
    session, _ = conversation(client, auth)
    fake_openai.queue(json.dumps(SUMMARY))

    summarize(session_factory, openai_llm, session["activeTopicId"])

    recorded = events(session_factory, auth)
    ids = {"sessionId": session["id"], "topicId": session["activeTopicId"]}
    assert recorded["topic.summarized"] == {
        **ids, "agentId": "agent-1", "userId": "user-1", "title": "Billing",
        "summary": "Invoices go out Friday.", "summarySource": "llm", "status": "active",
        "memoryState": "promoted",
    }  # fmt: skip
    assert recorded["topic.memory_changed"] == {
        **ids, "agentId": "agent-1", "userId": "user-1", "memoryState": "promoted",
        "previousMemoryState": "none", "actor": "summarizer",
    }  # fmt: skip


def test_a_silent_fork_is_a_forked_event_naming_both_topics(
    client: FlaskClient,
    auth: dict[str, str],
    session_factory: sessionmaker[Session],
    fake_openai: FakeOpenAI,
    openai_llm: OpenAIProvider,
) -> None:
    subscribe_to_everything(client, auth)
    session, ids = conversation(client, auth)
    drift = {"drift": True, "first_message_id": ids[4], "new_title": "Travel plans"}
    fake_openai.queue(json.dumps(drift), json.dumps(SUMMARY))

    outcome = evaluate_topic(
        new_uow=lambda: UnitOfWork(session_factory, RecordingQueue()), llm=openai_llm,
        topic_id=uuid.UUID(session["activeTopicId"]), trigger="manual", scan_back=10,
    )  # fmt: skip

    assert outcome.outcome == "fork"
    assert events(session_factory, auth)["topic.forked"] == {
        "sessionId": session["id"], "agentId": "agent-1", "userId": "user-1",
        "fromTopicId": session["activeTopicId"], "fromTitle": "Billing",
        "toTopicId": str(outcome.active_topic_id), "toTitle": "Travel plans",
    }  # fmt: skip


def test_without_a_subscription_the_pipeline_records_no_event(
    client: FlaskClient,
    auth: dict[str, str],
    session_factory: sessionmaker[Session],
    fake_openai: FakeOpenAI,
    openai_llm: OpenAIProvider,
) -> None:
    session, _ = conversation(client, auth)
    fake_openai.queue(json.dumps(SUMMARY))

    summarize(session_factory, openai_llm, session["activeTopicId"])

    assert events(session_factory, auth) == {}
