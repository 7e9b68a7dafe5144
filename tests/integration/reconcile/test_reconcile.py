"""The reconciler finds work whose job was lost, asks for it once, and leaves the rest alone.

Every test commits through a queue that loses every job (a broker restarted without
persistence), then runs the reconciler as beat would, a few reconcile periods later. The
reconciler's own jobs wait in their orgs' lists in the suite's Redis (no worker serves
them), marked held there as in production (shared/infra/held.py).
Assertions look only at this test's own rows: other tests may leave committed data.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from flask.testing import FlaskClient
from sqlalchemy import Connection, text
from sqlalchemy.orm import Session, sessionmaker

from shared.evaluations.pipeline import evaluate_topic
from shared.evaluations.summarize import summarize_topic
from shared.infra.db.uow import UnitOfWork
from shared.infra.fair import FairQueue
from shared.infra.held import HeldJobs
from shared.infra.liveness import Heartbeat, alive_key
from shared.infra.queue import (
    EVALUATE_TOPIC,
    INVALIDATE_MEMORY,
    SUMMARIZE_TOPIC,
    CeleryJobQueue,
    Job,
    JobQueue,
    RecordingQueue,
)
from shared.llm.local_provider import LocalProvider
from shared.memory.cache import MemoryCache
from shared.memory.scope import Scope
from shared.reconcile.claims import Claims
from shared.reconcile.service import (
    Reconciled,
    closed_topics_awaiting_summary,
    heartbeats_never_evaluated,
    lost,
    reconcile_lost_work,
)
from shared.sessions.fork import fork_topic, record_fork
from shared.sessions.models import ChatSession
from shared.topics.models import Topic
from tests.helpers import RecordingSender, new_session, post_message
from tests.integration.reevaluations.system import clear_fair_lists

GRACE = dt.timedelta(seconds=60)
INTERVAL = 10
MEMORY = "/agents-api/memory?agentId=agent-1&userId=user-1"


class LosingQueue(RecordingQueue):
    """The broker took every job and then lost it; `sent` stays empty."""

    def __init__(self) -> None:
        super().__init__()
        self.lost: list[Job] = []

    def send(self, job: Job) -> None:
        self.lost.append(job)


class RefusingQueue(RecordingQueue):
    """The broker is down: every send raises (after the commit, as in production)."""

    def send(self, job: Job) -> None:
        raise ConnectionError("broker unreachable")


@pytest.fixture
def queue() -> LosingQueue:
    """Overrides conftest's: the app and `uow` commit, and their jobs vanish."""
    return LosingQueue()


@pytest.fixture
def reconcile(session_factory: sessionmaker[Session], redis_client: redis.Redis) -> Iterator[Any]:
    """One beat run at `now` (default: two reconcile periods from now); the jobs it sent.
    They wait in their orgs' lists (tickets go nowhere), as behind a backlog."""
    claims = Claims(redis_client, ttl_s=300)
    fair = FairQueue(redis_client)
    clear_fair_lists(redis_client)

    def run(
        now: dt.datetime | None = None, queue: JobQueue | None = None
    ) -> tuple[Reconciled, list[Job]]:
        with UnitOfWork(session_factory, queue or CeleryJobQueue(RecordingSender(), fair)) as uow:
            reconciled = reconcile_lost_work(
                uow=uow, cache=MemoryCache(redis_client), claims=claims,
                held=HeldJobs(redis_client), now=now or dt.datetime.now(dt.UTC) + 2 * GRACE,
                grace=GRACE, drift_interval=INTERVAL,
            )  # fmt: skip
            uow.commit()
        claims.record_sent(uow.sent)
        return reconciled, uow.sent

    yield run
    clear_fair_lists(redis_client)


def jobs_for(jobs: list[Job], topic_id: uuid.UUID | str) -> list[Job]:
    return [job for job in jobs if job.kwargs.get("topic_id") == str(topic_id)]


