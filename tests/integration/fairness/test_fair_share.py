"""Fair share of the model (shared/infra/fair.py) through the web and a real worker: an
org whose few closes come after another org's backlog waits for its turn, not for the
backlog; jobs whose tickets were lost are served once the reconciler tops up."""

from __future__ import annotations

import json

import redis

from shared.infra.queue import FAST_QUEUE, LLM_QUEUE
from tests.integration.reevaluations.system import SUMMARY, System
from tests.integration.reevaluations.world import topics_of
from tests.llm_server import FakeOpenAI
from worker.fair import top_up

BACKLOG = 40  # org A's closes, every one a model call
MODEL_S = 0.2  # each call's wait on the model
SLOTS = 2  # the worker's concurrency


def test_an_org_behind_anothers_backlog_waits_for_its_turn_not_for_the_backlog(
    system: System, fake_openai: FakeOpenAI
) -> None:
    org_a, org_b = system.new_org(), system.new_org()
    # No worker yet: A's 40 summaries wait, then B's 2 come in behind them.
    backlog = topics_of(system.client, org_a, closed=BACKLOG, active=False)
    behind = topics_of(system.client, org_b, closed=2, active=False)
    assert system.fair is not None and system.fair.waiting("live").orgs == 2

    fake_openai.slow(MODEL_S, json.dumps(SUMMARY))
    with system.worker(concurrency=SLOTS):
        system.until_summarized(behind)
        a_done_by_then = system.summarized(backlog)
        system.until_summarized(backlog)
    # Turns alternate A, B, A, B: B's two were done once about two of A's were (a slot
    # or two more in flight). In one FIFO queue all 40 of A's would have gone first.
    assert a_done_by_then <= 2 + 2 * SLOTS, a_done_by_then


def test_jobs_whose_tickets_were_lost_are_served_once_the_reconciler_tops_up(
    system: System, fake_openai: FakeOpenAI
) -> None:
    broker = redis.Redis.from_url(system.settings.broker_url)
    org = system.new_org()
    closed = topics_of(system.client, org, closed=3, active=False)
    broker.delete(system.prefix + LLM_QUEUE, system.prefix + FAST_QUEUE)  # tickets lost
    assert system.fair is not None and system.fair.waiting("live").jobs == 3

    fake_openai.answer_json(SUMMARY)
    with system.worker(concurrency=SLOTS) as app:
        from worker.context import context_of

        sent = top_up(context_of(app), period_s=0)
        assert sent == {"live": 3}
        system.until_summarized(closed)
    assert fake_openai.calls == 3  # each job once: tickets and jobs one to one
    broker.close()
