"""Campaigns run by real Celery workers (threads, the real broker) with beat's ticks sent
as beat sends them: a campaign finishes with every topic settled, the LLM asked only for
stale summaries; it outlives the worker that started it; beat's scheduled campaign covers
every org's stale topics; a job that fails for good settles as failed, once."""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any

from shared.infra.queue import START_STALE_REEVALUATION, SUMMARIZE_TOPIC, CeleryJobQueue, Job
from shared.llm.prompts import SUMMARY_PROMPT_VERSION
from shared.reevaluations.pump import advance_campaign
from tests.helpers import wait_for
from tests.integration.reevaluations.system import MODEL, System
from tests.integration.reevaluations.world import start, summarized_by, topics_of
from tests.llm_server import FakeOpenAI

CURRENT = (SUMMARY_PROMPT_VERSION, MODEL)


def stale_world(system: System, auth: dict[str, str]) -> list[str]:
    """Three closed topics summarized by the worker; then one of them as if by an older
    prompt, one as if by another model. Their newest topic is empty: never matched."""
    topics = topics_of(system.client, auth, closed=3, active=False)
    system.until_summarized(topics)
    summarized_by(system.factory, topics[0], prompt_version="summary-v0", model=MODEL)
    summarized_by(
        system.factory, topics[1], prompt_version=SUMMARY_PROMPT_VERSION, model="old-model"
    )
    return topics


def test_a_campaign_finishes_with_every_topic_done_and_asks_the_llm_only_for_stale_ones(
    system: System, fake_openai: FakeOpenAI
) -> None:
    auth = system.new_org()
    with system.worker():
        topics = stale_world(system, auth)
        fake_openai.calls = 0
        started = start(system.client, auth, {"rate": 1000})
        assert (started["state"], started["total"]) == ("running", 3)

        finished = system.until_finished(auth, started["id"])

    assert finished["state"] == "finished"
    assert (finished["total"], finished["enqueued"], finished["done"], finished["failed"]) == (
        3, 3, 3, 0,
    )  # fmt: skip
    assert finished["finishedAt"] is not None
    assert fake_openai.calls == 2  # the current summary cost nothing
    assert set(system.summaries(topics).values()) == {CURRENT}


def test_a_campaign_outlives_the_worker_that_ran_its_first_topics(system: System) -> None:
    auth = system.new_org()
    with system.worker():
        topics = stale_world(system, auth)
    started = start(system.client, auth, {"rate": 1})
    created = dt.datetime.fromisoformat(system.campaign(auth, started["id"])["createdAt"])
    campaign_id = uuid.UUID(started["id"])

    def tick(seconds: float) -> int:
        with system.unit_of_work() as uow:
            at = created + dt.timedelta(seconds=seconds)
            enqueued = advance_campaign(uow=uow, campaign_id=campaign_id, now=at).enqueued
            uow.commit()
        return enqueued

    with system.worker():
        assert tick(1) == 1
        wait_for(lambda: system.campaign(auth, started["id"])["done"] == 1, what="a first topic")
    # No worker: the next ticks' jobs wait on the broker, the campaign in PostgreSQL.
    assert tick(3) == 2
    assert tick(4) == 0  # nothing left after the cursor
    assert system.campaign(auth, started["id"])["state"] == "running"

    with system.worker():  # a new worker, as after a restart
        finished = system.until_finished(auth, started["id"])

    assert (finished["state"], finished["done"], finished["failed"]) == ("finished", 3, 0)
    assert set(system.summaries(topics).values()) == {CURRENT}


def test_beats_scheduled_campaign_covers_every_orgs_stale_topics_once_at_a_time(
    system: System, fake_openai: FakeOpenAI
) -> None:
    first, second = system.new_org(), system.new_org()
    beat = CeleryJobQueue(system.sender)
    with system.worker() as app:
        topics = stale_world(system, first) + stale_world(system, second)
        fake_openai.calls = 0
        beat.send(Job(START_STALE_REEVALUATION))
        beat.send(Job(START_STALE_REEVALUATION))  # the next occurrence, while it runs
        campaign = wait_for(lambda: _cron_campaigns(app), what="the scheduled campaign")
        [(_, total)] = campaign
        assert total == 4  # two stale topics in each org

        def finished() -> Any:
            system.tick()
            rows = _cron_campaigns(app, state="finished")
            return rows or None

        wait_for(finished, timeout=60, what="the scheduled campaign to finish")

    assert _cron_campaigns(app) == []
    assert fake_openai.calls == 4
    assert set(system.summaries(topics).values()) == {CURRENT}


def _cron_campaigns(app: Any, state: str = "running") -> list[tuple[str, int]]:
    from sqlalchemy import text

    from worker.context import unit_of_work

    with unit_of_work(app) as uow:
        rows = uow.session.execute(
            text(
                "SELECT id, total FROM reevaluation_campaigns"
                " WHERE origin = 'cron' AND org_id IS NULL AND state = :state"
            ),
            {"state": state},
        ).all()
    return [(str(row[0]), row[1]) for row in rows]


def test_a_job_that_fails_for_good_settles_its_topic_as_failed_once(system: System) -> None:
    auth = system.new_org()
    with system.worker():
        [topic] = topics_of(system.client, auth, closed=1, active=False)
        system.until_summarized([topic])
    summarized_by(system.factory, topic, prompt_version="summary-v0", model=MODEL)  # stale
    started = start(system.client, auth, {"rate": 1000})
    created = dt.datetime.fromisoformat(system.campaign(auth, started["id"])["createdAt"])
    with system.unit_of_work() as uow:  # its job waits on the broker: no worker runs
        advance_campaign(
            uow=uow, campaign_id=uuid.UUID(started["id"]), now=created + dt.timedelta(seconds=1)
        )
        uow.commit()
        [job] = uow.sent

    # What Celery calls when the job's last retry fails, or a bug raises in it.
    app = system.celery_app()
    app.tasks[SUMMARIZE_TOPIC].on_failure(RuntimeError("boom"), "task-id", (), job.kwargs, None)
    failed = system.campaign(auth, started["id"])
    with system.worker():  # ...and then the same job runs after all (a redelivery)
        wait_for(lambda: system.summaries([topic])[topic] == CURRENT, what="the job to run")
        assert system.until_finished(auth, started["id"]) == failed

    assert (failed["state"], failed["done"], failed["failed"]) == ("finished", 0, 1)