def new_uow(session_factory: sessionmaker[Session]) -> Any:
    return lambda: UnitOfWork(session_factory, RecordingQueue())


# --- 1. closed topics whose summary job was lost ----------------------------------------


def test_a_closed_topic_whose_summary_job_was_lost_is_summarized_again_once(
    client: FlaskClient, auth: dict[str, str], queue: LosingQueue, reconcile: Any,
    session_factory: sessionmaker[Session], org: str,
) -> None:  # fmt: skip
    session = new_session(client, auth)
    post_message(client, auth, session["id"], "We agreed to ship on Friday.")
    client.post(f"/agents-api/sessions/{session['id']}/topics", json={}, headers=auth)
    topic_id = session["activeTopicId"]
    assert [j.task for j in jobs_for(queue.lost, topic_id)] == [SUMMARIZE_TOPIC]

    # Within the grace the normal path may still be on its way: nothing yet.
    _, jobs = reconcile(now=dt.datetime.now(dt.UTC))
    assert jobs_for(jobs, topic_id) == []
    _, jobs = reconcile()
    assert jobs_for(jobs, topic_id) == [
        Job(SUMMARIZE_TOPIC, {"topic_id": topic_id, "trigger": "reconcile"}, org=org)
    ]
    # The next run finds it again, but its job waits in its org's list: not a second copy.
    _, jobs = reconcile()
    assert jobs_for(jobs, topic_id) == []

    outcome = summarize_topic(
        new_uow=new_uow(session_factory), llm=LocalProvider(), topic_id=uuid.UUID(topic_id),
        trigger="reconcile",
    )  # fmt: skip
    assert outcome.outcome in ("refresh", "fallback")
    with UnitOfWork(session_factory, RecordingQueue()) as uow:
        later = dt.datetime.now(dt.UTC) + GRACE * 5
        assert uuid.UUID(topic_id) not in closed_topics_awaiting_summary(
            uow=uow, closed_before=later
        )


def test_a_reconcile_job_the_broker_refused_is_asked_for_again_by_the_next_run(
    client: FlaskClient, auth: dict[str, str], queue: LosingQueue, reconcile: Any, org: str
) -> None:
    session = new_session(client, auth)
    post_message(client, auth, session["id"], "We agreed to ship on Friday.")
    client.post(f"/agents-api/sessions/{session['id']}/topics", json={}, headers=auth)
    topic_id = session["activeTopicId"]

    _, jobs = reconcile(queue=RefusingQueue())  # still down while reconciling
    assert jobs == []
    _, jobs = reconcile()  # the next run: not held back by a claim for a job never sent
    assert jobs_for(jobs, topic_id) == [
        Job(SUMMARIZE_TOPIC, {"topic_id": topic_id, "trigger": "reconcile"}, org=org)
    ]


def test_nothing_lost_means_nothing_enqueued(
    client: FlaskClient, auth: dict[str, str], reconcile: Any,
    session_factory: sessionmaker[Session], redis_client: redis.Redis,
) -> None:  # fmt: skip
    """Topics whose jobs ran: closed and summarized, active under the heartbeat."""
    session = new_session(client, auth)
    for i in range(5):
        post_message(client, auth, session["id"], f"Shipping plan, point {i}.")
    client.post(f"/agents-api/sessions/{session['id']}/topics", json={}, headers=auth)
    closed = session["activeTopicId"]
    summarize_topic(
        new_uow=new_uow(session_factory), llm=LocalProvider(), topic_id=uuid.UUID(closed),
        trigger="topic_closed",
    )  # fmt: skip
    for i in range(INTERVAL - 1):  # one short of a heartbeat
        post_message(client, auth, session["id"], f"Next subject, point {i}.")
    client.get(MEMORY, headers=auth)
    scope = scope_of(session_factory, session["id"])
    generation = MemoryCache(redis_client).generation(scope)
    _, jobs = reconcile()
    active: Any = client.get(f"/agents-api/sessions/{session['id']}", headers=auth).json
    assert jobs_for(jobs, closed) == jobs_for(jobs, active["activeTopicId"]) == []
    assert MemoryCache(redis_client).generation(scope) == generation


