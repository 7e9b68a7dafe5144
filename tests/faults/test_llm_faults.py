"""LLM faults × both paths that call the model: no wrong promotion, fallbacks counted.

Every kind of bad answer the provider can give (a timeout, 429, 500, malformed JSON, a
JSON object missing fields or with wrong types, a promotion that is not a JSON
boolean) against the close path's summary and the evaluation pipeline (drift, then
summary), through the real `openai` client and the real provider. A valid answer is
the control row: it must promote (and fork), or the "never promoted" rows prove
nothing. R13 (strict boolean), R14 (fallback), R30 (an unusable drift answer is no
drift).
"""

from __future__ import annotations

import json
import re
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from flask.testing import FlaskClient
from prometheus_client import REGISTRY
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from shared.evaluations.models import Evaluation
from shared.evaluations.pipeline import evaluate_topic
from shared.evaluations.summarize import summarize_topic
from shared.infra.db.uow import UnitOfWork
from shared.infra.queue import RecordingQueue
from shared.llm.openai_provider import OpenAIProvider
from shared.llm.prompts import DRIFT_INSTRUCTIONS
from shared.summaries.rules import fallback_summary
from tests.faults.conftest import report
from tests.helpers import new_session, post_message
from tests.llm_server import FakeOpenAI, Reply

FIRST = "Let's settle the billing stack before Friday."
BILLING = [
    FIRST, "PostgreSQL for invoices.", "Agreed, PostgreSQL.", "Migrations with Alembic.",
    "Deadline is Friday.", "Noted, Friday.",
]  # fmt: skip
HIKING = [
    "Unrelated: I'm planning a hike in the Dolomites.", "Which trail?",
    "The Alta Via 1, in July.", "Book the huts early.", "Which huts?", "Lagazuoi first.",
]  # fmt: skip
WINDOW_ID = re.compile(r"\[id=(\d+)\]")


def is_drift_call(body: dict[str, Any]) -> bool:
    return str(body["messages"][0]["content"]) == DRIFT_INSTRUCTIONS


def hiking_starts(body: dict[str, Any]) -> int:
    """The id of the window's first hiking message (where a correct drift answer points)."""
    window = str(body["messages"][-1]["content"]).split("Window:", 1)[1]
    for line in window.splitlines():
        found = WINDOW_ID.search(line)
        if found and "Dolomites" in line:
            return int(found.group(1))
    raise AssertionError("the drift window has no hiking message")


def summary(include: object) -> str:
    return json.dumps(
        {"title": "Billing", "summary": "PostgreSQL, Friday.", "include_in_memory": include}
    )


def drift(body: dict[str, Any], flag: object) -> str:
    return json.dumps({"drift": flag, "first_message_id": hiking_starts(body), "new_title": "Hike"})


@dataclass(frozen=True)
class Fault:
    """How the model answers a summary call and a drift call, and what must follow."""

    name: str
    answer: Callable[[dict[str, Any]], Reply]
    falls_back: bool  # the summary is the R14 fallback
    call_fails: bool = False  # the call raised (after the client's retries), not a bad answer


def content(summary_text: str, drift_text: Callable[[dict[str, Any]], str]) -> Callable[..., Reply]:
    def answer(body: dict[str, Any]) -> Reply:
        return Reply(drift_text(body) if is_drift_call(body) else summary_text)

    return answer


VALID = Fault("valid (control)", content(summary(True), lambda b: drift(b, True)), False)
FAULTS = [
    # Slower than the provider's 0.5 s timeout, on every attempt.
    Fault("timeout", lambda body: Reply(summary(True), delay_s=1.0), True, call_fails=True),
    Fault("HTTP 429", lambda body: Reply(None, status=429, retry_after_ms=20), True, True),
    Fault("HTTP 500", lambda body: Reply(None, status=500, retry_after_ms=20), True, True),
    Fault(
        "malformed JSON",
        content('{"title": "Billing", "summary": "PostgreSQL', lambda b: '{"drift": true, "first'),
        True,
    ),
    Fault(
        "missing fields",
        content('{"include_in_memory": true}', lambda b: '{"drift": true}'),
        True,
    ),
    Fault(
        "wrong types",
        content(
            '{"title": 7, "summary": ["PostgreSQL"], "include_in_memory": true}',
            lambda b: json.dumps({"drift": 1, "first_message_id": [hiking_starts(b)]}),
        ),
        True,
    ),
    # A usable summary whose promotion is a string: stored, never promoted (R13).
    Fault("non-boolean true", content(summary("true"), lambda b: drift(b, "true")), False),
]

# What the whole matrix saw, reported once at the end of the module.
TALLY: Counter[str] = Counter()  # counts; metric deltas are whole numbers too


@pytest.fixture(scope="module", autouse=True)
def tally_report() -> Iterator[None]:
    yield
    if TALLY["cases"]:
        report(
            f"LLM faults ({len(FAULTS)} kinds x summary, evaluation): {TALLY['cases']} cases,"
            f" {TALLY['wrong_promotions']} wrong promotions, {TALLY['wrong_forks']} forks from a"
            f" bad answer; {TALLY['fallbacks']} fallback summaries stored, each with its error on"
            f" the evaluation row; driftless_fallbacks_total +{TALLY['metric']:g}"
            f" (summarize {TALLY['metric_summarize']:g}, detect_drift"
            f" {TALLY['metric_detect_drift']:g}); the valid control promoted"
            f" {TALLY['control_promoted']} of {TALLY['control']}"
        )


