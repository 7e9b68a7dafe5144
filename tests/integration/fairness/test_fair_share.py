"""Fair share of the model (shared/infra/fair.py) through the web and a real worker: an
org whose few closes come after another org's backlog waits for its turn, not for the
backlog; jobs whose tickets were lost are served once the reconciler tops up; a backlog
is not lost work."""

from __future__ import annotations

import datetime as dt
import json
import time

import redis

from shared.infra.queue import FAST_QUEUE, LLM_QUEUE
from shared.reconcile.service import reconcile
from tests.integration.reevaluations.system import SUMMARY, System
from tests.integration.reevaluations.world import topics_of
from tests.llm_server import FakeOpenAI
from worker.fair import tickets_queued, top_up

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


def test_tickets_still_in_the_broker_are_not_topped_up_and_lost_ones_are_42b(
    system: System,
) -> None:
    from worker.context import context_of

    org = system.new_org()
    topics_of(system.client, org, closed=3, active=False)  # no worker: 3 jobs, 3 tickets
    app = system.celery_app()
    runtime = context_of(app)
    try:
        queued = tickets_queued(system.sender)
        assert queued["live"] >= 3  # (other tests' tickets may be there too)
        assert top_up(runtime, period_s=0, tickets_queued=queued) == {}
        broker = redis.Redis.from_url(system.settings.broker_url)
        broker.delete(system.prefix + LLM_QUEUE)  # the broker lost them
        broker.close()
        assert tickets_queued(system.sender)["live"] == 0
        assert top_up(runtime, period_s=0, tickets_queued={"live": 0, "bulk": 0}) == {"live": 3}
    finally:
        app.close()


def test_a_backlog_is_never_sent_again_by_the_reconciler_each_job_runs_once_42b(
    system: System, fake_openai: FakeOpenAI
) -> None:
    """The reconciler runs again and again, as if every job had waited ten periods, while
    a worker drains a backlog: it finds every topic undone and every job held."""
    org = system.new_org()
    backlog = topics_of(system.client, org, closed=BACKLOG, active=False)
    data = redis.Redis.from_url(system.settings.redis_url)

    def reconcile_run() -> int:
        return reconcile(
            new_uow=system.unit_of_work, redis_client=data,
            now=dt.datetime.now(dt.UTC) + dt.timedelta(minutes=10), period_s=60,
            drift_interval=system.settings.drift_interval,
        ).summaries  # fmt: skip

    resent = [reconcile_run()]  # nothing runs yet: all of them wait in the org's list
    fake_openai.slow(MODEL_S, json.dumps(SUMMARY))
    deadline = time.monotonic() + 120
    with system.worker(concurrency=SLOTS):
        while system.summarized(backlog) < BACKLOG and time.monotonic() < deadline:
            resent.append(reconcile_run())  # some wait, some run, some are done
            time.sleep(MODEL_S)
    data.close()
    assert system.summarized(backlog) == BACKLOG
    assert len(resent) > 3 and sum(resent) == 0, resent
    assert fake_openai.calls == BACKLOG  # every job ran once
