"""The evaluation pipeline (R30): silent forks (R5, R6, R25) and in-place refreshes,
through the real openai client against our server answering drift at a chosen id."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from flask.testing import FlaskClient
from sqlalchemy import Connection, text
from sqlalchemy.orm import Session, sessionmaker

from shared.evaluations.pipeline import evaluate_topic
from shared.infra.db.uow import UnitOfWork
from shared.infra.queue import RecordingQueue
from shared.llm.bounds import MAX_TRANSCRIPT_CHARS
from shared.llm.openai_provider import OpenAIProvider
from tests.helpers import new_session, post_message
from tests.llm_server import FakeOpenAI

SUMMARY = {
    "title": "Billing stack",
    "summary": "PostgreSQL for invoices.",
    "include_in_memory": True,
}
BILLING = [
    "Let's pick the billing database.", "PostgreSQL fits invoices.", "Agreed on PostgreSQL.",
    "Migrations with Alembic.", "Deadline is Friday.", "Noted, Friday.",
]  # fmt: skip
HIKING = [
    "Unrelated: I'm planning a hike in the Dolomites.", "Which trail?",
    "The Alta Via 1, in July.", "Book the huts early.", "Which huts?", "Lagazuoi first.",
]  # fmt: skip


@pytest.fixture
def evaluate(
    session_factory: sessionmaker[Session], queue: RecordingQueue, openai_llm: OpenAIProvider
) -> Any:
    def run(topic_id: str, trigger: str = "manual") -> Any:
        return evaluate_topic(
            new_uow=lambda: UnitOfWork(session_factory, queue),
            llm=openai_llm,
            topic_id=uuid.UUID(topic_id),
            trigger=trigger,
            scan_back=10,
        )

    return run


@pytest.fixture
def chat(client: FlaskClient, auth: dict[str, str]) -> dict[str, Any]:
    """A session whose active topic talks billing, then hiking; ids of every message."""
    session = new_session(client, auth, agent="planner", user="ada")
    ids = []
    for i, content in enumerate(BILLING + HIKING):
        if i == len(BILLING):  # the billing decision is noted before the subject changes
            client.post(
                f"/agents-api/sessions/{session['id']}/tools/notes",
                json={"arguments": {"op": "$set", "content": "billing: PostgreSQL"}},
                headers=auth,
            )
        role = "user" if i % 2 == 0 else "assistant"
        ids.append(post_message(client, auth, session["id"], content, role=role)["id"])
    return {**session, "ids": ids}


def drift_at(message_id: int | str | None, *, drift: bool = True) -> str:
    return json.dumps(
        {"drift": drift, "first_message_id": message_id, "new_title": "Dolomites hike"}
    )


def session_body(client: FlaskClient, auth: dict[str, str], sid: str) -> Any:
    return client.get(f"/agents-api/sessions/{sid}", headers=auth).json


def topic_messages(client: FlaskClient, auth: dict[str, str], sid: str, tid: str) -> list[int]:
    body: Any = client.get(f"/agents-api/sessions/{sid}/messages?topicId={tid}", headers=auth).json
    return [m["id"] for m in body["messages"]]


def test_r30_drift_forks_the_topic_silently(
    client: FlaskClient, auth: dict[str, str], chat: dict[str, Any], evaluate: Any,
    fake_openai: FakeOpenAI, connection: Connection,
) -> None:  # fmt: skip
    first_hiking = chat["ids"][6]
    fake_openai.queue(drift_at(first_hiking), json.dumps(SUMMARY))
    outcome = evaluate(chat["activeTopicId"])
    assert outcome.outcome == "fork"

    body = session_body(client, auth, chat["id"])
    prior, new = body["topics"]
    assert body["activeTopicId"] == new["id"] == str(outcome.active_topic_id)
    assert (prior["status"], new["status"]) == ("closed", "active")
    assert new["title"] == "Dolomites hike"
    # R6: the window's messages from first_message_id on moved; the rest stayed.
    assert topic_messages(client, auth, chat["id"], new["id"]) == chat["ids"][6:]
    assert topic_messages(client, auth, chat["id"], prior["id"])[:6] == chat["ids"][:6]
    assert (prior["messageCount"], new["messageCount"]) == (6, 6)
    # R25: the prior topic was summarized in the fork's transaction, its notes archived.
    assert prior["summary"] == SUMMARY["summary"] and prior["summarizedAt"]
    statuses = (
        connection.execute(text("SELECT status FROM notes WHERE topic_id = :t"), {"t": prior["id"]})
        .scalars()
        .all()
    )
    assert statuses == ["archived"]
    # R1: the fork is the session's drift result.
    context: Any = client.get(f"/agents-api/sessions/{chat['id']}/context", headers=auth).json
    assert context["layers"]["stable"]["driftResult"] == {
        "fromTopicId": prior["id"], "fromTitle": "Billing stack",
        "toTopicId": new["id"], "toTitle": "Dolomites hike",
    }  # fmt: skip
    [evaluation] = client.get(f"/agents-api/topics/{prior['id']}/evaluations", headers=auth).json[
        "evaluations"
    ]  # type: ignore[index]
    assert (evaluation["outcome"], evaluation["llmCalls"]) == ("fork", 2)


def test_r6_the_drift_prompt_lists_the_scan_back_window_by_id(
    chat: dict[str, Any], evaluate: Any, fake_openai: FakeOpenAI
) -> None:
    fake_openai.queue(drift_at(None, drift=False), json.dumps(SUMMARY))
    evaluate(chat["activeTopicId"])
    prompt = "\n".join(m["content"] for m in fake_openai.requests[0]["messages"])
    window = [line for line in prompt.splitlines() if line.startswith("[id=")]
    assert len(window) == 10  # DRIFTLESS_SCAN_BACK user/assistant messages
    assert window[-1] == f"[id={chat['ids'][-1]}] assistant: Lagazuoi first."
    for key in ("drift", "first_message_id", "new_title"):
        assert key in prompt


def test_r6_ten_huge_messages_make_a_drift_prompt_no_larger_than_the_summarys(
    client: FlaskClient, auth: dict[str, str], evaluate: Any, fake_openai: FakeOpenAI
) -> None:
    """Ten 99,000-character messages once made a drift call of 247,799 prompt tokens,
    while the summary of the same topic stayed near 10,000: both now share one bound."""
    session = new_session(client, auth)
    for i in range(10):
        post_message(client, auth, session["id"], (f"pasted document {i} " * 6000)[:99_000])
    fake_openai.queue(drift_at(None, drift=False), json.dumps(SUMMARY))
    evaluate(session["activeTopicId"])
    drift, summary = (
        sum(len(m["content"]) for m in request["messages"]) for request in fake_openai.requests
    )
    assert summary < MAX_TRANSCRIPT_CHARS + 4000  # the summary's bound (test_summarization)
    assert drift < MAX_TRANSCRIPT_CHARS + 4000  # was 990,000 characters


@pytest.mark.parametrize(
    "answer",
    ["outside", "nonexistent", "string id", "no drift", "malformed"],
)
def test_r6_an_answer_outside_the_window_is_no_drift(
    client: FlaskClient, auth: dict[str, str], chat: dict[str, Any], evaluate: Any,
    fake_openai: FakeOpenAI, answer: str,
) -> None:  # fmt: skip
    replies = {
        "outside": drift_at(chat["ids"][0]),  # the first message is not in the last 10
        "nonexistent": drift_at(10**9),
        "string id": drift_at("six"),
        "no drift": drift_at(chat["ids"][6], drift=False),
        "malformed": '{"drift": true, "first_message_id": ',
    }
    fake_openai.queue(replies[answer], json.dumps(SUMMARY))
    outcome = evaluate(chat["activeTopicId"])
    assert outcome.outcome == "refresh"
    body = session_body(client, auth, chat["id"])
    assert [t["id"] for t in body["topics"]] == [chat["activeTopicId"]]
    [refreshed] = body["topics"]  # refreshed in place, with the model's summary
    assert (refreshed["title"], refreshed["summary"], refreshed["summarySource"]) == (
        "Billing stack", SUMMARY["summary"], "llm",
    )  # fmt: skip


def test_r30_no_drift_refreshes_in_place_and_keeps_the_notes(
    client: FlaskClient, auth: dict[str, str], chat: dict[str, Any], evaluate: Any,
    fake_openai: FakeOpenAI, connection: Connection,
) -> None:  # fmt: skip
    fake_openai.queue(drift_at(None, drift=False), json.dumps(SUMMARY))
    assert evaluate(chat["activeTopicId"]).outcome == "refresh"
    topic: Any = client.get(f"/agents-api/topics/{chat['activeTopicId']}", headers=auth).json
    assert (topic["status"], topic["title"], topic["summary"], topic["summarySource"]) == (
        "active", SUMMARY["title"], SUMMARY["summary"], "llm",
    )  # fmt: skip
    assert topic["keepInMemory"] is True
    notes = (
        connection.execute(
            text("SELECT status FROM notes WHERE topic_id = :t"), {"t": chat["activeTopicId"]}
        )
        .scalars()
        .all()
    )
    assert notes == ["active"]


def test_r30_an_unchanged_topic_costs_no_llm_call(
    client: FlaskClient, auth: dict[str, str], chat: dict[str, Any], evaluate: Any,
    fake_openai: FakeOpenAI,
) -> None:  # fmt: skip
    fake_openai.queue(drift_at(None, drift=False), json.dumps(SUMMARY))
    evaluate(chat["activeTopicId"])
    calls = fake_openai.calls
    assert evaluate(chat["activeTopicId"], trigger="navigation").outcome == "skipped"
    assert fake_openai.calls == calls
    rows: Any = client.get(
        f"/agents-api/topics/{chat['activeTopicId']}/evaluations", headers=auth
    ).json
    assert [(e["trigger"], e["outcome"], e["llmCalls"]) for e in rows["evaluations"]] == [
        ("manual", "refresh", 2), ("navigation", "skipped", 0),
    ]  # fmt: skip


def test_r14_a_failing_provider_never_forks_or_promotes(
    client: FlaskClient, auth: dict[str, str], chat: dict[str, Any], evaluate: Any,
    fake_openai: FakeOpenAI,
) -> None:  # fmt: skip
    fake_openai.fail(500)
    assert evaluate(chat["activeTopicId"]).outcome == "fallback"
    body = session_body(client, auth, chat["id"])
    assert len(body["topics"]) == 1
    assert body["topics"][0]["keepInMemory"] is False
    assert body["topics"][0]["summarySource"] == "fallback"


def test_r6_a_message_posted_while_the_fork_is_in_flight_lands_in_the_new_topic(
    client: FlaskClient, auth: dict[str, str], chat: dict[str, Any],
    session_factory: sessionmaker[Session], queue: RecordingQueue, openai_llm: OpenAIProvider,
) -> None:  # fmt: skip
    """A message that commits between the drift decision and the fork is moved along."""

    class PostsDuringTheCall:
        model = "test"

        def detect_drift(self, request: Any) -> Any:
            post_message(client, auth, chat["id"], "posted while the LLM was thinking")
            from shared.llm.base import Completion

            return Completion(text=drift_at(chat["ids"][6]), model="test")

        def summarize(self, request: Any) -> Any:
            return openai_llm.summarize(request)

    outcome = evaluate_topic(
        new_uow=lambda: UnitOfWork(session_factory, queue), llm=PostsDuringTheCall(),
        topic_id=uuid.UUID(chat["activeTopicId"]), trigger="manual", scan_back=10,
    )  # fmt: skip
    assert outcome.outcome == "fork"
    after = post_message(client, auth, chat["id"], "posted after the fork")
    body = session_body(client, auth, chat["id"])
    prior, new = body["topics"]
    moved = topic_messages(client, auth, chat["id"], new["id"])
    assert moved[:6] == chat["ids"][6:] and after["id"] == moved[-1] and len(moved) == 8
    everything: Any = client.get(f"/agents-api/sessions/{chat['id']}/messages", headers=auth).json
    all_ids = [m["id"] for m in everything["messages"]]
    assert len(all_ids) == len(set(all_ids))  # no message lost, none in two topics
    assert sorted(topic_messages(client, auth, chat["id"], prior["id"]) + moved) == all_ids
    assert new["messageCount"] == 8 and prior["messageCount"] == 6  # user + assistant


def test_r5_topics_come_from_the_user_and_from_forks(
    client: FlaskClient, auth: dict[str, str], chat: dict[str, Any], evaluate: Any,
    fake_openai: FakeOpenAI,
) -> None:  # fmt: skip
    fake_openai.queue(drift_at(chat["ids"][6]), json.dumps(SUMMARY))
    evaluate(chat["activeTopicId"])
    client.post(f"/agents-api/sessions/{chat['id']}/topics", json={"title": "Taxes"}, headers=auth)
    titles = [t["title"] for t in session_body(client, auth, chat["id"])["topics"]]
    assert titles == ["Billing stack", "Dolomites hike", "Taxes"]


def test_r6_a_fork_reports_its_session_for_live_updates(
    chat: dict[str, Any], evaluate: Any, fake_openai: FakeOpenAI
) -> None:
    fake_openai.queue(drift_at(chat["ids"][6]), json.dumps(SUMMARY))
    outcome = evaluate(chat["activeTopicId"])
    assert outcome.outcome == "fork"
    assert str(outcome.session_id) == chat["id"]  # the worker publishes the fork to it
