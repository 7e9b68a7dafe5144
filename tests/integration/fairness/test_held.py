"""[4.2b] Where a model job is held (shared/infra/held.py), on the real Redis: in its org's
list however long it waits, popped while its worker's heartbeat lives, in the broker
until its countdown (and a margin) has passed. What nothing holds is what the reconciler
may send again."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from shared.infra import held as held_module
from shared.infra.fair import FairJob, FairQueue, subject_of
from shared.infra.held import HeldJobs, forget_held
from shared.infra.liveness import Heartbeat, alive_key, heartbeat_ttl_s
from shared.infra.queue import EVALUATE_TOPIC, SUMMARIZE_TOPIC, CeleryJobQueue, Job
from tests.helpers import RecordingSender, wait_for


@pytest.fixture
def client(fair: FairQueue) -> Iterator[redis.Redis]:
    """The suite's Redis, its orgs' lists emptied by `fair`; the marks of the test's own
    subjects are its own (fresh topic ids)."""
    yield fair.client


def summary_of(topic_id: uuid.UUID, org: str = "org-a") -> FairJob:
    return FairJob(SUMMARIZE_TOPIC, {"topic_id": str(topic_id), "trigger": "topic_closed"}, org)


def is_held(client: redis.Redis, topic_id: uuid.UUID, task: str = SUMMARIZE_TOPIC) -> bool:
    return HeldJobs(client).unheld(task, [topic_id]) == []


def heartbeat(client: redis.Redis, ttl_s: float = 30) -> Heartbeat:
    return Heartbeat(lambda: client, ttl_s=ttl_s)


def take(fair: FairQueue, beats: Heartbeat, lane: Any = "live") -> tuple[Any, str]:
    """A worker's pop: the job, and the run that holds it (beaten for by `beats`)."""
    run = beats.begin()
    return fair.take(lane, runner=run, alive_ms=beats.ttl_ms).job, run


def test_a_job_waiting_in_its_orgs_list_is_held_however_long_it_waits_42b(
    fair: FairQueue, client: redis.Redis
) -> None:
    topic_id = uuid.uuid4()
    assert not is_held(client, topic_id)
    fair.push("live", summary_of(topic_id))
    # Nothing in the mark expires: a backlog's job is not lost for having waited.
    assert is_held(client, topic_id) and client.ttl("driftless:{fair:live}:queued") == -1
    assert not is_held(client, topic_id, EVALUATE_TOPIC)  # each task a subject of its own


def test_a_popped_job_is_held_while_its_run_beats_and_lost_once_it_stops_42b(
    fair: FairQueue, client: redis.Redis
) -> None:
    topic_id = uuid.uuid4()
    sent = summary_of(topic_id)
    fair.push("live", sent)
    job, run = take(fair, heartbeat(client))
    assert job == sent
    assert is_held(client, topic_id)  # out of the list, running
    client.delete(alive_key(run))  # kill -9: the run's key lapses
    assert not is_held(client, topic_id)


def test_a_finished_job_is_held_no_longer_42b(fair: FairQueue, client: redis.Redis) -> None:
    topic_id = uuid.uuid4()
    fair.push("live", summary_of(topic_id))
    job, run = take(fair, heartbeat(client))
    fair.done("live", job, runner=run)
    assert not is_held(client, topic_id)
    assert client.exists(alive_key(run)) == 0


def test_a_run_that_ended_unheard_by_redis_stops_beating_and_its_job_is_lost_42b(
    fair: FairQueue, client: redis.Redis
) -> None:
    """Redis could not be told the job ended (a blip): its mark stays, but its process
    no longer beats for the run, so the mark counts only until the run's key lapses."""
    topic_id, beats = uuid.uuid4(), heartbeat(client, ttl_s=1)
    fair.push("live", summary_of(topic_id))
    _, run = take(fair, beats)
    assert is_held(client, topic_id)
    other = beats.begin()  # another run of the process goes on beating meanwhile
    client.set(alive_key(other), 1, px=beats.ttl_ms)
    beats.end(run)
    wait_for(lambda: not is_held(client, topic_id), timeout=10)
    assert client.exists(alive_key(other)) == 1  # beaten for, every third of a second


