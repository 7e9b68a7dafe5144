"""Background jobs: what they are called, which queue runs them, and how they are sent.

Behind a Protocol so the domain never imports Celery: `CeleryJobQueue` sends through any
object with Celery's `send_task` (the web's producer app, the worker's own app).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Protocol

from shared.infra.metrics import JOBS_ENQUEUED, JOBS_SEND_FAILED


@dataclass(frozen=True)
class Job:
    """A background job: a task name and its keyword arguments (ids, never objects)."""

    task: str
    kwargs: dict[str, Any] = field(default_factory=dict)
    countdown: float | None = None


class JobQueue(Protocol):
    def send(self, job: Job) -> None:
        """Hand the job to the broker; raises if the broker cannot take it."""


class RecordingQueue:
    """An in-memory JobQueue for unit tests and dry runs."""

    def __init__(self) -> None:
        self.sent: list[Job] = []

    def send(self, job: Job) -> None:
        self.sent.append(job)


# Task names are the contract between web and worker; both import them from here, and
# route by name: the web sends by name and never imports task code.
SUMMARIZE_TOPIC = "driftless.summarize_topic"
RECONCILE = "driftless.reconcile"
INVALIDATE_MEMORY = "driftless.invalidate_memory"
EVALUATE_TOPIC = "driftless.evaluate_topic"
FIRE_DEBOUNCE = "driftless.fire_debounce"
SWEEP_IDLE = "driftless.sweep_idle"
PURGE_IDLE_SESSIONS = "driftless.purge_idle_sessions"
DELIVER_WEBHOOK = "driftless.deliver_webhook"
DISPATCH_WEBHOOKS = "driftless.dispatch_webhooks"
ADVANCE_REEVALUATIONS = "driftless.advance_reevaluations"
START_STALE_REEVALUATION = "driftless.start_stale_reevaluation"

LLM_QUEUE = "llm"
FAST_QUEUE = "fast"
# Deliveries wait on other people's servers: a queue of their own, so that a slow
# receiver holds webhook slots, never an evaluation's or a debounce's.
WEBHOOK_QUEUE = "webhooks"
TASK_ROUTES = {
    SUMMARIZE_TOPIC: {"queue": LLM_QUEUE},
    EVALUATE_TOPIC: {"queue": LLM_QUEUE},
    FIRE_DEBOUNCE: {"queue": FAST_QUEUE},
    SWEEP_IDLE: {"queue": FAST_QUEUE},
    RECONCILE: {"queue": FAST_QUEUE},
    INVALIDATE_MEMORY: {"queue": FAST_QUEUE},
    PURGE_IDLE_SESSIONS: {"queue": FAST_QUEUE},
    DELIVER_WEBHOOK: {"queue": WEBHOOK_QUEUE},
    DISPATCH_WEBHOOKS: {"queue": FAST_QUEUE},
    ADVANCE_REEVALUATIONS: {"queue": FAST_QUEUE},
    START_STALE_REEVALUATION: {"queue": FAST_QUEUE},
}

# Custom message headers: when the job was handed to the broker, and when it became due
# (that plus its countdown). The worker measures queue lag from the latter.
ENQUEUED_AT_HEADER = "driftless_enqueued_at"
DUE_AT_HEADER = "driftless_due_at"


def job_headers(countdown: float | None) -> dict[str, float]:
    """The headers a sent job carries (wall-clock seconds). Beat's periodic jobs carry
    none, so they are not in the lag histogram."""
    enqueued_at = time.time()
    return {ENQUEUED_AT_HEADER: enqueued_at, DUE_AT_HEADER: enqueued_at + (countdown or 0.0)}


class TaskSender(Protocol):
    """What CeleryJobQueue needs of a Celery app."""

    def send_task(
        self, name: str, *, kwargs: dict[str, Any], countdown: float | None, headers: Any
    ) -> Any: ...


class CeleryJobQueue:
    """The JobQueue of every process: sends by task name through a Celery app."""

    def __init__(self, app: TaskSender) -> None:
        self._app = app

    def send(self, job: Job) -> None:
        try:
            self._app.send_task(
                job.task,
                kwargs=job.kwargs,
                countdown=job.countdown,
                headers=job_headers(job.countdown),
            )
        except Exception:
            JOBS_SEND_FAILED.labels(job.task).inc()
            raise
        JOBS_ENQUEUED.labels(job.task).inc()
