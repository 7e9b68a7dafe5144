"""Heartbeat (R26), the debounce (R27), the hasEvaluated guard (R28), fire-and-forget (R29)."""

from __future__ import annotations

import datetime as dt
import threading
import time
import uuid
from typing import Any

import pytest
import redis
from flask.testing import FlaskClient
from sqlalchemy import Connection, text
from sqlalchemy.orm import Session, sessionmaker

from shared.evaluations.requests import idle_topics
from shared.infra.config import Settings
from shared.infra.db.uow import UnitOfWork
from shared.infra.queue import EVALUATE_TOPIC, FIRE_DEBOUNCE, Job, RecordingQueue
from shared.triggers.debounce import Debouncer, _keys
from tests.helpers import new_session, post_message


@pytest.fixture
def debouncer(redis_client: redis.Redis) -> Debouncer:
    return Debouncer(redis_client, debounce_ms=300, max_wait_ms=1000)


def test_r26_every_tenth_user_or_assistant_message_enqueues_an_evaluation(
    client: FlaskClient, auth: dict[str, str], queue: RecordingQueue
) -> None:
    session = new_session(client, auth)
    flagged = []
    for i in range(1, 26):
        posted = post_message(
            client, auth, session["id"], f"m{i}", role="user" if i % 2 else "assistant"
        )
        flagged.append(posted["driftEvaluationEnqueued"])
        if i % 4 == 0:  # tool messages do not count toward the heartbeat
            response = client.post(
                f"/agents-api/sessions/{session['id']}/messages",
                json={"role": "tool", "content": "{}", "toolName": "t", "toolCallId": f"c{i}"},
                headers=auth,
            )
            assert response.json["driftEvaluationEnqueued"] is False  # type: ignore[index]
    assert [i + 1 for i, flag in enumerate(flagged) if flag] == [10, 20]
    evaluations = [job for job in queue.sent if job.task == EVALUATE_TOPIC]
    assert [job.kwargs for job in evaluations] == [
        {"topic_id": session["activeTopicId"], "trigger": "heartbeat"}
    ] * 2


def test_r27_a_burst_coalesces_and_fires_once_after_the_last_trigger(
    debouncer: Debouncer,
) -> None:
    topic = uuid.uuid4()
    first = debouncer.trigger(topic, last_message_id=1)
    assert first.status == "scheduled" and first.delay_ms == 300
    time.sleep(0.2)
    again = debouncer.trigger(topic, last_message_id=1)
    assert (again.status, again.token) == ("coalesced", first.token)
    early = debouncer.fire(topic, first.token)  # the job scheduled by the first trigger
    assert early.status == "wait" and 150 < early.remaining_ms <= 300  # moved by the last
    time.sleep(early.remaining_ms / 1000 + 0.02)
    assert debouncer.fire(topic, first.token).status == "fire"
    assert debouncer.fire(topic, first.token).status == "stale"  # fired once only
    assert debouncer.trigger(topic, last_message_id=1).status == "scheduled"  # a new burst


