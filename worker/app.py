"""`make_celery`: the Celery app, built from the same settings as the web app."""

from __future__ import annotations

from typing import Any

from celery import Celery
from celery.schedules import crontab

from shared.embeddings.sweep import EMBED_TICK_S
from shared.infra.broker import sender_settings
from shared.infra.config import Settings
from shared.infra.crontab import parse_crontab
from shared.infra.queue import (
    ADVANCE_REEVALUATIONS,
    DELIVER_WEBHOOK,
    DISPATCH_WEBHOOKS,
    EMBED_PENDING,
    PURGE_IDLE_SESSIONS,
    RECONCILE,
    START_STALE_REEVALUATION,
    SWEEP_IDLE,
)
from shared.infra.runtime import Endpoints, resolve_endpoints
from shared.reevaluations.pump import TICK_S as REEVALUATION_TICK_S
from worker.beat import beat_settings
from worker.context import worker_runtime
from worker.logs import connect_task_context
from worker.metrics import connect_task_signals
from worker.tracing import connect_tracing_signals

# Hard limit of an LLM-bound task; the broker's visibility timeout must exceed it.
LLM_TASK_TIME_LIMIT_S = 300
LLM_TASK_SOFT_TIME_LIMIT_S = 240


def beat_schedule(settings: Settings) -> dict[str, dict[str, Any]]:
    schedule: dict[str, dict[str, Any]] = {
        "reconcile": {"task": RECONCILE, "schedule": float(settings.reconcile_s)},
        "sweep-idle": {"task": SWEEP_IDLE, "schedule": float(settings.sweep_s)},
        # Webhook deliveries whose job was lost: the same kind of work as reconcile's.
        "dispatch-webhooks": {"task": DISPATCH_WEBHOOKS, "schedule": float(settings.reconcile_s)},
    }
    schedule["advance-reevaluations"] = {
        "task": ADVANCE_REEVALUATIONS,
        "schedule": REEVALUATION_TICK_S,
        # A tick that waited this long in a backed-up queue is dropped: the next one owes
        # the same topics (the pump counts time, not ticks).
        "options": {"expires": 10 * REEVALUATION_TICK_S},
    }
    if settings.reevaluate_cron is not None:  # checked at start (shared/infra/config.py)
        fields = parse_crontab(settings.reevaluate_cron)
        schedule["reevaluate-stale"] = {
            "task": START_STALE_REEVALUATION,
            "schedule": crontab(**fields._asdict()),
        }
    if settings.embeddings != "none":
        schedule["embed-pending"] = {
            "task": EMBED_PENDING,
            "schedule": EMBED_TICK_S,
            # A sweep that waited this long is dropped: the next one reads the same cursors.
            "options": {"expires": 10 * EMBED_TICK_S},
        }
    if settings.retention_s > 0:  # 0 keeps every session forever
        schedule["retention"] = {
            "task": PURGE_IDLE_SESSIONS,
            "schedule": float(settings.retention_sweep_s),
        }
    return schedule


def make_celery(settings: Settings, *, endpoints: Endpoints | None = None) -> Celery:
    endpoints = endpoints or resolve_endpoints(settings)
    app = Celery("driftless", set_as_current=False, include=["worker.tasks"])
    # Routing and sending as every sender does (shared/infra/broker.py), then the worker's own.
    app.conf.update(sender_settings(endpoints))
    app.conf.update(
        # Ack after the task ran, not when it was received: a worker that dies mid-task
        # leaves the job on the broker for another worker. Every task is idempotent.
        task_acks_late=True,
        # ...and a worker killed by a signal or the OOM killer also gives the job back.
        task_reject_on_worker_lost=True,
        # One job at a time per worker process: an LLM call takes seconds, and prefetched
        # jobs would wait behind it while other workers sit idle.
        worker_prefetch_multiplier=1,
        # A job unacked for longer than this is redelivered by Redis. It must exceed the
        # longest task (the hard time limit under prefork and gevent, the Procfile's pool;
        # under the threads pool, which enforces none, the LLM call's own bound:
        # longest_llm_call_s), or a slow call would run twice in parallel.
        # (Added to the sender's options: a Sentinel broker's master_name is there.)
        broker_transport_options={
            **(app.conf.broker_transport_options or {}),
            "visibility_timeout": LLM_TASK_TIME_LIMIT_S * 4,
        },
        task_time_limit=LLM_TASK_TIME_LIMIT_S,
        task_soft_time_limit=LLM_TASK_SOFT_TIME_LIMIT_S,
        # Results live in PostgreSQL (topics, evaluation rows); no result backend traffic.
        task_ignore_result=True,
        result_backend=None,
        # Celery keeps its backend per thread unless told it is safe to share, and under
        # gevent a thread is a greenlet: each task built a (disabled) backend afresh, 2 %
        # of a gevent worker's CPU (py-spy). The disabled backend holds no connection.
        result_backend_thread_safe=True,
        # When the broker connection drops, let running tasks finish. Cancelling them
        # (True) would avoid a second copy after redelivery, but every task is idempotent
        # (a watermark under a row lock: a copy costs at most an LLM call), and with
        # celery 5.7 the cancel path ended the whole worker on a Redis restart
        # (tests/faults/test_redis_restart.py).
        worker_cancel_long_running_tasks_on_connection_loss=False,
        beat_schedule=beat_schedule(settings),
        # Two beats may run; the holder of a Redis lock sends (worker/beat.py).
        **beat_settings(endpoints),
        worker_hijack_root_logger=False,
    )
    app.driftless = worker_runtime(app, settings, endpoints)
    # A webhook job's own hard limit, from its attempts' deadline: well under the LLM
    # tasks' (a trickling receiver gives back its worker sooner) and within the lease of
    # its claims and slots (shared/webhooks/delivery.py), so no attempt runs twice at once.
    webhook_limit_s = app.driftless.webhook_policy.time_limit_s
    app.conf.task_annotations = {
        DELIVER_WEBHOOK: {"time_limit": webhook_limit_s, "soft_time_limit": webhook_limit_s - 5}
    }
    # Celery's signals are process-wide; both connect once however many apps are made.
    connect_task_signals()
    connect_task_context()
    connect_tracing_signals()
    return app