def close_one(client: FlaskClient, auth: dict[str, str]) -> str:
    """A closed topic whose summary job the broker lost: its id."""
    session = new_session(client, auth)
    post_message(client, auth, session["id"], "We agreed to ship on Friday.")
    client.post(f"/agents-api/sessions/{session['id']}/topics", json={}, headers=auth)
    topic_id: str = session["activeTopicId"]
    return topic_id


def test_a_job_waiting_behind_a_backlog_is_not_sent_again_however_long_it_waits_42b(
    client: FlaskClient, auth: dict[str, str], queue: LosingQueue, reconcile: Any,
) -> None:  # fmt: skip
    topic_id = close_one(client, auth)
    _, jobs = reconcile()
    assert len(jobs_for(jobs, topic_id)) == 1  # lost with the broker: in its org's list now
    for periods in (3, 10, 100):  # no worker gets to it: a backlog, not a loss
        _, jobs = reconcile(now=dt.datetime.now(dt.UTC) + periods * GRACE)
        assert jobs_for(jobs, topic_id) == []


def test_a_job_whose_worker_died_mid_run_is_sent_again_and_a_live_ones_is_not_42b(
    client: FlaskClient, auth: dict[str, str], queue: LosingQueue, reconcile: Any,
    redis_client: redis.Redis,
) -> None:  # fmt: skip
    fair = FairQueue(redis_client)
    topic_id = close_one(client, auth)
    reconcile()
    beats = Heartbeat(lambda: redis_client, ttl_s=30)
    runs = {}  # the reconcile run may have sent other tests' lost topics too
    while (turn := fair.take("live", runner=(run := beats.begin()), alive_ms=30_000)).job:
        runs[turn.job.kwargs["topic_id"]] = run
    _, jobs = reconcile()
    assert jobs_for(jobs, topic_id) == []  # running, its run beats
    redis_client.delete(alive_key(runs[topic_id]))  # kill -9: nobody beats for it any more
    _, jobs = reconcile()
    assert [job.kwargs["trigger"] for job in jobs_for(jobs, topic_id)] == ["reconcile"]


def test_a_candidate_whose_job_finished_between_the_two_reads_is_not_sent_42b(
    redis_client: redis.Redis,
) -> None:
    """The database says undone, then the job commits and drops its mark before the
    marks are read: the second read sees it done."""
    topic_id = uuid.uuid4()
    reads: list[Any] = []

    def find(*, limit: int, among: Any = None) -> list[uuid.UUID]:
        reads.append(among)
        return [topic_id] if among is None else []  # done by the second read

    assert lost(find, held=HeldJobs(redis_client), task=SUMMARIZE_TOPIC, limit=10) == []
    assert reads == [None, [topic_id]]


# --- 2. forks whose prior topic has no summary ----------------------------------------


def test_a_fork_whose_prior_topic_has_no_summary_gets_one(
    client: FlaskClient, auth: dict[str, str], reconcile: Any,
    session_factory: sessionmaker[Session], org: str,
) -> None:  # fmt: skip
    """The fork closes its prior topic; the summary job of a closed topic is kind 1."""
    session = new_session(client, auth)
    ids = [post_message(client, auth, session["id"], f"Message {i}.")["id"] for i in range(8)]
    prior_id = uuid.UUID(session["activeTopicId"])
    with UnitOfWork(session_factory, RecordingQueue()) as uow:
        # A fork stored without the summary of its prior (its write was lost).
        forked = fork_topic(uow=uow, topic_id=prior_id, first_message_id=ids[4], new_title="New")
        assert forked is not None
        record_fork(uow=uow, forked=forked, first_message_id=ids[4])
        new_id = forked.new.id
        uow.commit()

    _, jobs = reconcile()
    assert jobs_for(jobs, prior_id) == [
        Job(SUMMARIZE_TOPIC, {"topic_id": str(prior_id), "trigger": "reconcile"}, org=org)
    ]
    assert jobs_for(jobs, new_id) == []  # the fork's new topic: 4 messages, no heartbeat
    summarize_topic(
        new_uow=new_uow(session_factory), llm=LocalProvider(), topic_id=prior_id,
        trigger="reconcile",
    )  # fmt: skip
    with UnitOfWork(session_factory, RecordingQueue()) as uow:
        prior = uow.session.get(Topic, prior_id)
        assert prior is not None and prior.summarized_through_id == ids[3]
        later = dt.datetime.now(dt.UTC) + GRACE * 5
        assert prior_id not in closed_topics_awaiting_summary(uow=uow, closed_before=later)


