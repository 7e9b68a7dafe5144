"""Campaigns bounded per org: at most DRIFTLESS_CAMPAIGNS_PER_ORG run at once (past it 429
with Retry-After, counted in driftless_limit_hits_total{kind=campaigns}), even when starts
race; and campaigns over the same topics cost the model no more than one campaign does,
because a topic current already, or in flight for another campaign, is skipped by the pump
before any job runs; a claim whose job was lost is released after the timeouts."""

from __future__ import annotations

import datetime as dt
import json
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from flask.testing import FlaskClient
from prometheus_client import REGISTRY
from sqlalchemy import text
from sqlalchemy.orm import Session, sessionmaker

from shared.auth.service import create_api_key
from shared.infra.db.uow import UnitOfWork
from shared.infra.queue import RecordingQueue
from shared.llm.prompts import SUMMARY_PROMPT_VERSION
from shared.reevaluations.pump import ITEM_TIMEOUT, Tick, advance_campaign, advance_campaigns
from shared.reevaluations.selection import Maker
from shared.reevaluations.service import start_campaign
from tests.helpers import wait_for
from tests.integration.reevaluations.system import MODEL, SUMMARY, System
from tests.integration.reevaluations.world import (
    campaign,
    campaign_rows,
    start,
    summarized_by,
    topics_of,
)
from tests.llm_server import FakeOpenAI


def _hits() -> float:
    return REGISTRY.get_sample_value("driftless_limit_hits_total", {"kind": "campaigns"}) or 0.0


def test_a_third_running_campaign_of_an_org_is_429_with_retry_after_and_another_org_starts(
    client: FlaskClient, auth: dict[str, str], other_auth: dict[str, str]
) -> None:
    topics_of(client, auth, closed=2)
    topics_of(client, other_auth, closed=1)
    start(client, auth, {"agentId": "nobody"})  # finished at once: not running, not counted
    first = start(client, auth, {"rate": 0.5})
    start(client, auth, {"rate": 0.5})
    hits = _hits()

    refused = client.post("/agents-api/reevaluations", json={}, headers=auth)

    assert refused.status_code == 429
    assert refused.json["error"]["code"] == "too_busy"  # type: ignore[index]
    assert "DRIFTLESS_CAMPAIGNS_PER_ORG=2" in refused.json["error"]["message"]  # type: ignore[index]
    # The sooner one has 3 topics to go at 0.5 a second: 6 s, within the 5 s to 10 min.
    assert refused.headers["Retry-After"] == "6"
    assert _hits() == hits + 1
    listed: Any = client.get("/agents-api/reevaluations", headers=auth).json
    assert len(listed["reevaluations"]) == 3  # nothing written by the refusal
    assert start(client, other_auth)["state"] == "running"  # another org's cap is its own

    client.delete(f"/agents-api/reevaluations/{first['id']}", headers=auth)
    assert start(client, auth)["state"] == "running"  # a cancelled one frees its place


def test_concurrent_starts_of_one_org_never_pass_the_cap_together(system: System) -> None:
    auth = system.new_org()
    topics_of(system.client, auth, closed=1, active=False)
    ready = threading.Barrier(4)

    def post(_: int) -> int:
        ready.wait()
        return system.client.post(
            "/agents-api/reevaluations", json={"rate": 0.1}, headers=auth
        ).status_code

    with ThreadPoolExecutor(4) as pool:
        statuses = sorted(pool.map(post, range(4)))

    assert statuses == [202, 202, 429, 429]
    with system.unit_of_work() as uow:
        running = uow.session.execute(
            text("SELECT count(*) FROM reevaluation_campaigns WHERE state = 'running'")
        ).scalar()
    assert running == 2


