"""`kill -9` of the worker in the middle of summarizations, again and again.

A job held by a killed worker stays unacknowledged on the broker until the visibility
timeout (20 minutes here): it is the beat's reconciler, every DRIFTLESS_RECONCILE_S,
that finds the closed topics still unsummarized and enqueues them again. The claim is
about what is stored: every closed topic ends with exactly one summary, written from
all of its messages, and no message is lost. The LLM may well be *called* more than
once for a topic (a call cut short by the kill, a reconciled duplicate).
"""

from __future__ import annotations

import random
import re
import threading
import time
import uuid
from collections import Counter
from typing import Any

import pytest

from tests.faults.conftest import new_api_key, report
from tests.faults.db import evaluations_per_topic, messages_of, org_of, topics_of
from tests.faults.http import Api
from tests.faults.procs import PrivateRedis, Processes, free_port, system_env, wait_until
from tests.llm_server import FakeOpenAI, Reply

SESSIONS = 10
TOPICS_PER_SESSION = 4  # closed ones; each session keeps one more, active
MESSAGES_PER_TOPIC = 4
KILLS = 3
LLM_DELAY_S = 0.3
# Held calls are answered at the latest after this: well inside the client's timeout (10 s).
HOLD_LIMIT_S = 5
TOKEN = re.compile(r"tok-[0-9a-f]{10}")


def summary_of_tokens(body: dict[str, Any]) -> str:
    """A summary that lists the message tokens the request carried, so the stored
    summary shows which messages it was written from."""
    transcript = str(body["messages"][-1]["content"])
    tokens = TOKEN.findall(transcript)
    return (
        '{"title": "Tokens", "summary": "covers ' + " ".join(tokens) + '",'
        ' "include_in_memory": false}'
    )


def post_conversations(api: Api, sessions: int) -> dict[uuid.UUID, list[str]]:
    """Closed topics with their messages' tokens; every answer must be a 2xx."""
    closed: dict[uuid.UUID, list[str]] = {}
    for _ in range(sessions):
        session = api.new_session()
        for _ in range(TOPICS_PER_SESSION):
            tokens = [f"tok-{uuid.uuid4().hex[:10]}" for _ in range(MESSAGES_PER_TOPIC)]
            topic_id = None
            for i, token in enumerate(tokens):
                role = "user" if i % 2 == 0 else "assistant"
                answer = api.post_message(session["id"], f"message {i} {token}", role=role)
                assert answer.status == 201, answer
                topic_id = uuid.UUID(answer.body["topicId"])
            assert api.close_topic(session["id"]).status == 201
            assert topic_id is not None
            closed[topic_id] = tokens
    return closed


@pytest.mark.faults
def test_kill_9_mid_summary_every_topic_summarized_exactly_once(
    processes: Processes, private_redis: PrivateRedis, fresh_database: str, fake_llm: FakeOpenAI
) -> None:
    # While the gate is closed the fake model holds every summary call it receives, so a
    # kill is certain to find calls in flight. Watching `in_flight` and killing at a
    # random moment was not enough: the call seen could end before the kill.
    answers_open = threading.Event()

    def hold_then_answer(body: dict[str, Any]) -> Reply:
        answers_open.wait(timeout=HOLD_LIMIT_S)
        return Reply(summary_of_tokens(body), delay_s=LLM_DELAY_S)

    fake_llm.answer_with(hold_then_answer)
    env = system_env(
        database_url=fresh_database,
        redis_url=private_redis.url,
        llm_url=fake_llm.base_url,
        DRIFTLESS_LLM_TIMEOUT_S="10",
    )
    port = free_port()
    *_, worker = processes.system(env, port, web_workers=1)
    # Two orgs: their summaries wait in their orgs' lists, served in turn by tickets
    # (shared/infra/fair.py), and a kill may take a job popped from either.
    keys = [new_api_key(fresh_database), new_api_key(fresh_database)]

    # Kill while summaries are in flight; restart with the other pool each time, so
    # both the gevent pool (the Procfile's) and prefork (whose children die with the
    # group) are hit.
    rng = random.Random(7)
    in_flight_at_kill = []
    pools = ["prefork", "gevent"]
    try:
        # The gate starts closed: the summaries of closed topics pile up while posting.
        closed = {}
        for key in keys:
            closed.update(post_conversations(Api(port, key), SESSIONS // len(keys)))
        for kill in range(KILLS):
            wait_until(lambda: fake_llm.in_flight > 0, timeout=30, what="a summary call held")
            time.sleep(rng.uniform(0, LLM_DELAY_S / 2))  # more calls may arrive meanwhile
            in_flight_at_kill.append(fake_llm.in_flight)
            worker.kill()
            assert not worker.alive()
            # The dead worker's calls end (into closed sockets) before the next worker
            # starts, so the next count is of that worker's calls alone.
            answers_open.set()
            wait_until(lambda: fake_llm.in_flight == 0, timeout=10, what="held calls to end")
            if kill < KILLS - 1:
                answers_open.clear()
            pool = pools[kill % 2]
            worker = processes.worker(env, pool=pool, concurrency=16 if pool == "gevent" else 2)
    finally:
        answers_open.set()

    orgs = [org_of(fresh_database, key) for key in keys]

    def unsummarized() -> list[uuid.UUID]:
        rows = {t.id: t for org in orgs for t in topics_of(fresh_database, org)}
        return [topic_id for topic_id in closed if not rows[topic_id].summarized]

    wait_until(
        lambda: not unsummarized(), timeout=60, interval=0.5,
        what=lambda: f"{len(unsummarized())} closed topics still unsummarized",
    )  # fmt: skip
    # Let the reconciler and any duplicate jobs still queued run out before counting.
    time.sleep(3)

    topics = {t.id: t for org in orgs for t in topics_of(fresh_database, org)}
    written: Counter[uuid.UUID] = Counter()
    for org in orgs:
        written.update(evaluations_per_topic(fresh_database, org))
    stored = {k: v for org in orgs for k, v in messages_of(fresh_database, org).items()}
    posted = {token: topic_id for topic_id, tokens in closed.items() for token in tokens}
    stored_tokens = {TOKEN.search(content).group(): tid for tid, content in stored.values()}  # type: ignore[union-attr]

    lost = [token for token in posted if token not in stored_tokens]
    moved = [token for token, tid in posted.items() if stored_tokens.get(token) != tid]
    assert not lost and not moved
    assert len(stored) == len(posted)
    for topic_id, tokens in closed.items():
        topic = topics[topic_id]
        assert topic.status == "closed" and topic.summary_source == "llm"
        assert topic.message_count == MESSAGES_PER_TOPIC
        assert topic.summarized, topic
        # The one stored summary was written from every message of the topic.
        assert sorted(TOKEN.findall(topic.summary or "")) == sorted(tokens)
        assert written[topic_id] == 1, f"topic {topic_id}: {written[topic_id]} summaries written"
    assert not worker.output().count("Traceback"), worker.tail()

    once = sum(1 for topic_id in closed if written[topic_id] == 1)
    report(
        f"kill -9 x{KILLS} (gevent, prefork, gevent, prefork; {sum(in_flight_at_kill)} LLM"
        f" calls in flight at the kills): {len(closed)} topics of {len(orgs)} orgs, {once}"
        f" summarized exactly once,"
        f" {len(lost)} of {len(posted)} messages lost, {fake_llm.calls} LLM calls"
    )
