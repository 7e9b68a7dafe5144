"""Redis (broker, debounce, cache) killed and started again, empty, under load.

PostgreSQL is the source of truth and jobs are sent after the commit, so a message
post succeeds while Redis is down (its jobs are lost; the reconciler recovers the
summaries); an exit trigger answers 202 `dropped` (R29), never a 5xx; the memory
block falls back to PostgreSQL; and the same worker and beat processes carry on once
Redis is back, without a restart.
"""

from __future__ import annotations

import logging
import random
import time
import uuid
from collections import Counter
from collections.abc import Callable
from functools import partial

import pytest
from kombu import Connection, Exchange, Message, Queue

from shared.infra.broker import Transport
from tests.faults.conftest import new_api_key, report
from tests.faults.db import (
    evaluations_per_topic,
    messages_of,
    org_of,
    topics_of,
    written_by_trigger,
)
from tests.faults.http import Api, is_unavailable
from tests.faults.load import Call, Fault, Load
from tests.faults.procs import Child, PrivateRedis, Processes, free_port, system_env, wait_until
from tests.llm_server import FakeOpenAI, Reply

POSTERS = 4
BEFORE_S, OUTAGE_S, AFTER_S = 2.0, 3.0, 3.0
CLOSE_EVERY = 7  # messages
EVALUATE_EVERY = 3
READ_EVERY = 4
TRIGGERS = ["navigation", "visibility", "disconnect", "manual"]
EVALUATE_STATUSES = {"scheduled", "coalesced", "suppressed", "dropped"}
LLM_DELAY_S = 0.5
# Without shared/infra/broker.py's transport, celery 5.7 / kombu 5.7 end the worker when the
# broker connection drops while a late-ack job runs (both tests below caught it).
SUMMARY = '{"title": "Load", "summary": "A topic of the load test.", "include_in_memory": false}'


def poster(api: Api) -> Callable[[Load, int], None]:
    """Each poster has its own session: posts, exit triggers, closes, memory and context."""

    def run(load: Load, n: int) -> None:
        rng = random.Random(n)
        sid = api.new_session(agent=f"agent-{n}")["id"]
        memory = f"/agents-api/memory?agentId=agent-{n}&userId=user"
        i = 0
        while not load.stopping.is_set():
            i += 1
            content = f"poster {n} message {i} {uuid.uuid4().hex[:8]}"
            role = "user" if i % 2 else "assistant"
            load.call("message", partial(api.post_message, sid, content, role), content)
            if i % EVALUATE_EVERY == 0:
                trigger = rng.choice(TRIGGERS)
                load.call("evaluate", partial(api.evaluate, sid, trigger))
            if i % CLOSE_EVERY == 0:
                load.call("close", lambda: api.close_topic(sid))
            if i % READ_EVERY == 0:
                load.call("memory", lambda: api.get(memory))
                load.call("context", lambda: api.get(f"/agents-api/sessions/{sid}/context"))

    return run


def system_under_load(
    processes: Processes, *, database_url: str, redis_url: str, fake_llm: FakeOpenAI
) -> tuple[Api, tuple[Child, Child, Child]]:
    """Web, beat and worker on `redis_url`, and an API client of a new org."""
    # Slow enough that jobs are always in the middle of an LLM call when Redis dies.
    fake_llm.answer_with(lambda body: Reply(SUMMARY, delay_s=LLM_DELAY_S))
    env = system_env(
        database_url=database_url,
        redis_url=redis_url,
        llm_url=fake_llm.base_url,
        DRIFTLESS_DEBOUNCE_MS="200",
    )
    port = free_port()
    children = processes.system(env, port)
    return Api(port, new_api_key(database_url)), children


def lost_messages(database_url: str, org: uuid.UUID, posts: list[Call]) -> tuple[list[str], int]:
    """The posts answered 201 whose message is not stored with its content; and how many
    messages the org has stored."""
    stored = messages_of(database_url, org)
    acknowledged = {c.answer.body["id"]: c.content for c in posts if c.answer.status == 201}
    lost = [mid for mid, text in acknowledged.items() if stored.get(mid, (None, None))[1] != text]
    return lost, len(stored)