def fallbacks_counted(call: str) -> float:
    total = 0.0
    for reason in ("llm_error", "unusable_answer"):
        labels = {"call": call, "reason": reason}
        total += REGISTRY.get_sample_value("driftless_fallbacks_total", labels) or 0.0
    return total


@pytest.fixture
def new_uow(
    session_factory: sessionmaker[Session], queue: RecordingQueue
) -> Callable[[], UnitOfWork]:
    return lambda: UnitOfWork(session_factory, queue)


def chat(client: FlaskClient, auth: dict[str, str], lines: list[str]) -> dict[str, Any]:
    session = new_session(client, auth, agent="planner", user="ada")
    for i, text in enumerate(lines):
        post_message(client, auth, session["id"], text, role="user" if i % 2 == 0 else "assistant")
    return session


def topics(client: FlaskClient, auth: dict[str, str], sid: str) -> list[dict[str, Any]]:
    body: Any = client.get(f"/agents-api/sessions/{sid}", headers=auth).json
    return list(body["topics"])


def evaluation_rows(new_uow: Callable[[], UnitOfWork], topic_id: str) -> list[Evaluation]:
    with new_uow() as uow:
        return list(
            uow.session.scalars(
                select(Evaluation).where(Evaluation.topic_id == uuid.UUID(topic_id))
            )
        )


@pytest.mark.parametrize("path", ["summary", "evaluation"])
@pytest.mark.parametrize("fault", [VALID, *FAULTS], ids=lambda f: f.name)
def test_r13_r14_an_llm_fault_never_promotes_and_is_counted_as_a_fallback(
    fault: Fault,
    path: str,
    client: FlaskClient,
    auth: dict[str, str],
    new_uow: Callable[[], UnitOfWork],
    fake_openai: FakeOpenAI,
    openai_llm: OpenAIProvider,
) -> None:
    fake_openai.answer_with(fault.answer)
    before = {call: fallbacks_counted(call) for call in ("summarize", "detect_drift")}
    if path == "summary":
        session = chat(client, auth, BILLING)
        topic_id = session["activeTopicId"]
        assert (
            client.post(f"/agents-api/sessions/{session['id']}/topics", headers=auth).status_code
            == 201
        )
        outcome = summarize_topic(
            new_uow=new_uow, llm=openai_llm, topic_id=uuid.UUID(topic_id), trigger="topic_closed"
        ).outcome
        assert len(topics(client, auth, session["id"])) == 2  # closed, and the new active one
    else:
        session = chat(client, auth, BILLING + HIKING)
        topic_id = session["activeTopicId"]
        outcome = evaluate_topic(
            new_uow=new_uow, llm=openai_llm, topic_id=uuid.UUID(topic_id), trigger="manual",
            scan_back=10,
        ).outcome  # fmt: skip
    after = {call: fallbacks_counted(call) - before[call] for call in before}
    all_topics = topics(client, auth, session["id"])
    topic = next(t for t in all_topics if t["id"] == topic_id)
    rows = evaluation_rows(new_uow, topic_id)

    TALLY["cases"] += 1
    if fault is VALID:
        # The control: the same conversation promotes (and, evaluated, forks at the hike).
        TALLY["control"] += 1
        TALLY["control_promoted"] += topic["keepInMemory"]
        assert topic["keepInMemory"] is True and topic["summarySource"] == "llm"
        assert outcome == ("fork" if path == "evaluation" else "refresh")
        assert after == {"summarize": 0, "detect_drift": 0}
        return

    forked = path == "evaluation" and len(all_topics) > 1
    TALLY["wrong_promotions"] += topic["keepInMemory"]
    TALLY["wrong_forks"] += forked
    assert topic["keepInMemory"] is False  # R13, R14: a bad answer never promotes
    assert not forked and outcome != "fork"  # R30: an unusable drift answer is no drift
    [row] = rows
    if fault.falls_back:
        title, text = fallback_summary(FIRST)
        assert outcome == row.outcome == "fallback"
        assert (topic["title"], topic["summary"], topic["summarySource"]) == (
            title,
            text,
            "fallback",
        )
        assert row.error, "a fallback records why on its evaluation row"
        assert after["summarize"] == 1
        TALLY["fallbacks"] += 1
    else:
        assert outcome == row.outcome == "refresh" and row.error is None
        assert topic["summarySource"] == "llm"
        assert after["summarize"] == 0
    # A failed drift call is counted as a no-drift fallback; an unusable answer is just no drift.
    assert after["detect_drift"] == (1 if path == "evaluation" and fault.call_fails else 0)
    TALLY["metric"] += round(sum(after.values()))
    TALLY["metric_summarize"] += round(after["summarize"])
    TALLY["metric_detect_drift"] += round(after["detect_drift"])
