"""The pump (shared/reevaluations/pump.py) on a controlled clock: a campaign's topics are
enqueued at its rate from its cursor, each job's end settles its item once, the last one
finishes the campaign and records `reevaluation.finished` in that transaction, and a job
that never comes back is sent again once, then counted failed."""

from __future__ import annotations

import datetime as dt
import json
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from flask.testing import FlaskClient
from sqlalchemy import text
from sqlalchemy.orm import Session, sessionmaker

from shared.infra.db.uow import UnitOfWork
from shared.infra.queue import DELIVER_WEBHOOK, EVALUATE_TOPIC, SUMMARIZE_TOPIC, RecordingQueue
from shared.llm.prompts import SUMMARY_PROMPT_VERSION
from shared.reevaluations.pump import ITEM_TIMEOUT, Tick, advance_campaign, settle_item
from shared.reevaluations.selection import Maker, Selection, count_topics
from shared.reevaluations.service import start_stale_campaign
from tests.integration.reevaluations.world import campaign, start, summarized_by, topics_of

SECRET = "plain:whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

Ticker = Callable[[float], Tick]


def ticker(
    client: FlaskClient,
    auth: dict[str, str],
    factory: sessionmaker[Session],
    queue: RecordingQueue,
    campaign_id: str,
) -> Ticker:
    """A tick of the campaign `seconds` after it started, committed (its jobs then sent)."""
    created = dt.datetime.fromisoformat(campaign(client, auth, campaign_id)["createdAt"])

    def tick(seconds: float) -> Tick:
        with UnitOfWork(factory, queue) as uow:
            at = created + dt.timedelta(seconds=seconds)
            done = advance_campaign(uow=uow, campaign_id=uuid.UUID(campaign_id), now=at)
            uow.commit()
        return done

    return tick


def settle(
    factory: sessionmaker[Session], campaign_id: str, topic_id: str, *, failed: bool = False
) -> bool:
    with UnitOfWork(factory, RecordingQueue()) as uow:
        moved = settle_item(
            uow=uow, campaign_id=uuid.UUID(campaign_id), topic_id=uuid.UUID(topic_id),
            failed=failed,
        )  # fmt: skip
        uow.commit()
    return moved


def jobs_of(queue: RecordingQueue, campaign_id: str) -> list[tuple[str, str]]:
    """(task, topic id) of every job sent for the campaign, in order."""
    return [
        (job.task, job.kwargs["topic_id"])
        for job in queue.sent
        if job.kwargs.get("campaign_id") == campaign_id
    ]


def test_the_rate_limits_what_each_tick_enqueues_in_topic_order(
    client: FlaskClient,
    auth: dict[str, str],
    session_factory: sessionmaker[Session],
    queue: RecordingQueue,
) -> None:
    ids = topics_of(client, auth, closed=4)  # four closed, one active
    started = start(client, auth, {"rate": 2})
    tick = ticker(client, auth, session_factory, queue, started["id"])

    assert tick(1).enqueued == 2  # 2 a second, one second in
    assert tick(1).enqueued == 0  # the same moment again owes nothing
    assert tick(1.4).enqueued == 0  # 0.8 of a topic owed: it waits
    assert tick(2.5).enqueued == 3  # 1.5 s more at 2 a second
    assert tick(3.5).enqueued == 0  # none left: every topic is enqueued
    assert campaign(client, auth, started["id"])["enqueued"] == 5

    jobs = jobs_of(queue, started["id"])
    assert [topic for _, topic in jobs] == sorted(ids)  # id order, each once
    tasks = dict((topic, task) for task, topic in jobs)
    assert tasks[ids[-1]] == EVALUATE_TOPIC  # the active topic is evaluated...
    assert {tasks[t] for t in ids[:-1]} == {SUMMARIZE_TOPIC}  # ...closed ones re-summarized
    campaign_jobs = [job for job in queue.sent if job.kwargs.get("campaign_id") == started["id"]]
    assert {job.kwargs["trigger"] for job in campaign_jobs} == {"reevaluate"}


