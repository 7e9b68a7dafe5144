"""An LLM answer about a topic that a fork changed meanwhile is discarded ([2.1] item 5).

The race, seen with a slow LLM: 9 "alpha" then 31 "beta" messages; the evaluation at
message 10 forked, the one at message 40 had read its snapshot before the fork
committed and wrote after it. The closed alpha topic became "beta", got the beta
summary, was promoted, and had a watermark past its last message. Here the race is
made deterministic: the summary answer is held until the fork has committed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from shared.evaluations.models import Evaluation
from shared.evaluations.pipeline import evaluate_topic
from shared.evaluations.summarize import summarize_topic
from shared.infra.db.uow import UnitOfWork
from shared.infra.queue import RecordingQueue
from tests.forks import (
    AlphaThenBeta,
    HeldLLM,
    alpha_then_beta,
    assert_alpha_untouched,
    fork_at,
    load_topic,
)


@pytest.fixture
def new_uow(committed_factory: sessionmaker[Session]) -> Callable[[], UnitOfWork]:
    return lambda: UnitOfWork(committed_factory, RecordingQueue())


@pytest.fixture
def world(new_uow: Callable[[], UnitOfWork], committed_factory: Any) -> AlphaThenBeta:
    return alpha_then_beta(new_uow, committed_factory)


@pytest.fixture
def held() -> Iterator[HeldLLM]:
    llm = HeldLLM()
    yield llm
    llm.release.set()  # never leave a thread waiting


def test_a_refresh_whose_topic_forked_during_the_llm_call_writes_nothing(
    new_uow: Callable[[], UnitOfWork], world: AlphaThenBeta, held: HeldLLM
) -> None:
    topic_id, ids = world.topic_id, world.ids
    with ThreadPoolExecutor(max_workers=1) as pool:
        evaluation: Future[Any] = pool.submit(
            evaluate_topic, new_uow=new_uow, llm=held, topic_id=topic_id,
            trigger="heartbeat", scan_back=10,
        )  # fmt: skip
        assert held.summary_asked.wait(timeout=30)  # its snapshot holds all 40 messages
        new_topic_id = fork_at(new_uow, topic_id, ids[9])  # the beta messages move out
        held.release.set()
        outcome = evaluation.result(timeout=30)

    assert outcome.outcome == "skipped"
    assert_alpha_untouched(load_topic(new_uow, topic_id), ids)
    beta = load_topic(new_uow, new_topic_id)
    assert (beta.status, beta.message_count) == ("active", 31)
    with new_uow() as uow:
        audit = uow.session.scalars(select(Evaluation).where(Evaluation.topic_id == topic_id)).one()
    assert (audit.outcome, audit.llm_calls) == ("skipped", 2)
    assert audit.error is not None and "discarded" in audit.error


def test_a_summary_whose_topic_forked_during_the_llm_call_writes_nothing(
    new_uow: Callable[[], UnitOfWork], world: AlphaThenBeta, held: HeldLLM
) -> None:
    topic_id, ids = world.topic_id, world.ids
    with ThreadPoolExecutor(max_workers=1) as pool:
        job: Future[Any] = pool.submit(
            summarize_topic, new_uow=new_uow, llm=held, topic_id=topic_id, trigger="reevaluate"
        )
        assert held.summary_asked.wait(timeout=30)
        fork_at(new_uow, topic_id, ids[9])
        held.release.set()
        outcome = job.result(timeout=30)

    assert outcome.outcome == "skipped"
    assert_alpha_untouched(load_topic(new_uow, topic_id), ids)


def test_without_a_fork_the_held_answer_is_written(
    new_uow: Callable[[], UnitOfWork], world: AlphaThenBeta, held: HeldLLM
) -> None:
    """The control: the same held answer, no fork in between, is a refresh."""
    topic_id, ids = world.topic_id, world.ids
    held.release.set()
    outcome = evaluate_topic(
        new_uow=new_uow, llm=held, topic_id=topic_id, trigger="heartbeat", scan_back=10
    )
    assert outcome.outcome == "refresh"
    topic = load_topic(new_uow, topic_id)
    assert (topic.title, topic.summarized_through_id, topic.keep_in_memory) == (
        "Beta",
        ids[-1],
        True,
    )