def test_r27_two_workers_holding_the_same_burst_fire_once(debouncer: Debouncer) -> None:
    topic = uuid.uuid4()
    token = debouncer.trigger(topic, last_message_id=None).token
    time.sleep(0.35)
    results: list[str] = []
    barrier = threading.Barrier(8)

    def fire() -> None:
        barrier.wait()
        results.append(debouncer.fire(topic, token).status)

    threads = [threading.Thread(target=fire) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(results) == ["fire"] + ["stale"] * 7


def test_r27_an_endless_stream_of_triggers_still_fires_by_the_maximum_wait(
    debouncer: Debouncer,
) -> None:
    topic = uuid.uuid4()
    token = debouncer.trigger(topic, last_message_id=1).token
    started = time.monotonic()
    while debouncer.fire(topic, token).status != "fire":
        debouncer.trigger(topic, last_message_id=1)  # every 100 ms, forever
        time.sleep(0.1)
        assert time.monotonic() - started < 2.0
    assert time.monotonic() - started >= 0.9  # max_wait_ms = 1000


def test_r27_debounce_keys_expire_and_share_a_cluster_hash_tag(
    debouncer: Debouncer, redis_client: redis.Redis
) -> None:
    topic = uuid.uuid4()
    debouncer.trigger(topic, last_message_id=3)
    debouncer.mark_evaluated(topic, last_message_id=3)
    state, guard = _keys(topic)
    assert 0 < redis_client.pttl(state) <= 1000 + 60_000
    assert redis_client.ttl(guard) > 0
    assert f"{{{topic}}}" in state and f"{{{topic}}}" in guard


def test_r28_after_an_evaluation_triggers_are_suppressed_until_a_new_message(
    debouncer: Debouncer,
) -> None:
    topic = uuid.uuid4()
    debouncer.mark_evaluated(topic, last_message_id=41)
    assert debouncer.trigger(topic, last_message_id=41).status == "suppressed"
    assert debouncer.trigger(topic, last_message_id=41).status == "suppressed"
    assert debouncer.trigger(topic, last_message_id=42).status == "scheduled"  # re-armed
    assert debouncer.trigger(uuid.uuid4(), last_message_id=41).status == "scheduled"


def evaluate(client: FlaskClient, auth: dict[str, str], sid: str, trigger: str) -> Any:
    response = client.post(
        f"/agents-api/sessions/{sid}/evaluate", json={"trigger": trigger}, headers=auth
    )
    assert response.status_code == 202, response.json
    return response.json["status"]  # type: ignore[index]


def test_r29_the_endpoint_answers_202_scheduled_then_coalesced(
    client: FlaskClient, auth: dict[str, str], queue: RecordingQueue
) -> None:
    session = new_session(client, auth)
    post_message(client, auth, session["id"], "hello")
    statuses = [
        evaluate(client, auth, session["id"], t) for t in ("visibility", "disconnect", "navigation")
    ]
    assert statuses == ["scheduled", "coalesced", "coalesced"]
    [job] = queue.sent
    assert job.task == FIRE_DEBOUNCE and job.countdown == 2.0
    assert job.kwargs["topic_id"] == session["activeTopicId"]
    assert job.kwargs["trigger"] == "visibility"


def test_r29_redis_down_is_dropped_not_an_error(
    settings: Settings, session_factory: sessionmaker[Session], auth: dict[str, str]
) -> None:
    from web.app import create_app

    down = settings.model_copy(update={"redis_url": "redis://127.0.0.1:1/0"})
    client = create_app(down, queue=RecordingQueue(), session_factory=session_factory).test_client()
    session = new_session(client, auth)
    assert evaluate(client, auth, session["id"], "navigation") == "dropped"


def test_r29_broker_down_is_dropped_and_the_next_trigger_schedules_again(
    settings: Settings, session_factory: sessionmaker[Session], auth: dict[str, str]
) -> None:
    from web.app import create_app

    class DownBroker:
        def __init__(self) -> None:
            self.down = True
            self.sent: list[Job] = []

        def send(self, job: Job) -> None:
            if self.down:
                raise ConnectionError("broker unreachable")
            self.sent.append(job)

    broker = DownBroker()
    client = create_app(settings, queue=broker, session_factory=session_factory).test_client()
    session = new_session(client, auth)
    assert evaluate(client, auth, session["id"], "visibility") == "dropped"
    broker.down = False
    assert evaluate(client, auth, session["id"], "visibility") == "scheduled"
    assert len(broker.sent) == 1


def test_r29_unknown_sessions_and_triggers_are_still_client_errors(
    client: FlaskClient, auth: dict[str, str], other_auth: dict[str, str]
) -> None:
    session = new_session(client, auth)
    url = f"/agents-api/sessions/{session['id']}/evaluate"
    assert client.post(url, json={"trigger": "visibility"}, headers=other_auth).status_code == 404
    response = client.post(url, json={"trigger": "reload"}, headers=auth)
    assert response.status_code == 422 and "trigger" in response.json["error"]["message"]  # type: ignore[index]


def test_the_sweep_finds_idle_topics_with_unsummarized_messages(
    client: FlaskClient, auth: dict[str, str], uow: UnitOfWork, connection: Connection
) -> None:
    idle, busy, quiet = (new_session(client, auth, user=u) for u in ("idle", "busy", "quiet"))
    post_message(client, auth, idle["id"], "then the user walked away")
    post_message(client, auth, busy["id"], "still typing")
    connection.execute(
        text(
            "UPDATE sessions SET last_activity_at = now() - interval '1 hour' WHERE id IN (:a, :b)"
        ),
        {"a": idle["id"], "b": quiet["id"]},
    )
    with uow:
        found = [str(t) for t, _, _ in idle_topics(uow=uow, idle=dt.timedelta(minutes=15))]
    assert idle["activeTopicId"] in found
    assert busy["activeTopicId"] not in found  # active recently
    assert quiet["activeTopicId"] not in found  # idle, but nothing to summarize