@pytest.mark.faults
def test_redis_restart_under_load_loses_no_message_and_the_worker_resumes(
    processes: Processes, private_redis: PrivateRedis, fresh_database: str, fake_llm: FakeOpenAI
) -> None:
    api, (web, beat, worker) = system_under_load(
        processes, database_url=fresh_database, redis_url=private_redis.url, fake_llm=fake_llm
    )
    key = api.key

    fault = Fault()
    load = Load(poster(api), POSTERS)
    load.start()
    try:
        time.sleep(BEFORE_S)
        wait_until(lambda: fake_llm.in_flight > 0, timeout=10, what="an LLM call in flight")
        in_flight_at_kill = fake_llm.in_flight
        fault.begin()
        private_redis.kill()
        time.sleep(OUTAGE_S)
        private_redis.start()  # same port, and empty: no persistence
        fault.end()
        time.sleep(AFTER_S)
    finally:
        load.stop()

    def context_unavailable(call: Call) -> bool:
        # The context needs the working memory, which only Redis holds: while Redis is
        # down it is the contract's 503. Nothing else may fail.
        return (
            call.kind == "context"
            and fault.phase(call) == "during"
            and is_unavailable(call.answer, "Redis")
        )

    calls = load.calls
    unanswered = [c for c in calls if c.answer.status == 0]
    server_errors = [c for c in calls if c.answer.status >= 500 and not context_unavailable(c)]
    assert not unanswered and not server_errors, (unanswered + server_errors)[:5]

    # Messages are written to PostgreSQL whatever Redis does: every post succeeded...
    messages = load.of("message")
    assert all(c.answer.status == 201 for c in messages)
    assert all(c.answer.status == 201 for c in load.of("close"))
    # ...and every one answered 201 is stored, with its content: none lost, none extra.
    org = org_of(fresh_database, key)
    lost, stored = lost_messages(fresh_database, org, messages)
    assert not lost
    assert stored == len(messages)

    # Exit triggers: always 202 with a contract status; dropped while Redis was down.
    triggers = load.of("evaluate")
    assert all(c.answer.status == 202 for c in triggers)
    statuses = Counter((fault.phase(c), c.answer.body["status"]) for c in triggers)
    assert {status for _, status in statuses} <= EVALUATE_STATUSES
    assert statuses["during", "dropped"] >= 1, statuses
    assert statuses["after", "scheduled"] >= 1, statuses
    assert all(c.answer.status == 200 for c in load.of("memory"))  # falls back to PostgreSQL
    context = load.of("context")
    assert all(c.answer.status == 200 or context_unavailable(c) for c in context)
    assert all(c.answer.status == 200 for c in context if fault.phase(c) != "during")

    # The same worker and beat: topics closed while Redis was down (their jobs lost)
    # are recovered by the reconciler, and a topic closed now is summarized by its job.
    assert beat.alive() and web.alive()
    assert worker.alive(), worker.tail()
    session = api.new_session(agent="after-restart")
    assert api.post_message(session["id"], "After the restart").status == 201
    final = uuid.UUID(session["activeTopicId"])
    assert api.close_topic(session["id"]).status == 201
    closed = [t.id for t in topics_of(fresh_database, org) if t.status == "closed"]
    wait_until(
        lambda: all(t.summarized for t in topics_of(fresh_database, org) if t.id in closed),
        timeout=60, interval=0.5, what="every closed topic summarized after the restart",
    )  # fmt: skip
    assert str(final) in worker.output()  # this worker ran its job
    assert evaluations_per_topic(fresh_database, org)[final] == 1
    assert len([c for c in processes.children if c.name == "worker"]) == 1  # never restarted
    reconciled = written_by_trigger(fresh_database, org)["reconcile"]

    during = Counter(c.kind for c in calls if fault.phase(c) == "during")
    context_503 = sum(c.answer.status == 503 for c in context)
    report(
        f"Redis killed under load ({POSTERS} clients, {OUTAGE_S:g} s down, {in_flight_at_kill}"
        " LLM calls in flight, restarted empty):"
        f" {len(messages)} message posts all 201 ({during['message']} overlapping the outage),"
        f" {len(lost)} lost; {len(triggers)} exit triggers all 202"
        f" ({statuses['during', 'dropped']} dropped during the outage), 0 answered 5xx;"
        f" {len(load.of('memory'))} memory reads all 200; {len(context)} context reads,"
        f" {context_503} answered 503 during the outage; {len(closed)} closed topics all"
        f" summarized ({reconciled} by the reconciler); worker pid {worker.pid} never restarted"
    )