def test_a_pause_is_made_up_by_a_burst_at_most(
    client: FlaskClient,
    auth: dict[str, str],
    session_factory: sessionmaker[Session],
    queue: RecordingQueue,
) -> None:
    topics_of(client, auth, closed=30, active=False)
    started = start(client, auth, {"rate": 3})
    tick = ticker(client, auth, session_factory, queue, started["id"])

    assert tick(3600).enqueued == 7  # not 10,800: two seconds' worth, and one saved up
    assert tick(3601).enqueued == 3


def test_topics_created_after_the_start_are_not_in_the_campaign(
    client: FlaskClient,
    auth: dict[str, str],
    session_factory: sessionmaker[Session],
    queue: RecordingQueue,
) -> None:
    before = topics_of(client, auth, closed=2, active=False)
    started = start(client, auth, {"rate": 100})
    topics_of(client, auth, closed=2)  # after the start

    ticker(client, auth, session_factory, queue, started["id"])(10)

    assert sorted(topic for _, topic in jobs_of(queue, started["id"])) == sorted(before)
    assert campaign(client, auth, started["id"])["total"] == 2


def test_settling_a_topic_twice_counts_it_once(
    client: FlaskClient,
    auth: dict[str, str],
    session_factory: sessionmaker[Session],
    queue: RecordingQueue,
) -> None:
    first, second = topics_of(client, auth, closed=2, active=False)
    started = start(client, auth, {"rate": 100})
    ticker(client, auth, session_factory, queue, started["id"])(1)

    assert settle(session_factory, started["id"], first) is True
    assert settle(session_factory, started["id"], first) is False  # the job ran twice
    assert settle(session_factory, started["id"], first, failed=True) is False
    assert settle(session_factory, started["id"], str(uuid.uuid4())) is False  # not its topic

    shown = campaign(client, auth, started["id"])
    assert (shown["state"], shown["done"], shown["failed"]) == ("running", 1, 0)
    settle(session_factory, started["id"], second, failed=True)
    shown = campaign(client, auth, started["id"])
    assert (shown["state"], shown["done"], shown["failed"]) == ("finished", 1, 1)
    assert shown["finishedAt"] is not None


def _subscribe(factory: sessionmaker[Session], org_id: str, events: list[str]) -> str:
    webhook_id = str(uuid.uuid4())
    with UnitOfWork(factory, RecordingQueue()) as uow:
        uow.session.execute(
            text(
                "INSERT INTO webhooks (id, org_id, url, events, sealed_secret)"
                " VALUES (:id, :org, 'https://hooks.example.com/x', :events, :secret)"
            ),
            {"id": webhook_id, "org": org_id, "events": events, "secret": SECRET},
        )
        uow.commit()
    return webhook_id


def _org_of(client: FlaskClient, auth: dict[str, str]) -> str:
    session: Any = client.post(
        "/agents-api/sessions", json={"agentId": "probe", "userId": "probe"}, headers=auth
    ).json
    return str(session["orgId"])


def test_the_last_settle_finishes_and_records_reevaluation_finished_in_its_transaction(
    client: FlaskClient,
    auth: dict[str, str],
    session_factory: sessionmaker[Session],
    queue: RecordingQueue,
) -> None:
    first, second = topics_of(client, auth, closed=2, active=False)
    webhook_id = _subscribe(session_factory, _org_of(client, auth), ["reevaluation.finished"])
    started = start(client, auth, {"rate": 100})
    tick = ticker(client, auth, session_factory, queue, started["id"])
    tick(1)
    tick(2)  # finds no topic left after the cursor
    settle(session_factory, started["id"], first)

    finishing = UnitOfWork(session_factory, queue)
    with finishing as uow:
        settle_item(
            uow=uow, campaign_id=uuid.UUID(started["id"]), topic_id=uuid.UUID(second),
            failed=True,
        )  # fmt: skip
        # In the transaction that finished it, before the commit: the event and its delivery.
        recorded = uow.session.execute(
            text(
                "SELECT e.type, e.body, d.webhook_id, d.status FROM webhook_events e"
                " JOIN webhook_deliveries d ON d.event_id = e.id"
                " WHERE e.body::jsonb -> 'data' ->> 'reevaluationId' = :id"
            ),
            {"id": started["id"]},
        ).all()
        uow.commit()

    [(kind, body, delivered_to, status)] = recorded
    assert (kind, str(delivered_to), status) == ("reevaluation.finished", webhook_id, "pending")
    assert json.loads(body)["data"] == {
        "reevaluationId": started["id"],
        "state": "finished",
        "total": 2,
        "done": 1,
        "failed": 1,
    }
    assert [job.task for job in finishing.sent] == [DELIVER_WEBHOOK]  # after the commit
    assert campaign(client, auth, started["id"])["state"] == "finished"


