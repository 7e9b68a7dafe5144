"""Celery tasks: each takes ids, opens one unit of work, calls one service function."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import logging
import uuid
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import Any

from celery import Celery, Task, shared_task
from celery.exceptions import Retry
from redis.exceptions import RedisError
from sqlalchemy.exc import OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout

from shared.embeddings.batch import embed_batch as embed_texts
from shared.embeddings.provider import EmbeddingsError
from shared.embeddings.sweep import sweep as embed_sweep
from shared.evaluations.pipeline import evaluation_job
from shared.evaluations.requests import sweep_idle as sweep
from shared.evaluations.summarize import summary_job
from shared.infra.fair import Lane, subject_of
from shared.infra.queue import (
    ADVANCE_REEVALUATIONS,
    DELIVER_WEBHOOK,
    DISPATCH_WEBHOOKS,
    EMBED_BATCH,
    EMBED_NEW,
    EMBED_PENDING,
    EVALUATE_TOPIC,
    FIRE_DEBOUNCE,
    INVALIDATE_MEMORY,
    NEXT_MODEL_JOB,
    PURGE_IDLE_SESSIONS,
    RECONCILE,
    START_STALE_REEVALUATION,
    SUMMARIZE_TOPIC,
    SWEEP_IDLE,
)
from shared.llm.factory import configured_model
from shared.llm.ratelimit import RateLimited
from shared.memory.cache import MemoryCache
from shared.memory.scope import Scope
from shared.reconcile.service import reconcile as reconcile_lost
from shared.reevaluations.pump import advance_campaigns, settle_item
from shared.reevaluations.service import start_scheduled_reevaluation
from shared.retention.service import purge_idle_sessions as purge_idle
from shared.triggers.service import fire_debounce as fire
from shared.webhooks.delivery import deliver
from shared.webhooks.service import dispatch_overdue
from shared.webhooks.slots import WebhookSlots
from worker.context import context_of, unit_of_work
from worker.fair import serve_next, tickets_queued, top_up

log = logging.getLogger(__name__)

# A database blip or an exhausted connection pool is worth retrying; everything else is a
# bug to surface, not to loop on. The fleet's LLM quota being used up (RateLimited) is
# retried too, after the wait the shared bucket named (see _within_quota).
RETRYABLE = (OperationalError, PoolTimeout)
# The two LLM-bound tasks: retried with backoff (capped at a minute) on RETRYABLE errors.
LLM_TASK_OPTIONS: dict[str, Any] = {
    "bind": True,
    "autoretry_for": RETRYABLE,
    "retry_backoff": True,
    "retry_backoff_max": 60,
    "max_retries": 8,
}


@contextlib.contextmanager
def _within_quota(task: Task) -> Iterator[None]:
    """Retry an LLM task when the fleet-wide quota is used up; it wrote nothing."""
    try:
        yield
    except RateLimited as exc:
        # Not out of the database-retry budget (max_retries): quota pressure passes, and
        # the job waits as long as it takes rather than being dropped.
        raise task.retry(
            exc=exc, countdown=exc.retry_after_s, max_retries=task.request.retries + 1
        ) from exc


def _held_while_running(task: Task, name: str, topic_id: str) -> AbstractContextManager[None]:
    """A model job from the broker is marked held while it runs, and while Celery retries
    it (shared/infra/held.py): the reconciler does not send it again meanwhile. A hard
    time limit is no retry: such a job is the reconciler's at once."""
    runtime = context_of(task.app)
    return runtime.held.running(
        subject_of(name, {"topic_id": topic_id}), runtime.heartbeat,
        retried=lambda exc: isinstance(exc, (Retry, RateLimited, *RETRYABLE)),
    )  # fmt: skip


def settle(app: Celery, campaign_id: str, topic_id: str, *, failed: bool) -> None:
    """The job of a re-evaluation campaign's topic ended: its item is settled."""
    with unit_of_work(app) as uow:
        settle_item(
            uow=uow, campaign_id=uuid.UUID(campaign_id), topic_id=uuid.UUID(topic_id),
            failed=failed,
        )  # fmt: skip
        uow.commit()


