"""The gevent worker holds every task to its hard time limit: a hung LLM call frees its slot.

A real `celery worker --pool gevent` (the Procfile's pool) with two slots, and a model
that never answers the summaries of two topics: both slots hang in the provider call.
Celery's gevent pool raises gevent.Timeout in a task's greenlet at its hard time limit
(worker/app.py sets 300 s; the hung jobs here carry a 3 s limit of their own, Celery's
per-message `time_limit`), so both slots come back and the jobs sent after them run.
The timed-out task failed without writing: its topic is neither summarized nor
promoted, and it has no audit row. The reconciler (beat) then asks for it again, and
once the model answers it is summarized exactly once.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from celery import Celery

from shared.infra.config import Settings
from shared.infra.db.engine import make_engine, make_session_factory
from shared.infra.db.uow import UnitOfWork
from shared.infra.queue import SUMMARIZE_TOPIC, Job, RecordingQueue
from shared.sessions.service import create_session, open_topic, post_message
from tests.faults.conftest import new_api_key, report
from tests.faults.db import evaluations_per_topic, org_of, topics_of
from tests.faults.procs import PrivateRedis, Processes, system_env, wait_until
from tests.llm_server import FakeOpenAI, Reply
from worker.app import LLM_TASK_TIME_LIMIT_S, make_celery

SLOTS = 2
HUNG = 2  # as many as there are slots: without the limit, nothing else could run
FLOWING = 4
HANG_LIMIT_S = 3
HANG_WORD = "hang-the-model"
ANSWER = (
    '{"title": "Billing", "summary": "PostgreSQL for invoices, Friday.", "include_in_memory": true}'
)
TURNS = [
    "Let's settle the billing stack before Friday.", "PostgreSQL or MongoDB?",
    "PostgreSQL: invoices need transactions.", "Agreed, PostgreSQL.",
    "Celery on Redis for the retries.", "Noted. Deadline Friday.",
]  # fmt: skip


def closed_topics(database_url: str, org_id: uuid.UUID, count: int, *, word: str) -> list[Job]:
    """`count` topics of six messages, closed; their summary jobs, not sent."""
    engine = make_engine(database_url, pool_size=1, max_overflow=0)
    factory, queue = make_session_factory(engine), RecordingQueue()
    try:
        for i in range(count):
            with UnitOfWork(factory, queue) as uow:
                view = create_session(uow=uow, org_id=org_id, agent_id="a", user_id=f"u{i}")
                for n, text in enumerate(TURNS):
                    post_message(
                        uow=uow, org_id=org_id, session_id=view.session.id,
                        role="user" if n % 2 == 0 else "assistant", content=f"{text} {word}",
                    )  # fmt: skip
                uow.commit()
            # Closed in a transaction of its own, as a client's next request would.
            with UnitOfWork(factory, queue) as uow:
                open_topic(uow=uow, org_id=org_id, session_id=view.session.id, title=None)
                uow.commit()
    finally:
        engine.dispose()
    jobs = [job for job in queue.sent if job.task == SUMMARIZE_TOPIC]
    assert len(jobs) == count
    return jobs


@pytest.fixture
def sender(private_redis: PrivateRedis, fresh_database: str) -> Iterator[Celery]:
    """A Celery app that sends to the test's broker, as the web does."""
    app = make_celery(
        Settings(
            database_url=fresh_database,
            redis_url=private_redis.url,
            broker_url=private_redis.url,
        )
    )
    yield app
    app.close()


@pytest.mark.faults
def test_a_hung_llm_call_is_ended_at_the_hard_time_limit_and_its_slot_serves_again(
    processes: Processes,
    private_redis: PrivateRedis,
    fresh_database: str,
    fake_llm: FakeOpenAI,
    sender: Celery,
) -> None:
    # The time limit the hung jobs carry replaces the app's: the same mechanism.
    sender.loader.import_default_modules()  # worker.tasks, as the worker imports it
    assert sender.tasks[SUMMARIZE_TOPIC].time_limit == LLM_TASK_TIME_LIMIT_S
    model_answers = threading.Event()

    def hang_or_answer(body: dict[str, Any]) -> Reply:
        if HANG_WORD in str(body["messages"][-1]["content"]):
            model_answers.wait()  # no answer while the gate is shut
        return Reply(ANSWER)

    fake_llm.answer_with(hang_or_answer)
    env = system_env(
        database_url=fresh_database,
        redis_url=private_redis.url,
        llm_url=fake_llm.base_url,
        # The client would wait far longer than the task may run.
        DRIFTLESS_LLM_TIMEOUT_S="600",
        DRIFTLESS_LLM_MAX_RETRIES="0",
    )
    org = org_of(fresh_database, new_api_key(fresh_database))
    hung = closed_topics(fresh_database, org, HUNG, word=HANG_WORD)
    flowing = closed_topics(fresh_database, org, FLOWING, word="flowing")
    worker = processes.worker(env, pool="gevent", concurrency=SLOTS)
    try:
        for job in hung:
            sender.send_task(job.task, kwargs=job.kwargs, time_limit=HANG_LIMIT_S)
        wait_until(lambda: fake_llm.in_flight == HUNG, timeout=30, what="both slots to hang")
        for job in flowing:
            sender.send_task(job.task, kwargs=job.kwargs)

        def topics() -> dict[uuid.UUID, Any]:
            return {t.id: t for t in topics_of(fresh_database, org)}

        def flowing_done() -> bool:
            rows = topics()
            return all(rows[uuid.UUID(job.kwargs["topic_id"])].summarized for job in flowing)

        wait_until(flowing_done, timeout=60, what="the jobs behind the hung ones to run")
        limit_hits = worker.output().count(f"Hard time limit ({HANG_LIMIT_S}s) exceeded")
        rows, written = topics(), evaluations_per_topic(fresh_database, org)
        for job in hung:
            topic = rows[uuid.UUID(job.kwargs["topic_id"])]
            assert not topic.summarized and topic.summary_source is None
            assert topic.keep_in_memory is False  # nothing promoted by a call that never ended
            assert written[topic.id] == 0
        for job in flowing:
            topic = rows[uuid.UUID(job.kwargs["topic_id"])]
            assert topic.summary_source == "llm" and topic.keep_in_memory is True
            assert written[topic.id] == 1
        assert limit_hits == HUNG, worker.tail()
        assert worker.alive()
        assert "psycopg2 waits yield to other greenlets" in worker.output()

        # The failed jobs are not lost: the reconciler asks again, and now the model answers.
        model_answers.set()
        processes.beat(env)

        def hung_done() -> bool:
            rows = topics()
            return all(rows[uuid.UUID(job.kwargs["topic_id"])].summarized for job in hung)

        wait_until(hung_done, timeout=60, what="the reconciler to summarize the hung topics")
        rows, written = topics(), evaluations_per_topic(fresh_database, org)
        for job in hung:
            topic = rows[uuid.UUID(job.kwargs["topic_id"])]
            assert topic.summary_source == "llm" and topic.keep_in_memory is True
            assert written[topic.id] == 1
    finally:
        model_answers.set()
    report(
        f"gevent pool, {SLOTS} slots, {HUNG} LLM calls that never answer: {limit_hits} ended"
        f" at the hard time limit ({HANG_LIMIT_S} s here, {LLM_TASK_TIME_LIMIT_S} s in"
        f" production), {FLOWING} jobs behind them summarized, 0 hung topics promoted;"
        f" the reconciler summarized the {HUNG} once the model answered"
    )