@pytest.mark.faults
def test_a_job_in_flight_when_redis_restarts_does_not_end_the_worker(
    processes: Processes, private_redis: PrivateRedis, fresh_database: str, fake_llm: FakeOpenAI
) -> None:
    """The quiet case the load test rarely hits: one summary mid-call, nothing else."""
    fake_llm.answer_with(lambda body: Reply(SUMMARY, delay_s=2.0))
    env = system_env(
        database_url=fresh_database,
        redis_url=private_redis.url,
        llm_url=fake_llm.base_url,
    )
    port = free_port()
    web = processes.web(env, port, workers=1, wait=False)
    worker = processes.worker(env, wait=False)
    for child in (web, worker):
        child.wait_ready()
    api = Api(port, new_api_key(fresh_database))
    session = api.new_session()
    assert api.post_message(session["id"], "Summarize me while Redis restarts").status == 201
    assert api.close_topic(session["id"]).status == 201
    wait_until(lambda: fake_llm.in_flight > 0, timeout=20, what="the summary call in flight")

    private_redis.kill()
    time.sleep(3)
    private_redis.start()
    time.sleep(3)  # the call ends and the worker reconnects

    exited = "" if worker.alive() else " (worker exited)"
    report(f"Redis killed with 1 summary in flight, no load: worker alive {worker.alive()}{exited}")
    assert worker.alive(), worker.tail()
    again = api.new_session()
    assert api.post_message(again["id"], "And after it").status == 201
    assert api.close_topic(again["id"]).status == 201
    org = org_of(fresh_database, api.key)
    topic = uuid.UUID(again["activeTopicId"])
    wait_until(
        lambda: any(t.id == topic and t.summarized for t in topics_of(fresh_database, org)),
        timeout=30, interval=0.5, what="a summary by the same worker after the restart",
    )  # fmt: skip


@pytest.mark.faults
def test_a_consumer_whose_every_ack_failed_while_redis_was_down_reconnects(
    private_redis: PrivateRedis,
) -> None:
    """What the load test above caught one run in three: every task running when Redis
    went away failed its ack, so every prefetch slot stayed taken, the full consumer
    never read the dead connection again, and the worker idled for good. The failed ack
    marks the broker lost; the next poll raises the connection error celery reconnects on."""
    name = f"acks-{uuid.uuid4().hex[:8]}"
    queue = Queue(name, Exchange(name), routing_key=name)
    received: list[Message] = []
    with Connection(private_redis.url, transport=Transport) as connection:
        with connection.Producer() as producer:
            producer.publish({"n": 1}, exchange=queue.exchange, routing_key=name, declare=[queue])
        consumer = connection.Consumer(
            [queue], callbacks=[lambda _body, message: received.append(message)], prefetch_count=1
        )
        with consumer:
            connection.drain_events(timeout=2.0)  # the one slot is taken
            [message] = received

            private_redis.kill()
            message.ack_log_error(logging.getLogger(__name__), connection.connection_errors)
            assert not message.acknowledged  # as celery's "Couldn't ack" leaves it
            private_redis.start()

            with pytest.raises(connection.connection_errors) as raised:
                connection.drain_events(timeout=2.0)
            assert "an ack failed" in str(raised.value)