def _settle_failed(app: Celery, kwargs: dict[str, Any] | None) -> None:
    """A job that may be a re-evaluation campaign's (a `campaign_id` kwarg) failed for
    good (not retrying): its item is settled as failed."""
    campaign_id = (kwargs or {}).get("campaign_id")
    if not campaign_id or kwargs is None:
        return
    try:
        settle(app, campaign_id, kwargs["topic_id"], failed=True)
    except Exception:  # the pump counts it failed once its item times out
        log.exception("could not settle topic %s of re-evaluation %s", kwargs, campaign_id)


class CampaignJob(Task):
    """A model task whose failure settles its campaign item, if it has one."""

    def on_failure(self, exc: Exception, task_id: str, args: Any, kwargs: Any, einfo: Any) -> None:
        _settle_failed(self.app, kwargs)


def run_summary(
    app: Celery, *, topic_id: str, trigger: str = "topic_closed", campaign_id: str | None = None
) -> str:
    """Summarize one topic; a repeat for an unchanged topic makes no LLM call, writes nothing."""
    context = context_of(app)
    outcome = summary_job(
        new_uow=lambda: unit_of_work(app),
        llm=context.llm,
        live=context.redis,
        topic_id=uuid.UUID(topic_id),
        trigger=trigger,
    )
    log.info("summarize_topic %s: %s", topic_id, outcome.outcome)
    if campaign_id:
        settle(app, campaign_id, topic_id, failed=False)
    return outcome.outcome


def run_evaluation(
    app: Celery, *, topic_id: str, trigger: str, campaign_id: str | None = None
) -> str:
    """Drift detection, then a silent fork or an in-place refresh (R30); arms R28's guard."""
    context = context_of(app)
    outcome = evaluation_job(
        new_uow=lambda: unit_of_work(app),
        llm=context.llm,
        debouncer=context.debouncer,
        live=context.redis,
        topic_id=uuid.UUID(topic_id),
        trigger=trigger,
        scan_back=context.settings.scan_back,
    )
    log.info("evaluate_topic %s (%s): %s", topic_id, trigger, outcome.outcome)
    if campaign_id:
        settle(app, campaign_id, topic_id, failed=False)
    return outcome.outcome


# What a model job's name runs: the tasks below, and a ticket's job (worker/fair.py).
MODEL_JOBS: dict[str, Callable[..., str]] = {
    SUMMARIZE_TOPIC: run_summary,
    EVALUATE_TOPIC: run_evaluation,
}


@shared_task(name=SUMMARIZE_TOPIC, base=CampaignJob, **LLM_TASK_OPTIONS)
def summarize_topic(
    self: Task, topic_id: str, trigger: str = "topic_closed", campaign_id: str | None = None
) -> str:
    """A summary sent straight to the broker (a retry's backoff, a job from before tickets)."""
    with _held_while_running(self, SUMMARIZE_TOPIC, topic_id), _within_quota(self):
        return run_summary(self.app, topic_id=topic_id, trigger=trigger, campaign_id=campaign_id)


@shared_task(name=NEXT_MODEL_JOB, bind=True, autoretry_for=(RedisError,), retry_backoff=True)
def next_model_job(self: Task, lane: Lane) -> str:
    """A ticket: run the model job whose org's turn it is in `lane` (shared/infra/fair.py)."""
    return serve_next(
        self, lane, MODEL_JOBS, on_failure=lambda job: _settle_failed(self.app, job.kwargs)
    )


@shared_task(name=INVALIDATE_MEMORY, bind=True, autoretry_for=(RedisError,), retry_backoff=True)
def invalidate_memory(self: Task, org_id: str, agent_id: str, user_id: str) -> None:
    """Drop a scope's cached memory block after a curation change committed (R15)."""
    scope = Scope.from_job_kwargs(org_id=org_id, agent_id=agent_id, user_id=user_id)
    MemoryCache(context_of(self.app).redis).invalidate(scope)