def test_two_jobs_of_one_subject_hold_it_until_both_left_the_list_42b(
    fair: FairQueue, client: redis.Redis
) -> None:
    topic_id = uuid.uuid4()
    fair.push("live", summary_of(topic_id))
    fair.push("bulk", summary_of(topic_id))
    fair.push("live", summary_of(topic_id))
    for lane in ("live", "bulk", "live"):
        assert is_held(client, topic_id)
        job = fair.take(lane, runner="gone").job  # a runner that never beat
        fair.done(lane, job, runner="gone")
    assert not is_held(client, topic_id)
    assert client.hlen("driftless:{fair:live}:queued") == 0  # no count left at zero


def test_a_job_its_quota_turned_away_is_held_in_its_list_again_42b(
    fair: FairQueue, client: redis.Redis
) -> None:
    topic_id = uuid.uuid4()
    fair.push("live", summary_of(topic_id))
    job = fair.take("live", runner="gone").job
    assert job is not None
    fair.yield_turn("live", job, hold_s=60, fleet=False, runner="gone")
    assert is_held(client, topic_id)
    assert client.get(f"driftless:{{fair:live}}:running:{job.subject}") is None


def test_a_retry_sent_with_a_countdown_is_held_until_it_should_have_started_42b(
    fair: FairQueue, client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(held_module, "BROKER_MARGIN_S", 0.0)
    topic_id, sender = uuid.uuid4(), RecordingSender()
    CeleryJobQueue(sender, fair).send(
        Job(SUMMARIZE_TOPIC, {"topic_id": str(topic_id)}, countdown=0.5, org="org-a")
    )
    assert [name for name, *_ in sender.sent] == [SUMMARIZE_TOPIC]  # straight to the broker
    assert is_held(client, topic_id)
    time.sleep(0.7)  # its countdown passed and it never started: lost with the broker
    assert not is_held(client, topic_id)


def test_a_job_from_the_broker_is_held_while_it_runs_and_while_celery_retries_it_42b(
    client: redis.Redis,
) -> None:
    held, beats = HeldJobs(client), heartbeat(client)
    ran, retried, timed_out = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()

    def running(topic_id: uuid.UUID) -> Any:
        return held.running(
            subject_of(SUMMARIZE_TOPIC, {"topic_id": str(topic_id)}), beats,
            retried=lambda exc: isinstance(exc, ConnectionError),
        )  # fmt: skip

    with running(ran):
        assert is_held(client, ran)
    assert not is_held(client, ran)
    with pytest.raises(ConnectionError), running(retried):
        raise ConnectionError("the database went away: Celery retries it with backoff")
    assert is_held(client, retried)
    with pytest.raises(TimeoutError), running(timed_out):
        raise TimeoutError("the hard time limit: no retry comes")
    assert not is_held(client, timed_out)


def test_erasure_forgets_every_mark_of_a_topic_42b(fair: FairQueue, client: redis.Redis) -> None:
    waiting, running, delayed = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    fair.push("live", summary_of(running))
    take(fair, heartbeat(client))
    fair.push("live", summary_of(waiting))
    HeldJobs(client).sent_delayed(subject_of(EVALUATE_TOPIC, {"topic_id": str(delayed)}), 60)
    assert forget_held(client, [SUMMARIZE_TOPIC, EVALUATE_TOPIC], [waiting, running, delayed]) == 3
    assert not any(is_held(client, t, task) for t in (waiting, running, delayed)
                   for task in (SUMMARIZE_TOPIC, EVALUATE_TOPIC))  # fmt: skip


def test_without_redis_every_candidate_counts_as_lost_42b() -> None:
    down = redis.Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.2)
    topics = [uuid.uuid4(), uuid.uuid4()]
    assert HeldJobs(down).unheld(SUMMARIZE_TOPIC, topics) == topics


def test_a_heartbeat_lives_at_most_a_reconcile_period_42b(client: redis.Redis) -> None:
    # A killed worker's jobs come back within two periods: one for its heartbeat to lapse.
    assert heartbeat_ttl_s(2) == 2 and heartbeat_ttl_s(60) == 30 and heartbeat_ttl_s(0) == 1
    beats = heartbeat(client, ttl_s=2)
    key = alive_key(beats.begin())
    client.set(key, 1, px=beats.ttl_ms)  # as the pop sets it
    assert 0 < client.pttl(key) <= 2000
    wait_for(lambda: client.pttl(key) < 1500, timeout=5)
    wait_for(lambda: client.pttl(key) > 1500, timeout=5)  # beaten again: it lives on