# --- 4. evaluations promised by a heartbeat that never ran ------------------------------


def test_a_lost_heartbeat_evaluation_is_enqueued_once_when_the_session_goes_quiet(
    client: FlaskClient, auth: dict[str, str], queue: LosingQueue, reconcile: Any,
    session_factory: sessionmaker[Session], connection: Connection, org: str,
) -> None:  # fmt: skip
    session = new_session(client, auth)
    topic_id = session["activeTopicId"]
    subjects = ["the billing database", "PostgreSQL for invoices", "Alembic migrations"]
    for i in range(INTERVAL):
        post_message(client, auth, session["id"], f"About {subjects[i % 3]}, step {i}.")
    assert [j.kwargs["trigger"] for j in jobs_for(queue.lost, topic_id)] == ["heartbeat"]

    # The conversation is still going (newest message within the grace): not yet.
    _, jobs = reconcile(now=dt.datetime.now(dt.UTC))
    assert jobs_for(jobs, topic_id) == []
    _, jobs = reconcile()
    assert jobs_for(jobs, topic_id) == [
        Job(EVALUATE_TOPIC, {"topic_id": topic_id, "trigger": "reconcile"}, org=org)
    ]
    _, jobs = reconcile()
    assert jobs_for(jobs, topic_id) == []  # held: its job waits in its org's list

    def evaluate() -> str:
        return evaluate_topic(
            new_uow=new_uow(session_factory), llm=LocalProvider(), topic_id=uuid.UUID(topic_id),
            trigger="reconcile", scan_back=INTERVAL,
        ).outcome  # fmt: skip

    def topics_and_summaries() -> tuple[int, int]:
        row = connection.execute(
            text("SELECT count(*), count(summarized_at) FROM topics WHERE session_id = :s"),
            {"s": session["id"]},
        ).one()
        return row[0], row[1]

    assert evaluate() in ("fork", "refresh", "fallback")
    after_first = topics_and_summaries()
    # A duplicate (the heartbeat's own job, redelivered late) forks nothing, writes nothing.
    assert evaluate() == "skipped"
    assert topics_and_summaries() == after_first
    with UnitOfWork(session_factory, RecordingQueue()) as uow:
        quiet = dt.datetime.now(dt.UTC) + GRACE * 5
        found = heartbeats_never_evaluated(uow=uow, quiet_since=quiet, interval=INTERVAL)
    assert uuid.UUID(topic_id) not in found


def test_fewer_messages_than_a_heartbeat_beyond_the_watermark_enqueue_nothing(
    client: FlaskClient, auth: dict[str, str], reconcile: Any
) -> None:
    session = new_session(client, auth)
    for i in range(INTERVAL - 1):
        post_message(client, auth, session["id"], f"Message {i}.")
    _, jobs = reconcile()
    assert jobs_for(jobs, session["activeTopicId"]) == []


# --- 3. cache generations out of date ---------------------------------------------------


def scope_of(session_factory: sessionmaker[Session], session_id: str) -> Scope:
    with UnitOfWork(session_factory, RecordingQueue()) as uow:
        row = uow.session.get(ChatSession, uuid.UUID(session_id))
        assert row is not None
        return Scope(org_id=row.org_id, agent_id=row.agent_id, user_id=row.user_id)