@shared_task(name=RECONCILE, bind=True)
def reconcile(self: Task) -> dict[str, int]:
    """Beat, every DRIFTLESS_RECONCILE_S: re-enqueue work whose job was lost (counts per
    kind; `tickets`: model jobs that lost their ticket and got a new one)."""
    context = context_of(self.app)
    reconciled = reconcile_lost(
        new_uow=lambda: unit_of_work(self.app),
        redis_client=context.redis,
        now=dt.datetime.now(dt.UTC),
        period_s=context.settings.reconcile_s,
        drift_interval=context.settings.drift_interval,
        embedding_model=None if context.embedder is None else context.embedder.model,
    )
    tickets: dict[str, int] = {}
    try:  # a model job whose ticket was lost gets one
        tickets = top_up(
            context, period_s=context.settings.reconcile_s,
            tickets_queued=_tickets_queued(self.app),
        )  # fmt: skip
    except RedisError as exc:
        log.warning("fair queue unavailable to top up: %s", exc)
    return {**reconciled.as_dict(), "tickets": sum(tickets.values())}


def _tickets_queued(app: Celery) -> dict[Lane, int] | None:
    """None when the broker cannot say: then every job without a parked ticket may lack one."""
    try:
        return tickets_queued(app)
    except Exception as exc:  # kombu's errors vary by transport
        log.warning("broker queue lengths unavailable: %s", exc)
        return None


@shared_task(name=PURGE_IDLE_SESSIONS, bind=True)
def purge_idle_sessions(self: Task) -> dict[str, int]:
    """Beat, every DRIFTLESS_RETENTION_SWEEP_S: purge sessions idle past DRIFTLESS_RETENTION_S."""
    settings = context_of(self.app).settings
    if settings.retention_s <= 0:  # a beat configured before retention was switched off
        return {}
    purged = purge_idle(
        new_uow=lambda: unit_of_work(self.app),
        now=dt.datetime.now(dt.UTC),
        retention=dt.timedelta(seconds=settings.retention_s),
    )
    return purged.as_dict()


@shared_task(name=EVALUATE_TOPIC, base=CampaignJob, **LLM_TASK_OPTIONS)
def evaluate_topic(self: Task, topic_id: str, trigger: str, campaign_id: str | None = None) -> str:
    """An evaluation sent straight to the broker (a retry's backoff, a job from before tickets)."""
    with _held_while_running(self, EVALUATE_TOPIC, topic_id), _within_quota(self):
        return run_evaluation(self.app, topic_id=topic_id, trigger=trigger, campaign_id=campaign_id)


@shared_task(name=FIRE_DEBOUNCE, bind=True, autoretry_for=(RedisError,), retry_backoff=True)
def fire_debounce(
    self: Task, topic_id: str, token: str, trigger: str, org: str | None = None
) -> str:
    """The one job of a trigger burst: evaluate once the burst has been quiet (R27)."""
    fired = fire(
        debouncer=context_of(self.app).debouncer,
        topic_id=uuid.UUID(topic_id),
        token=token,
        trigger=trigger,
        org=org,
    )
    if fired.send is not None:  # the evaluation, or this job again when the burst is due
        context_of(self.app).queue.send(fired.send)
    return fired.status


@shared_task(name=SWEEP_IDLE, bind=True)
def sweep_idle(self: Task) -> int:
    """Beat: evaluate topics of users who walked away without an exit trigger."""
    context = context_of(self.app)
    return sweep(
        new_uow=lambda: unit_of_work(self.app),
        debouncer=context.debouncer,
        queue=context.queue,
        idle=dt.timedelta(seconds=context.settings.idle_s),
    )


@shared_task(
    name=DELIVER_WEBHOOK, bind=True, autoretry_for=(*RETRYABLE, RedisError), retry_backoff=True
)
def deliver_webhook(self: Task, delivery_id: int) -> int:
    """Attempt a webhook delivery, then its subscription's other due ones (attempts made).
    Its hard time limit is the policy's (worker/app.py), within the lease of its claims."""
    context = context_of(self.app)
    policy = context.webhook_policy
    slots = WebhookSlots(
        context.redis, hold=policy.lease, per_org=context.settings.webhooks_per_org
    )
    return deliver(
        new_uow=lambda: unit_of_work(self.app),
        slots=slots,
        http=context.webhook_http,
        box=context.secret_box,
        policy=policy,
        delivery_id=delivery_id,
    )