def test_five_campaigns_over_the_same_topics_ask_the_model_once_per_topic(
    system: System, fake_openai: FakeOpenAI
) -> None:
    auth = system.new_org()
    with system.worker():
        topics = topics_of(system.client, auth, closed=20, active=False)
        system.until_summarized(topics)
    for topic in topics:  # all stale: one campaign alone asks the model 20 times
        summarized_by(system.factory, topic, prompt_version="summary-v0", model=MODEL)
    # The org's two, and three an operator started over every org's topics (no cap).
    campaign_ids = [uuid.UUID(start(system.client, auth, {"rate": 1})["id"]) for _ in range(2)]
    with system.unit_of_work() as uow:
        for _ in range(3):
            operator = start_campaign(
                uow=uow, org_id=None, origin="cli", campaigns_per_org=None, rate=1
            )
            campaign_ids.append(operator.id)
        uow.commit()
        base = uow.session.execute(
            text("SELECT max(created_at) FROM reevaluation_campaigns")
        ).scalar_one()
    current = Maker(SUMMARY_PROMPT_VERSION, MODEL)

    def advance(campaign_id: uuid.UUID, at: dt.datetime) -> None:
        with system.unit_of_work() as uow:
            advance_campaign(uow=uow, campaign_id=campaign_id, now=at, current=current)
            uow.commit()

    # Slow answers, and each tick one topic of every campaign, the five advanced at once:
    # without the claim, the jobs for a topic would all find it stale and all ask.
    fake_openai.slow(0.2, json.dumps(SUMMARY))
    fake_openai.calls = 0
    with system.worker(), ThreadPoolExecutor(5) as pool:
        for second in range(1, 22):
            at = base + dt.timedelta(seconds=second)
            list(pool.map(advance, campaign_ids, [at] * len(campaign_ids)))
        wait_for(lambda: _all_finished(system, campaign_ids), timeout=60, what="five campaigns")

    assert fake_openai.calls == 20
    assert set(system.summaries(topics).values()) == {(SUMMARY_PROMPT_VERSION, MODEL)}
    with system.unit_of_work() as uow:
        counts = uow.session.execute(
            text("SELECT enqueued, done, failed FROM reevaluation_campaigns WHERE id = ANY(:ids)"),
            {"ids": campaign_ids},
        ).all()
    assert {tuple(row) for row in counts} == {(20, 20, 0)}  # skipped topics count done


def _all_finished(system: System, campaign_ids: list[uuid.UUID]) -> bool:
    with system.unit_of_work() as uow:
        running = uow.session.execute(
            text(
                "SELECT count(*) FROM reevaluation_campaigns"
                " WHERE id = ANY(:ids) AND state <> 'finished'"
            ),
            {"ids": campaign_ids},
        ).scalar()
    return running == 0


def test_a_cancelled_campaigns_lost_job_releases_its_topic_after_the_timeouts(
    client: FlaskClient,
    auth: dict[str, str],
    session_factory: sessionmaker[Session],
    queue: RecordingQueue,
) -> None:
    [topic] = topics_of(client, auth, closed=1, active=False)
    first = start(client, auth, {"rate": 100})
    created = dt.datetime.fromisoformat(campaign(client, auth, first["id"])["createdAt"])

    def tick(campaign_id: str, seconds: float) -> Tick:
        with UnitOfWork(session_factory, queue) as uow:
            at = created + dt.timedelta(seconds=seconds)
            done = advance_campaign(uow=uow, campaign_id=uuid.UUID(campaign_id), now=at)
            uow.commit()
        return done

    assert tick(first["id"], 1) == Tick(enqueued=1)  # its job is then lost
    client.delete(f"/agents-api/reevaluations/{first['id']}", headers=auth)
    second = start(client, auth, {"rate": 100})
    assert tick(second["id"], 2) == Tick(skipped=1, finished=1)  # in flight for the first

    late = created + 2 * ITEM_TIMEOUT + dt.timedelta(seconds=3)
    released = advance_campaigns(new_uow=lambda: UnitOfWork(session_factory, queue), now=late)

    # The tick runs every campaign in the database: other tests' may move too.
    assert released.given_up >= 1
    assert campaign(client, auth, first["id"])["failed"] == 1
    third = start(client, auth, {"rate": 100})
    assert tick(third["id"], 3) == Tick(enqueued=1)  # the topic is free again
    assert [job.kwargs["topic_id"] for job in queue.sent][-1] == topic


def test_the_cli_is_refused_past_the_orgs_cap_and_starts_nothing(system: System) -> None:
    from click.testing import CliRunner

    from worker.cli import main

    name = f"capped-{uuid.uuid4().hex[:8]}"
    with system.unit_of_work() as uow:
        auth = {"Authorization": f"Bearer {create_api_key(uow=uow, org_name=name)}"}
        uow.commit()
    topics_of(system.client, auth, closed=1, active=False)
    start(system.client, auth, {"rate": 0.1})
    start(system.client, auth, {"rate": 0.1})
    assert system.settings.database_url and system.settings.redis_url
    env = {"DATABASE_URL": system.settings.database_url, "REDIS_URL": system.settings.redis_url}

    result = CliRunner().invoke(main, ["reevaluate", "--org", name], env=env)

    assert result.exit_code != 0
    assert "DRIFTLESS_CAMPAIGNS_PER_ORG=2" in result.output
    assert campaign_rows(system.factory) == 2