def memory_version(connection: Connection, scope: Scope) -> int:
    return int(
        connection.execute(
            text(
                "SELECT version FROM memory_versions"
                " WHERE org_id = :o AND agent_id = :a AND user_id = :u"
            ),
            {"o": scope.org_id, "a": scope.agent_id, "u": scope.user_id},
        ).scalar_one()
    )


def test_r15_a_cached_memory_block_whose_invalidation_was_lost_is_dropped(
    client: FlaskClient, auth: dict[str, str], queue: LosingQueue, reconcile: Any,
    connection: Connection, session_factory: sessionmaker[Session], redis_client: redis.Redis,
) -> None:  # fmt: skip
    session = new_session(client, auth)
    post_message(client, auth, session["id"], "We decided on PostgreSQL.")
    topic_id, scope = session["activeTopicId"], scope_of(session_factory, session["id"])
    cache = MemoryCache(redis_client)
    assert client.get(MEMORY, headers=auth).json["entries"] == []  # type: ignore[index]
    client.put(f"/agents-api/topics/{topic_id}/memory", json={"state": "promoted"}, headers=auth)
    assert [j.task for j in queue.lost] == [INVALIDATE_MEMORY]
    assert memory_version(connection, scope) == 1  # written with the change, job or not
    # The lost invalidation: the cache still serves the block from before the promotion.
    assert client.get(MEMORY, headers=auth).json["entries"] == []  # type: ignore[index]

    generation = cache.generation(scope)
    reconciled, _ = reconcile()
    assert reconciled.memory_caches >= 1
    assert cache.generation(scope) != generation
    entries: Any = client.get(MEMORY, headers=auth).json["entries"]  # type: ignore[index]
    assert [e["topicId"] for e in entries] == [topic_id]
    # The rebuilt block carries the current version: nothing stale any more.
    generation = cache.generation(scope)
    reconcile()
    assert cache.generation(scope) == generation


def test_r15_a_summary_that_renames_a_promoted_topic_changes_the_memory_version(
    client: FlaskClient, auth: dict[str, str], queue: LosingQueue,
    session_factory: sessionmaker[Session], connection: Connection,
) -> None:  # fmt: skip
    session = new_session(client, auth)
    post_message(client, auth, session["id"], "We decided on PostgreSQL for billing.")
    topic_id, scope = session["activeTopicId"], scope_of(session_factory, session["id"])
    client.put(f"/agents-api/topics/{topic_id}/memory", json={"state": "promoted"}, headers=auth)
    lost_before = len(queue.lost)
    summarize_topic(
        new_uow=lambda: UnitOfWork(session_factory, queue), llm=LocalProvider(),
        topic_id=uuid.UUID(topic_id), trigger="manual",
    )  # fmt: skip
    # The title changed while the topic stays promoted (one message is below R12's
    # floor, so the user's promotion stands): the block changed with it.
    assert memory_version(connection, scope) == 2
    assert [j.task for j in queue.lost[lost_before:]] == [INVALIDATE_MEMORY]


def test_a_memory_change_whose_invalidation_ran_is_left_alone(
    client: FlaskClient, auth: dict[str, str], reconcile: Any, redis_client: redis.Redis,
    session_factory: sessionmaker[Session],
) -> None:  # fmt: skip
    session = new_session(client, auth)
    topic_id, scope = session["activeTopicId"], scope_of(session_factory, session["id"])
    cache = MemoryCache(redis_client)
    client.get(MEMORY, headers=auth)
    client.put(f"/agents-api/topics/{topic_id}/memory", json={"state": "promoted"}, headers=auth)
    cache.invalidate(scope)  # the job did run
    client.get(MEMORY, headers=auth)  # and a reader refilled the cache
    generation = cache.generation(scope)
    reconcile()
    assert cache.generation(scope) == generation
    assert cache.get(scope) is not None
