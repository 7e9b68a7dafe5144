"""Live work before bulk work (shared/infra/queue.py): a topic's close is summarized while
its own org's campaign still has most of its backlog waiting in the bulk lane, with a
worker of two slots and a slow model, as if the campaign ran at full rate."""

from __future__ import annotations

import datetime as dt
import json
import uuid

import redis
from prometheus_client import REGISTRY

from shared.infra.queue import LLM_BULK_QUEUE, LLM_QUEUE
from shared.reevaluations.pump import advance_campaign
from tests.helpers import wait_for
from tests.integration.reevaluations.system import SUMMARY, System
from tests.integration.reevaluations.world import start, topics_of
from tests.llm_server import FakeOpenAI

BULK = 200  # the campaign's topics, every one a model call
MODEL_S = 0.25  # each call's wait on the model
SLOTS = 2  # the worker's concurrency


def waits(lane: str) -> float:
    """Jobs whose wait driftless_job_wait_seconds observed in the lane (this process's
    worker threads)."""
    return REGISTRY.get_sample_value("driftless_job_wait_seconds_count", {"lane": lane}) or 0.0


def test_a_live_close_is_summarized_ahead_of_its_orgs_campaign_backlog(
    system: System, fake_openai: FakeOpenAI
) -> None:
    broker = redis.Redis.from_url(system.settings.broker_url)
    llm, bulk = system.prefix + LLM_QUEUE, system.prefix + LLM_BULK_QUEUE
    auth = system.new_org()
    try:
        # No worker yet: the closes' summaries wait in the live lane; dropped, as if done.
        topics_of(system.client, auth, closed=BULK, active=False)
        assert (broker.llen(llm), broker.llen(bulk)) == (BULK, 0)
        broker.delete(llm, system.prefix + "fast")

        started = start(system.client, auth, {"rate": 1000})
        created = dt.datetime.fromisoformat(system.campaign(auth, started["id"])["createdAt"])
        with system.unit_of_work() as uow:  # beat's tick: the whole campaign owed at once
            tick = advance_campaign(
                uow=uow, campaign_id=uuid.UUID(started["id"]), now=created + dt.timedelta(seconds=1)
            )
            uow.commit()
        assert tick.enqueued == BULK
        assert (broker.llen(llm), broker.llen(bulk)) == (0, BULK)  # the bulk lane alone

        fake_openai.slow(MODEL_S, json.dumps(SUMMARY))
        before = {lane: waits(lane) for lane in ("live", "bulk")}
        with system.worker(concurrency=SLOTS):
            wait_for(lambda: fake_openai.calls >= SLOTS, what="the worker busy on the campaign")
            [live] = topics_of(system.client, auth, closed=1, active=False)
            assert broker.llen(llm) >= 1  # the close's summary, in the live lane
            system.until_summarized([live])
            waiting = broker.llen(bulk)
        # In one queue the close would have waited for all 200 (about 25 s of model time);
        # fetched in turn with the bulk lane, it waited for about one bulk job a slot.
        assert waiting > BULK - 20, waiting
        # Each job's wait, in its lane: the live one, and the bulk ones the worker started.
        assert waits("live") - before["live"] >= 1
        assert waits("bulk") - before["bulk"] >= SLOTS
    finally:
        for key in broker.scan_iter(match=f"{system.prefix}*"):
            broker.delete(key)
