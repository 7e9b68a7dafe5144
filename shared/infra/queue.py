"""Background jobs: what they are called, which queue runs them, and how they are sent.

Behind a Protocol so the domain never imports Celery: `CeleryJobQueue` sends through any
object with Celery's `send_task` (the web's producer app, the worker's own app).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Protocol

from shared.infra import tracing
from shared.infra.fair import FLEET, FairJob, FairQueue, Lane, subject_of
from shared.infra.held import HeldJobs
from shared.infra.metrics import JOBS_ENQUEUED, JOBS_SEND_FAILED


@dataclass(frozen=True)
class Job:
    """A background job: a task name and its keyword arguments (ids, never objects).

    `lane`: "bulk" for work nobody waits on (a re-evaluation campaign's topics), which an
    LLM task then sends to LLM_BULK_QUEUE; live work (every trigger, a close) keeps "live".
    `org`: whose work it is; a model job waits its org's turn (shared/infra/fair.py).
    """

    task: str
    kwargs: dict[str, Any] = field(default_factory=dict)
    countdown: float | None = None
    lane: Lane = "live"
    org: str | None = None

    def __post_init__(self) -> None:
        if self.lane == "bulk" and TASK_ROUTES.get(self.task, {}).get("queue") != LLM_QUEUE:
            raise ValueError(f"only LLM tasks have a bulk lane, not {self.task}")


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
EMBED_PENDING = "driftless.embed_pending"
EMBED_BATCH = "driftless.embed_batch"
EMBED_NEW = "driftless.embed_new"
# The ticket of a model job waiting its org's turn: "run the next job of this lane".
NEXT_MODEL_JOB = "driftless.next_model_job"
# The jobs that call the model, and so wait in their org's list rather than in the broker.
MODEL_TASKS = frozenset({SUMMARIZE_TOPIC, EVALUATE_TOPIC})

LLM_QUEUE = "llm"
# Live work before bulk work: the LLM jobs of a re-evaluation campaign wait in a list of
# their own, which every LLM worker consumes after `llm`'s in turn. kombu's Redis
# transport (5.7, kombu/transport/redis.py) fetches with one BRPOP over the worker's
# queues (Channel._brpop_start, in `_queue_cycle` order); Redis pops from the first of
# them that holds a job, and Channel._brpop_read then rotates that queue to the end of
# the cycle (round_robin_cycle.rotate). So while both lists hold jobs the fetches
# alternate, and a live job waits behind at most one bulk fetch, never the campaign's
# backlog. With acks_late and a prefetch multiplier of 1 (worker/app.py) a worker holds
# no more jobs than it has slots, and fetches again only when one frees: nothing bulk
# is queued up inside the worker ahead of a live job either.
LLM_BULK_QUEUE = "llm_bulk"
FAST_QUEUE = "fast"
# Deliveries wait on other people's servers: a queue of their own, so that a slow
# receiver holds webhook slots, never an evaluation's or a debounce's.
WEBHOOK_QUEUE = "webhooks"
# Vectors (shared/embeddings/): calls to an embeddings server, never behind a summary's
# model call. Beat's planner and the per-org jobs of new texts it sends go to `embeddings`;
# a backfill's (and the reconciler's) batches to `embeddings_bulk`, which the same workers
# fetch in turn with it as `llm_bulk` with `llm` (above), so a backfill never holds up
# new texts.
EMBEDDINGS_QUEUE = "embeddings"
EMBEDDINGS_BULK_QUEUE = "embeddings_bulk"
TASK_ROUTES = {
    SUMMARIZE_TOPIC: {"queue": LLM_QUEUE},
    EVALUATE_TOPIC: {"queue": LLM_QUEUE},
    NEXT_MODEL_JOB: {"queue": LLM_QUEUE},
    FIRE_DEBOUNCE: {"queue": FAST_QUEUE},
    SWEEP_IDLE: {"queue": FAST_QUEUE},
    RECONCILE: {"queue": FAST_QUEUE},
    INVALIDATE_MEMORY: {"queue": FAST_QUEUE},
    PURGE_IDLE_SESSIONS: {"queue": FAST_QUEUE},
    DELIVER_WEBHOOK: {"queue": WEBHOOK_QUEUE},
    DISPATCH_WEBHOOKS: {"queue": FAST_QUEUE},
    ADVANCE_REEVALUATIONS: {"queue": FAST_QUEUE},
    START_STALE_REEVALUATION: {"queue": FAST_QUEUE},
    EMBED_PENDING: {"queue": EMBEDDINGS_QUEUE},
    EMBED_NEW: {"queue": EMBEDDINGS_QUEUE},
    EMBED_BATCH: {"queue": EMBEDDINGS_BULK_QUEUE},
}
# Every queue a worker has to consume: the routes', and the bulk lane of the LLM tasks.
QUEUES = (
    LLM_QUEUE, LLM_BULK_QUEUE, FAST_QUEUE, WEBHOOK_QUEUE, EMBEDDINGS_QUEUE, EMBEDDINGS_BULK_QUEUE
)  # fmt: skip
# The `lane` label of a queue's jobs in driftless_job_wait_seconds (a bounded set).
LANE_OF_QUEUE = {LLM_QUEUE: "live", LLM_BULK_QUEUE: "bulk", FAST_QUEUE: "fast",
                 WEBHOOK_QUEUE: "webhooks", EMBEDDINGS_QUEUE: "embeddings",
                 EMBEDDINGS_BULK_QUEUE: "embeddings_bulk"}  # fmt: skip

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
        self,
        name: str,
        *,
        kwargs: dict[str, Any],
        countdown: float | None,
        headers: Any,
        **options: Any,
    ) -> Any: ...


# The span of a job handed on (docs/contract.md, "Traces"): to its org's list and a ticket
# (`driftless.job.via` "ring"), or to the broker as itself ("broker").
ENQUEUE_SPAN = "driftless.enqueue"


def _enqueue_attributes(job: Job, *, fair: bool) -> dict[str, Any]:
    attributes: dict[str, Any] = {
        "driftless.job.task": job.task,
        "driftless.job.lane": job.lane,
        "driftless.job.via": "ring" if fair else "broker",
    }
    if job.org is not None:
        attributes[tracing.ORG_ID] = job.org
    if job.countdown:
        attributes["driftless.job.countdown_s"] = float(job.countdown)
    return attributes


def ticket(lane: Lane) -> Job:
    """The broker's half of a model job waiting its org's turn, in the lane's queue."""
    return Job(NEXT_MODEL_JOB, {"lane": lane}, lane=lane)


class CeleryJobQueue:
    """The JobQueue of every process: sends by task name through a Celery app.

    With `fair`, a model job due now waits in its org's list and the broker gets its
    ticket (shared/infra/fair.py); a job with a countdown (a retry's backoff) and every
    other job go to the broker as they are, a model job marked held until it should
    have started (shared/infra/held.py).
    """

    def __init__(self, app: TaskSender, fair: FairQueue | None = None) -> None:
        self._app = app
        self._fair = fair
        self._held = None if fair is None else HeldJobs(fair.client)

    def send(self, job: Job) -> None:
        fair = self._fair if job.task in MODEL_TASKS and not job.countdown else None
        with tracing.tracer.start_as_current_span(
            ENQUEUE_SPAN, attributes=_enqueue_attributes(job, fair=fair is not None)
        ):
            try:
                if fair is not None:
                    waiting = FairJob(job.task, job.kwargs, job.org or FLEET,
                                      trace=tracing.carrier())  # fmt: skip
                    fair.push(job.lane, waiting)
                    self._send(ticket(job.lane))
                else:
                    self._send(job)
                    if self._held is not None and job.task in MODEL_TASKS and job.countdown:
                        self._held.sent_delayed(subject_of(job.task, job.kwargs), job.countdown)
            except Exception:
                JOBS_SEND_FAILED.labels(job.task).inc()
                raise
        JOBS_ENQUEUED.labels(job.task).inc()

    def _send(self, job: Job) -> None:  # Celery's publish span is the enqueue's child
        # Live jobs go where TASK_ROUTES sends their task; only the bulk lane overrides it.
        options = {"queue": LLM_BULK_QUEUE} if job.lane == "bulk" else {}
        self._app.send_task(
            job.task,
            kwargs=job.kwargs,
            countdown=job.countdown,
            headers=job_headers(job.countdown),
            **options,
        )
