"""A webhook attempt's times nest, from the real settings: its one deadline < the job's hard
time limit < the claim's lease (and the slots' hold), so a job killed at its limit has
stopped before anyone may claim its attempt again, and a running attempt is never
claimed twice."""

from __future__ import annotations

import datetime as dt

import pytest
from celery import Celery

import worker.tasks  # noqa: F401  (registers the shared tasks before an app finalizes)
from shared.infra.config import Settings
from shared.infra.queue import DELIVER_WEBHOOK
from shared.infra.runtime import Endpoints
from shared.webhooks.policy import DRAIN_BUDGET_S, Policy
from worker.app import LLM_TASK_TIME_LIMIT_S, make_celery

ENDPOINTS = Endpoints(
    database_url="postgresql://postgres@127.0.0.1:5432/x",
    redis_url="redis://127.0.0.1:6379/0",
    broker_url="redis://127.0.0.1:6379/1",
)


def _worker_app(**settings: object) -> Celery:
    """The worker's Celery app (nothing connects until a task or a poll)."""
    return make_celery(
        Settings(
            database_url=ENDPOINTS.database_url,
            redis_url=ENDPOINTS.redis_url,
            broker_url=ENDPOINTS.broker_url,
            **settings,
        ),
        endpoints=ENDPOINTS,
    )


# The default, a short one, the longest one allowed (longer than the drain budget).
@pytest.mark.parametrize("timeout_s", [None, 0.5, 120.0])
def test_the_deadline_is_within_the_jobs_hard_limit_which_is_within_the_lease(
    timeout_s: float | None,
) -> None:
    app = _worker_app(**({} if timeout_s is None else {"webhook_timeout_s": timeout_s}))
    policy: Policy = app.driftless.webhook_policy
    task = app.tasks[DELIVER_WEBHOOK]

    deadline = dt.timedelta(seconds=policy.timeout_s)
    hard_limit = dt.timedelta(seconds=task.time_limit)
    assert deadline < hard_limit < policy.lease
    # The drain's last attempt starts only if it ends within the budget: the job's
    # attempts end by max(budget, deadline), and the hard limit leaves a margin past that.
    assert hard_limit > dt.timedelta(seconds=max(DRAIN_BUDGET_S, policy.timeout_s))
    assert task.soft_time_limit < task.time_limit
    # Not the LLM tasks' limit: a trickling receiver gives its worker back sooner.
    assert task.time_limit < LLM_TASK_TIME_LIMIT_S


def test_the_default_deadline_gives_a_webhook_job_under_a_minute() -> None:
    app = _worker_app()

    assert app.driftless.webhook_policy.timeout_s == 10.0
    assert app.tasks[DELIVER_WEBHOOK].time_limit == 45.0
    assert app.driftless.webhook_policy.lease == dt.timedelta(seconds=60)
