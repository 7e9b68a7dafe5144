"""Live work before bulk work (shared/infra/queue.py): a topic's close is summarized while
its own org's campaign still has most of its backlog waiting in the bulk lane, with a
worker of two slots and a slow model, as if the campaign ran at full rate.

Both ways the web and beat send model jobs: as Celery messages in the lanes' queues, and
as production does, through the orgs' lists (shared/infra/fair.py), the queues carrying
one ticket a job."""

from __future__ import annotations

import datetime as dt
import json
import uuid
from collections.abc import Iterator

import pytest
import redis
from prometheus_client import REGISTRY

from shared.infra.config import Settings
from shared.infra.fair import Lane
from shared.infra.queue import LLM_BULK_QUEUE, LLM_QUEUE
from shared.reevaluations.pump import advance_campaign
from tests.helpers import wait_for
from tests.integration.reevaluations.system import (
    SUMMARY,
    System,
    campaign_system,
    clear_fair_lists,
)
from tests.integration.reevaluations.world import start, topics_of
from tests.llm_server import FakeOpenAI

BULK = 200  # the campaign's topics, every one a model call
MODEL_S = 0.25  # each call's wait on the model
SLOTS = 2  # the worker's concurrency


@pytest.fixture(params=["fifo", "fair"])
def system(
    request: pytest.FixtureRequest, settings: Settings, fake_openai: FakeOpenAI
) -> Iterator[System]:
    """The campaigns' system, its model jobs sent without the orgs' lists or (as in
    production) through them."""
    with campaign_system(settings, fake_openai, fair=request.param == "fair") as built:
        yield built


def waiting(system: System, broker: redis.Redis, lane: Lane) -> tuple[int, int]:
    """(messages in the lane's queue, jobs in its orgs' lists): (jobs, 0) without the
    orgs' lists; with them (tickets, jobs), one ticket a job."""
    queue = system.prefix + (LLM_QUEUE if lane == "live" else LLM_BULK_QUEUE)
    listed = system.fair.waiting(lane).jobs if system.fair is not None else 0
    return int(broker.llen(queue)), listed


def waits(lane: str) -> float:
    """Jobs whose wait driftless_job_wait_seconds observed in the lane (this process's
    worker threads)."""
    return REGISTRY.get_sample_value("driftless_job_wait_seconds_count", {"lane": lane}) or 0.0


def test_a_live_close_is_summarized_ahead_of_its_orgs_campaign_backlog(
    system: System, fake_openai: FakeOpenAI
) -> None:
    broker = redis.Redis.from_url(system.settings.broker_url)
    data = redis.Redis.from_url(system.settings.redis_url)
    listed = BULK if system.fair is not None else 0  # the jobs in the orgs' lists
    auth = system.new_org()
    try:
        # No worker yet: the closes' summaries wait in the live lane; dropped, as if done.
        topics_of(system.client, auth, closed=BULK, active=False)
        assert waiting(system, broker, "live") == (BULK, listed)
        assert waiting(system, broker, "bulk") == (0, 0)
        broker.delete(system.prefix + LLM_QUEUE, system.prefix + "fast")
        clear_fair_lists(data)

        started = start(system.client, auth, {"rate": 1000})
        created = dt.datetime.fromisoformat(system.campaign(auth, started["id"])["createdAt"])
        with system.unit_of_work() as uow:  # beat's tick: the whole campaign owed at once
            tick = advance_campaign(
                uow=uow, campaign_id=uuid.UUID(started["id"]), now=created + dt.timedelta(seconds=1)
            )
            uow.commit()
        assert tick.enqueued == BULK
        assert waiting(system, broker, "live") == (0, 0)
        assert waiting(system, broker, "bulk") == (BULK, listed)  # the bulk lane alone

        fake_openai.slow(MODEL_S, json.dumps(SUMMARY))
        before = {lane: waits(lane) for lane in ("live", "bulk")}
        with system.worker(concurrency=SLOTS):
            wait_for(lambda: fake_openai.calls >= SLOTS, what="the worker busy on the campaign")
            [live] = topics_of(system.client, auth, closed=1, active=False)
            assert waiting(system, broker, "live")[0] >= 1  # the close's summary (or ticket)
            system.until_summarized([live])
            left = waiting(system, broker, "bulk")
        # In one queue the close would have waited for all 200 (about 25 s of model time);
        # fetched in turn with the bulk lane, it waited for about one bulk job a slot.
        assert left[0] > BULK - 20, left
        if system.fair is not None:  # and the campaign's jobs still wait in its org's list
            assert left[1] > BULK - 20, left
        # Each job's wait, in its lane: the live one, and the bulk ones the worker started.
        assert waits("live") - before["live"] >= 1
        assert waits("bulk") - before["bulk"] >= SLOTS
    finally:
        for key in broker.scan_iter(match=f"{system.prefix}*"):
            broker.delete(key)
        data.close()
