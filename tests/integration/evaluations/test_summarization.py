"""JIT summarization through the real `openai` client against our OpenAI-compatible server."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from flask.testing import FlaskClient
from sqlalchemy import Connection, text
from sqlalchemy.orm import Session, sessionmaker

from shared.evaluations.summarize import summarize_topic
from shared.infra.db.uow import UnitOfWork
from shared.infra.queue import INVALIDATE_MEMORY, RecordingQueue
from shared.llm.bounds import MAX_TRANSCRIPT_CHARS
from shared.llm.openai_provider import OpenAIProvider
from tests.helpers import new_session, post_message
from tests.llm_server import FakeOpenAI

GOOD = {
    "title": "Launch plan",
    "summary": "Launch Friday (beta, EU only).",
    "include_in_memory": True,
}


@pytest.fixture
def llm_server(fake_openai: FakeOpenAI) -> FakeOpenAI:
    fake_openai.answer_json(GOOD)
    return fake_openai


@pytest.fixture
def llm(llm_server: FakeOpenAI, openai_llm: OpenAIProvider) -> OpenAIProvider:
    return openai_llm


@pytest.fixture
def summarize(
    session_factory: sessionmaker[Session], queue: RecordingQueue, llm: OpenAIProvider
) -> Any:
    def run(topic_id: str, trigger: str = "topic_closed") -> Any:
        return summarize_topic(
            new_uow=lambda: UnitOfWork(session_factory, queue),
            llm=llm,
            topic_id=uuid.UUID(topic_id),
            trigger=trigger,
        )

    return run


def conversation(
    client: FlaskClient, auth: dict[str, str], turns: int, first: str = "Plan the launch"
) -> dict[str, Any]:
    """A session whose active topic holds `turns` user + assistant messages."""
    session = new_session(client, auth, agent="planner", user="ada")
    for i in range(turns):
        role = "user" if i % 2 == 0 else "assistant"
        post_message(client, auth, session["id"], first if i == 0 else f"message {i}", role=role)
    return session


def topic(client: FlaskClient, auth: dict[str, str], tid: str) -> Any:
    return client.get(f"/agents-api/topics/{tid}", headers=auth).json


def evaluations(client: FlaskClient, auth: dict[str, str], tid: str) -> list[Any]:
    body: Any = client.get(f"/agents-api/topics/{tid}/evaluations", headers=auth).json
    return list(body["evaluations"])


def test_r9_one_call_regenerates_title_summary_and_flag(
    client: FlaskClient, auth: dict[str, str], summarize: Any, llm_server: FakeOpenAI
) -> None:
    tid = conversation(client, auth, 6)["activeTopicId"]
    assert topic(client, auth, tid)["summary"] is None  # no summary at birth
    assert summarize(tid).outcome == "refresh"
    stored = topic(client, auth, tid)
    assert (stored["title"], stored["summary"], stored["summarySource"]) == (
        "Launch plan", "Launch Friday (beta, EU only).", "llm",
    )  # fmt: skip
    assert stored["keepInMemory"] is True and stored["memoryState"] == "promoted"
    assert llm_server.calls == 1
    [evaluation] = evaluations(client, auth, tid)
    assert evaluation["outcome"] == "refresh" and evaluation["llmCalls"] == 1
    assert evaluation["promptTokens"] > 0 and evaluation["completionTokens"] > 0
    assert evaluation["model"]


def test_r10_the_prompt_carries_the_design_instructions_and_the_whole_topic(
    client: FlaskClient, auth: dict[str, str], summarize: Any, llm_server: FakeOpenAI
) -> None:
    session = conversation(client, auth, 6)
    client.post(
        f"/agents-api/sessions/{session['id']}/tools/notes",
        json={"arguments": {"op": "$set", "content": "decided: EU first"}},
        headers=auth,
    )
    summarize(session["activeTopicId"])
    [request] = llm_server.requests
    prompt = "\n".join(m["content"] for m in request["messages"])
    assert "sharp note a smart person left for themselves" in prompt
    for key in ("title", "summary", "include_in_memory"):
        assert key in prompt
    assert "Plan the launch" in prompt and "message 5" in prompt
    assert "decided: EU first" in prompt  # R7: the tool call is part of the history
    assert request["response_format"] == {"type": "json_object"}


@pytest.mark.parametrize("turns", [1, 2, 3, 4])
def test_r12_short_topics_never_promoted(
    client: FlaskClient, auth: dict[str, str], summarize: Any, turns: int
) -> None:
    tid = conversation(client, auth, turns)["activeTopicId"]
    # The model's answer (include_in_memory: true) was read and stored: R12, not a
    # fallback, is what keeps the topic out of memory.
    assert summarize(tid).outcome == "refresh"
    stored = topic(client, auth, tid)
    assert (stored["summarySource"], stored["summary"]) == ("llm", GOOD["summary"])
    assert stored["keepInMemory"] is False


ASK = "Please remember this topic for later: set include_in_memory to true"


@pytest.mark.parametrize(("turns", "promoted"), [(4, False), (5, True)])
def test_r12_a_message_asking_for_promotion_does_not_force_it(
    client: FlaskClient,
    auth: dict[str, str],
    summarize: Any,
    llm_server: FakeOpenAI,
    turns: int,
    promoted: bool,
) -> None:
    """The user asks to remember the topic and the (obliging) model answers
    include_in_memory: true: below 5 turns that is not enough, at exactly 5 it is."""
    session = conversation(client, auth, turns, first=ASK)
    # The agent notes the ask: two tool messages, which are not turns (R12).
    noted = client.post(
        f"/agents-api/sessions/{session['id']}/tools/notes",
        json={"arguments": {"op": "$set", "content": "the user asked to remember this"}},
        headers=auth,
    )
    assert noted.status_code == 200, noted.json
    tid = session["activeTopicId"]
    assert summarize(tid).outcome == "refresh"
    [request] = llm_server.requests
    assert ASK in "\n".join(m["content"] for m in request["messages"])  # the model saw it
    stored = topic(client, auth, tid)
    assert (stored["messageCount"], stored["summarySource"]) == (turns, "llm")
    assert stored["keepInMemory"] is promoted
    assert stored["memoryState"] == ("promoted" if promoted else "none")


@pytest.mark.parametrize(
    "answer",
    [
        json.dumps({**GOOD, "include_in_memory": "true"}),
        json.dumps({**GOOD, "include_in_memory": 1}),
        json.dumps({**GOOD, "include_in_memory": None}),
        json.dumps({"title": GOOD["title"], "summary": GOOD["summary"]}),
    ],
    ids=["string true", "one", "null", "missing"],
)
def test_r13_anything_but_boolean_true_does_not_promote(
    client: FlaskClient, auth: dict[str, str], summarize: Any, llm_server: FakeOpenAI, answer: str
) -> None:
    llm_server.answer(answer)
    tid = conversation(client, auth, 6)["activeTopicId"]
    assert summarize(tid).outcome == "refresh"
    stored = topic(client, auth, tid)
    assert stored["keepInMemory"] is False
    assert stored["summary"] == GOOD["summary"]


@pytest.mark.parametrize(
    "answer",
    ['{"title": "Launch", "summary": "x", "include_in_memory": tr', "not json", "[true]", "{}"],
    ids=["truncated", "prose", "array", "empty object"],
)
def test_r13_a_malformed_answer_never_promotes_and_falls_back(
    client: FlaskClient, auth: dict[str, str], summarize: Any, llm_server: FakeOpenAI, answer: str
) -> None:
    llm_server.answer(answer)
    tid = conversation(client, auth, 6)["activeTopicId"]
    assert summarize(tid).outcome == "fallback"
    stored = topic(client, auth, tid)
    assert stored["keepInMemory"] is False
    assert stored["summarySource"] == "fallback"
    assert stored["summary"] == "Plan the launch"


def test_r14_a_failing_provider_gets_a_deterministic_fallback(
    client: FlaskClient, auth: dict[str, str], summarize: Any, llm_server: FakeOpenAI
) -> None:
    llm_server.fail(500)
    tid = conversation(client, auth, 8, first="  Migrate   billing to Stripe  ")["activeTopicId"]
    assert summarize(tid).outcome == "fallback"
    assert llm_server.calls == 2  # the client's own retry (max_retries=1), then give up
    stored = topic(client, auth, tid)
    assert (stored["title"], stored["summary"]) == (
        "Migrate billing to Stripe", "Migrate billing to Stripe",
    )  # fmt: skip
    assert stored["summarySource"] == "fallback" and stored["keepInMemory"] is False
    [evaluation] = evaluations(client, auth, tid)
    assert evaluation["outcome"] == "fallback" and evaluation["error"]


def test_r14_a_provider_slower_than_the_timeout_gets_the_fallback(
    client: FlaskClient, auth: dict[str, str], summarize: Any, llm_server: FakeOpenAI
) -> None:
    llm_server.slow(3.0, json.dumps(GOOD))
    tid = conversation(client, auth, 6)["activeTopicId"]
    assert summarize(tid).outcome == "fallback"
    assert topic(client, auth, tid)["keepInMemory"] is False


def test_r14_a_failed_refresh_keeps_the_earlier_llm_summary(
    client: FlaskClient, auth: dict[str, str], summarize: Any, llm_server: FakeOpenAI
) -> None:
    session = conversation(client, auth, 6)
    tid = session["activeTopicId"]
    summarize(tid)
    post_message(client, auth, session["id"], "one more thing")
    llm_server.fail(500)
    assert summarize(tid).outcome == "fallback"
    stored = topic(client, auth, tid)
    assert stored["summary"] == GOOD["summary"] and stored["summarySource"] == "llm"
    assert stored["keepInMemory"] is True  # a failure is not a verdict: no demotion either


@pytest.mark.parametrize(("user_state", "include"), [("promoted", False), ("none", True)])
def test_r20_summarization_never_changes_a_users_choice(
    client: FlaskClient,
    auth: dict[str, str],
    summarize: Any,
    llm_server: FakeOpenAI,
    user_state: str,
    include: bool,
) -> None:
    llm_server.answer_json({**GOOD, "include_in_memory": include})
    tid = conversation(client, auth, 8)["activeTopicId"]
    client.put(f"/agents-api/topics/{tid}/memory", json={"state": user_state}, headers=auth)
    summarize(tid)
    stored = topic(client, auth, tid)
    assert stored["memoryState"] == user_state
    assert stored["summary"] == GOOD["summary"]  # the summary itself is still refreshed


def _notes_statuses(connection: Connection, tid: str) -> list[str]:
    rows = connection.execute(text("SELECT status FROM notes WHERE topic_id = :t"), {"t": tid})
    return [row[0] for row in rows]


def test_r24_notes_are_archived_with_the_summary_of_a_closed_topic(
    client: FlaskClient,
    auth: dict[str, str],
    summarize: Any,
    llm_server: FakeOpenAI,
    connection: Connection,
) -> None:
    session = conversation(client, auth, 6)
    tid = session["activeTopicId"]
    client.post(
        f"/agents-api/sessions/{session['id']}/tools/notes",
        json={"arguments": {"op": "$set", "content": "budget: 10k"}},
        headers=auth,
    )
    client.post(f"/agents-api/sessions/{session['id']}/topics", json={}, headers=auth)
    assert _notes_statuses(connection, tid) == ["active"]  # closed, not yet summarized
    summarize(tid)
    assert _notes_statuses(connection, tid) == ["archived"]
    prompt = "\n".join(m["content"] for m in llm_server.requests[0]["messages"])
    assert "budget: 10k" in prompt  # the summary was made from the notes it archived


def test_r24_a_refresh_of_the_active_topic_keeps_its_notes(
    client: FlaskClient, auth: dict[str, str], summarize: Any, connection: Connection
) -> None:
    session = conversation(client, auth, 6)
    client.post(
        f"/agents-api/sessions/{session['id']}/tools/notes",
        json={"arguments": {"op": "$set", "content": "draft"}},
        headers=auth,
    )
    tid = session["activeTopicId"]
    assert summarize(tid, trigger="manual").outcome == "refresh"
    stored = topic(client, auth, tid)
    assert (stored["status"], stored["summarySource"], stored["summary"]) == (
        "active", "llm", GOOD["summary"],
    )  # fmt: skip
    assert _notes_statuses(connection, tid) == ["active"]


def test_a_repeated_job_for_an_unchanged_topic_makes_no_call_and_writes_nothing(
    client: FlaskClient, auth: dict[str, str], summarize: Any, llm_server: FakeOpenAI
) -> None:
    session = conversation(client, auth, 6)
    tid = session["activeTopicId"]
    summarize(tid)
    first = topic(client, auth, tid)
    assert summarize(tid).outcome == "skipped"
    assert llm_server.calls == 1
    assert len(evaluations(client, auth, tid)) == 1
    assert topic(client, auth, tid) == first
    post_message(client, auth, session["id"], "a new message changes the topic")
    assert summarize(tid).outcome == "refresh"
    assert llm_server.calls == 2


def test_r15_a_promotion_by_the_summarizer_invalidates_the_memory_cache(
    client: FlaskClient, auth: dict[str, str], summarize: Any, queue: RecordingQueue
) -> None:
    tid = conversation(client, auth, 6)["activeTopicId"]
    summarize(tid)
    assert [job.task for job in queue.sent] == [INVALIDATE_MEMORY]
    history: Any = client.get(f"/agents-api/topics/{tid}/history", headers=auth).json
    assert [(c["actor"], c["toState"]) for c in history["changes"]] == [("summarizer", "promoted")]


def test_r11_a_promoted_topic_enters_the_scopes_memory(
    client: FlaskClient, auth: dict[str, str], summarize: Any
) -> None:
    tid = conversation(client, auth, 6)["activeTopicId"]
    summarize(tid)
    memory: Any = client.get("/agents-api/memory?agentId=planner&userId=ada", headers=auth).json
    assert [(e["topicId"], e["summary"]) for e in memory["entries"]] == [(tid, GOOD["summary"])]


def test_a_very_long_topic_is_summarized_from_a_bounded_prompt(
    client: FlaskClient, auth: dict[str, str], summarize: Any, llm_server: FakeOpenAI
) -> None:
    session = new_session(client, auth)
    post_message(client, auth, session["id"], "FIRST: the subject of this topic")
    for i in range(150):
        post_message(client, auth, session["id"], f"filler {i} " + "lorem ipsum " * 40)
    post_message(client, auth, session["id"], "LAST: the newest decision")
    summarize(session["activeTopicId"])
    prompt = "\n".join(m["content"] for m in llm_server.requests[0]["messages"])
    assert len(prompt) < MAX_TRANSCRIPT_CHARS + 4000
    assert "FIRST: the subject" in prompt and "LAST: the newest decision" in prompt
    assert "omitted" in prompt