def test_an_org_without_a_subscription_records_no_event(
    client: FlaskClient,
    auth: dict[str, str],
    session_factory: sessionmaker[Session],
    queue: RecordingQueue,
) -> None:
    finished = start(client, auth, {"agentId": "nobody"})  # finished at once
    _subscribe(session_factory, _org_of(client, auth), ["facts.changed"])  # not this type

    with UnitOfWork(session_factory, queue) as uow:
        events = uow.session.execute(
            text("SELECT count(*) FROM webhook_events WHERE body LIKE :id"),
            {"id": f"%{finished['id']}%"},
        ).scalar()
    assert (finished["state"], events) == ("finished", 0)


def test_a_job_that_never_comes_back_is_sent_again_once_then_counted_failed(
    client: FlaskClient,
    auth: dict[str, str],
    session_factory: sessionmaker[Session],
    queue: RecordingQueue,
) -> None:
    first, second = topics_of(client, auth, closed=2, active=False)
    started = start(client, auth, {"rate": 100})
    tick = ticker(client, auth, session_factory, queue, started["id"])
    tick(1)
    settle(session_factory, started["id"], first)
    timeout = ITEM_TIMEOUT.total_seconds()

    assert tick(timeout).resent == 0  # not overdue yet
    assert tick(timeout + 2) == Tick(resent=1)  # the lost job of `second`, once more
    assert jobs_of(queue, started["id"])[-1] == (SUMMARIZE_TOPIC, second)
    assert tick(2 * timeout + 1) == Tick()  # its second job is not overdue yet
    assert tick(2 * timeout + 3) == Tick(given_up=1, finished=1)

    shown = campaign(client, auth, started["id"])
    assert (shown["state"], shown["done"], shown["failed"]) == ("finished", 1, 1)
    assert settle(session_factory, started["id"], second) is False  # a late job: counted


@pytest.mark.parametrize(
    ("version", "model", "stale"),
    [
        ("summary-v0", "current-model", True),  # an older prompt
        (SUMMARY_PROMPT_VERSION, "old-model", True),  # another model
        ("summary-v0", None, True),
        (SUMMARY_PROMPT_VERSION, "current-model", False),
        (SUMMARY_PROMPT_VERSION, None, False),  # made before models were recorded
        (None, None, False),  # never summarized: nothing to redo
    ],
)
def test_the_stale_selection_is_topics_of_an_older_prompt_or_another_model(
    client: FlaskClient,
    auth: dict[str, str],
    session_factory: sessionmaker[Session],
    version: str | None,
    model: str | None,
    stale: bool,
) -> None:
    current, other = topics_of(client, auth, closed=2, active=False)
    summarized_by(
        session_factory, current, prompt_version=SUMMARY_PROMPT_VERSION, model="current-model"
    )
    summarized_by(session_factory, other, prompt_version=version, model=model)
    org_id = uuid.UUID(_org_of(client, auth))
    selection = Selection(org_id=org_id, stale_for=Maker(SUMMARY_PROMPT_VERSION, "current-model"))

    with UnitOfWork(session_factory, RecordingQueue()) as uow:
        assert count_topics(uow=uow, selection=selection) == int(stale)


def test_a_scheduled_campaign_is_not_started_while_the_previous_one_runs(
    client: FlaskClient, auth: dict[str, str], session_factory: sessionmaker[Session]
) -> None:
    [stale] = topics_of(client, auth, closed=1, active=False)
    summarized_by(session_factory, stale, prompt_version="summary-v0", model="current-model")
    with UnitOfWork(session_factory, RecordingQueue()) as uow:
        first = start_stale_campaign(uow=uow, model="current-model")
        uow.commit()
    assert first is not None
    assert (first.origin, first.org_id, first.stale_only, first.state) == (
        "cron", None, True, "running",
    )  # fmt: skip
    assert first.total >= 1  # every org's stale topics: this one among them

    with UnitOfWork(session_factory, RecordingQueue()) as uow:
        assert start_stale_campaign(uow=uow, model="current-model") is None