@shared_task(name=DISPATCH_WEBHOOKS, bind=True)
def dispatch_webhooks(self: Task) -> dict[str, int]:
    """Beat: a job for every webhook delivery overdue (its job lost, or a long backoff);
    events past their retention go, a batch per transaction (counts of both)."""
    return dispatch_overdue(
        new_uow=lambda: unit_of_work(self.app),
        now=dt.datetime.now(dt.UTC),
        period_s=context_of(self.app).settings.reconcile_s,
    )


@shared_task(name=ADVANCE_REEVALUATIONS, bind=True)
def advance_reevaluations(self: Task) -> dict[str, int]:
    """Beat, every second: each running re-evaluation campaign's topics enqueued at its rate;
    topics the configured model summarized already are skipped."""
    now = dt.datetime.now(dt.UTC)
    model = configured_model(context_of(self.app).settings)
    tick = advance_campaigns(new_uow=lambda: unit_of_work(self.app), now=now, model=model)
    return dataclasses.asdict(tick)


@shared_task(name=START_STALE_REEVALUATION, bind=True)
def start_stale_reevaluation(self: Task) -> str | None:
    """Beat, on DRIFTLESS_REEVALUATE_CRON: a campaign over every topic summarized by an older
    prompt version or model; none while the previous one still runs."""
    with unit_of_work(self.app) as uow:
        started = start_scheduled_reevaluation(uow=uow, settings=context_of(self.app).settings)
    return None if started is None else str(started)


@shared_task(name=EMBED_PENDING, bind=True)
def embed_pending(self: Task) -> dict[str, int | str]:
    """Beat, every couple of seconds while embeddings are on: per-org jobs for the messages
    and topics that came since the last tick (shared/embeddings/sweep.py)."""
    context = context_of(self.app)
    if context.embedder is None:  # a beat configured before embeddings were switched off
        return {}
    planned = embed_sweep(
        new_uow=lambda: unit_of_work(self.app), model=context.embedder.model,
        redis_client=context.redis,
    )  # fmt: skip
    return planned.as_dict()


# Retried while the fleet's server fails; past the last retry its texts are behind the
# planner's cursor, and the reconciler's (shared/embeddings/batch.py).
_EMBED_RETRIES = {
    "autoretry_for": (*RETRYABLE, EmbeddingsError), "retry_backoff": True,
    "retry_backoff_max": 60, "max_retries": 8,
}  # fmt: skip


@shared_task(name=EMBED_NEW, bind=True, **_EMBED_RETRIES)
def embed_new(
    self: Task, message_ids: list[int] | None = None, topic_ids: list[str] | None = None
) -> dict[str, int | str]:
    """The planner's job: vectors of one org's new messages or topics still missing one."""
    return _embed(self, message_ids, topic_ids)


@shared_task(name=EMBED_BATCH, bind=True, **_EMBED_RETRIES)
def embed_batch(
    self: Task, message_ids: list[int] | None = None, topic_ids: list[str] | None = None
) -> dict[str, int | str]:
    """A backfill's or the reconciler's batch: vectors of those of these messages and
    topics still missing one of the current model; retried when the server failed."""
    return _embed(self, message_ids, topic_ids)


def _embed(
    task: Task, message_ids: list[int] | None, topic_ids: list[str] | None
) -> dict[str, int | str]:
    context = context_of(task.app)
    if context.embedder is None:
        return {}
    embedded = embed_texts(
        new_uow=lambda: unit_of_work(task.app), embedder=context.embedder,
        message_ids=message_ids or [], topic_ids=[uuid.UUID(t) for t in topic_ids or []],
        redis_client=context.redis, per_org=context.settings.embeddings_per_org,
    )  # fmt: skip
    return embedded.as_dict()
