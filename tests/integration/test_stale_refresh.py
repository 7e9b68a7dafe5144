"""An LLM answer about a topic that a fork changed meanwhile is discarded ([2.1] item 5).

The race, seen with a slow LLM: 9 "alpha" then 31 "beta" messages; the evaluation at
message 10 forked, the one at message 40 had read its snapshot before the fork
committed and wrote after it. The closed alpha topic became "beta", got the beta
summary, was promoted, and had a watermark past its last message. Here the race is
made deterministic: the summary answer is held until the fork has committed.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from shared.auth.service import org_for_key
from shared.db.uow import UnitOfWork
from shared.evaluations.models import Evaluation
from shared.evaluations.pipeline import evaluate_topic
from shared.llm.base import Completion, DriftRequest, SummaryRequest
from shared.queue import RecordingQueue
from shared.sessions.service import create_session, post_message
from shared.summaries.service import summarize_topic
from shared.topics.fork import fork_topic, record_fork
from shared.topics.models import Topic
from tests.conftest import new_key

BETA_SUMMARY = {"title": "Beta", "summary": "All about beta.", "include_in_memory": True}


class HeldLLM:
    """Answers "no drift" at once; holds every summary answer until released."""

    def __init__(self) -> None:
        self.summary_asked = threading.Event()
        self.release = threading.Event()

    def detect_drift(self, request: DriftRequest) -> Completion:
        answer = {"drift": False, "first_message_id": None, "new_title": None}
        return Completion(text=json.dumps(answer), model="held")

    def summarize(self, request: SummaryRequest) -> Completion:
        self.summary_asked.set()
        assert self.release.wait(timeout=30), "the test never released the answer"
        return Completion(text=json.dumps(BETA_SUMMARY), model="held")


@pytest.fixture
def new_uow(committed_factory: sessionmaker[Session]) -> Callable[[], UnitOfWork]:
    return lambda: UnitOfWork(committed_factory, RecordingQueue())


@pytest.fixture
def alpha_then_beta(new_uow: Callable[[], UnitOfWork], committed_factory: Any) -> dict[str, Any]:
    """A committed session whose one topic holds 9 alpha and 31 beta messages."""
    key = new_key(committed_factory)
    with new_uow() as uow:
        org_id = org_for_key(uow=uow, key=key)
        assert org_id is not None
        view = create_session(uow=uow, org_id=org_id, agent_id="planner", user_id="ada")
        session_id, topic_id = view.session.id, view.topics[0].id
        ids = []
        for i in range(40):
            subject = "alpha" if i < 9 else "beta"
            posted = post_message(
                uow=uow, org_id=org_id, session_id=session_id,
                role="user" if i % 2 == 0 else "assistant", content=f"{subject} point {i}",
            )  # fmt: skip
            ids.append(posted.message.id)
        uow.commit()
    return {"topic_id": topic_id, "ids": ids}


@pytest.fixture
def held() -> Iterator[HeldLLM]:
    llm = HeldLLM()
    yield llm
    llm.release.set()  # never leave a thread waiting


def _fork_at(new_uow: Callable[[], UnitOfWork], topic_id: uuid.UUID, first_id: int) -> uuid.UUID:
    with new_uow() as uow:
        forked = fork_topic(uow=uow, topic_id=topic_id, first_message_id=first_id, new_title="Beta")
        assert forked is not None
        record_fork(uow=uow, forked=forked, first_message_id=first_id)
        uow.commit()
        return forked.new.id


def _topic(new_uow: Callable[[], UnitOfWork], topic_id: uuid.UUID) -> Topic:
    with new_uow() as uow:
        topic = uow.session.get(Topic, topic_id)
        assert topic is not None
        return topic


def _assert_alpha_untouched(alpha: Topic, ids: list[int]) -> None:
    assert alpha.status == "closed"
    assert alpha.last_message_id == ids[8]
    assert alpha.title != "Beta" and alpha.summary != BETA_SUMMARY["summary"]
    assert alpha.keep_in_memory is False
    watermark = alpha.summarized_through_id
    assert watermark is None or watermark <= alpha.last_message_id


def test_a_refresh_whose_topic_forked_during_the_llm_call_writes_nothing(
    new_uow: Callable[[], UnitOfWork], alpha_then_beta: dict[str, Any], held: HeldLLM
) -> None:
    topic_id, ids = alpha_then_beta["topic_id"], alpha_then_beta["ids"]
    with ThreadPoolExecutor(max_workers=1) as pool:
        evaluation: Future[Any] = pool.submit(
            evaluate_topic, new_uow=new_uow, llm=held, topic_id=topic_id,
            trigger="heartbeat", scan_back=10,
        )  # fmt: skip
        assert held.summary_asked.wait(timeout=30)  # its snapshot holds all 40 messages
        new_topic_id = _fork_at(new_uow, topic_id, ids[9])  # the beta messages move out
        held.release.set()
        outcome = evaluation.result(timeout=30)

    assert outcome.outcome == "skipped"
    _assert_alpha_untouched(_topic(new_uow, topic_id), ids)
    beta = _topic(new_uow, new_topic_id)
    assert (beta.status, beta.message_count) == ("active", 31)
    with new_uow() as uow:
        audit = uow.session.scalars(select(Evaluation).where(Evaluation.topic_id == topic_id)).one()
    assert (audit.outcome, audit.llm_calls) == ("skipped", 2)
    assert audit.error is not None and "discarded" in audit.error


def test_a_summary_whose_topic_forked_during_the_llm_call_writes_nothing(
    new_uow: Callable[[], UnitOfWork], alpha_then_beta: dict[str, Any], held: HeldLLM
) -> None:
    topic_id, ids = alpha_then_beta["topic_id"], alpha_then_beta["ids"]
    with ThreadPoolExecutor(max_workers=1) as pool:
        job: Future[Any] = pool.submit(
            summarize_topic, new_uow=new_uow, llm=held, topic_id=topic_id, trigger="reevaluate"
        )
        assert held.summary_asked.wait(timeout=30)
        _fork_at(new_uow, topic_id, ids[9])
        held.release.set()
        outcome = job.result(timeout=30)

    assert outcome.outcome == "skipped"
    _assert_alpha_untouched(_topic(new_uow, topic_id), ids)


def test_without_a_fork_the_held_answer_is_written(
    new_uow: Callable[[], UnitOfWork], alpha_then_beta: dict[str, Any], held: HeldLLM
) -> None:
    """The control: the same held answer, no fork in between, is a refresh."""
    topic_id, ids = alpha_then_beta["topic_id"], alpha_then_beta["ids"]
    held.release.set()
    outcome = evaluate_topic(
        new_uow=new_uow, llm=held, topic_id=topic_id, trigger="heartbeat", scan_back=10
    )
    assert outcome.outcome == "refresh"
    topic = _topic(new_uow, topic_id)
    assert (topic.title, topic.summarized_through_id, topic.keep_in_memory) == (
        "Beta",
        ids[-1],
        True,
    )
