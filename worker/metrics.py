"""The worker's Prometheus metrics: jobs by task, queue lag and depth, and the exporter.

A prefork worker runs its tasks in child processes, so the counts live in
prometheus-client's multiprocess files (PROMETHEUS_MULTIPROC_DIR, which worker/main.py
sets before prometheus_client is first imported) and the worker's main process serves
their sum on DRIFTLESS_WORKER_METRICS_PORT. The threads and solo pools are one process
and work the same way. Beat never serves: the server starts on `celeryd_init`, which
only `celery worker` sends.

The exporter also reads each queue's length from the broker at scrape time (a gauge
nothing has to keep up to date). Counters whose label values are known (every task,
every kind of reconciled work, every fire status) start each series at 0, as
shared.infra.metrics explains: a series that appears with its first failure at 1 shows
no increase, so an alert on `increase()` would miss it.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import fields
from typing import Any

import redis
from celery import Task
from celery.signals import (
    celeryd_init,
    task_failure,
    task_postrun,
    task_prerun,
    task_retry,
    task_success,
    worker_process_shutdown,
)
from prometheus_client import Counter, Histogram, multiprocess
from prometheus_client import start_http_server as _start_http_server
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector
from sqlalchemy import create_engine
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.pool import NullPool

from shared.infra.broker import REDIS_SCHEMES
from shared.infra.db.engine import bound_transactions, make_session_factory, sqlalchemy_url
from shared.infra.db.uow import UnitOfWork
from shared.infra.metrics import JOBS_ENQUEUED, JOBS_SEND_FAILED, at_zero
from shared.infra.metrics_export import multiprocess_registry
from shared.infra.queue import (
    DUE_AT_HEADER,
    FIRE_DEBOUNCE,
    LANE_OF_QUEUE,
    NEXT_MODEL_JOB,
    QUEUES,
    RECONCILE,
    TASK_ROUTES,
    RecordingQueue,
)
from shared.infra.redis_url import redis_client
from shared.reconcile.service import Reconciled
from shared.reevaluations.pump import running_totals
from worker.embeddings_metrics import embeddings_lag_collector
from worker.fair_metrics import FairQueueCollector

log = logging.getLogger(__name__)

TASKS = [(task,) for task in TASK_ROUTES]
JOBS_SUCCEEDED = at_zero(
    Counter("driftless_jobs_succeeded_total", "Tasks that returned", ["task"]), TASKS
)
JOBS_FAILED = at_zero(
    Counter(
        "driftless_jobs_failed_total",
        "Tasks that raised (retries exhausted, or not retryable)",
        ["task"],
    ),
    TASKS,
)
JOBS_RETRIED = at_zero(
    Counter("driftless_jobs_retried_total", "Task runs that asked a retry", ["task"]), TASKS
)
TASK_SECONDS = Histogram(
    "driftless_task_seconds",
    "Run time of a task, start to finish",
    ["task"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300),
)
WAIT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600)
QUEUE_LAG = Histogram(
    "driftless_queue_lag_seconds",
    "From when a job became due (enqueued + countdown) to when a worker started it",
    ["queue"],
    buckets=WAIT_BUCKETS,
)
# The same wait by lane: live LLM work (`llm`) against bulk (`llm_bulk`, a campaign's),
# and the other queues under their own names. The live lane's is what a user waits.
JOB_WAIT = Histogram(
    "driftless_job_wait_seconds",
    "From when a job became due to when a worker started it, by lane (live, bulk, fast, webhooks)",
    ["lane"],
    buckets=WAIT_BUCKETS,
)
FIRE_STATUSES = ("fire", "wait", "stale")  # shared.triggers.service.Fired
DEBOUNCE_FIRES = at_zero(
    Counter(
        "driftless_debounce_fires_total",
        "Fire jobs of a trigger burst by result (fire: evaluation sent; wait: re-scheduled;"
        " stale: another job already fired)",
        ["status"],
    ),
    [(status,) for status in FIRE_STATUSES],
)
RECONCILE_RECOVERED = at_zero(
    Counter(
        "driftless_reconcile_recovered_total",
        "Lost work the reconciler sent again, by kind (summaries and evaluations nothing"
        " held, stale memory_caches invalidated, vectors, tickets of model jobs that lost"
        " theirs)",
        ["kind"],
    ),
    [*((kind.name,) for kind in fields(Reconciled)), ("tickets",)],
)
QUEUE_DEPTH = "driftless_queue_depth"
# Short: a scrape (and the liveness probe, which is one) must answer while Redis hangs.
DEPTH_TIMEOUT_S = 1.0


# --- task signals ---------------------------------------------------------------------

_started: dict[str, float] = {}  # task id -> perf_counter at task_prerun
# task id -> the job a ticket runs (worker/fair.py): its run counts under that job's
# name, so a summary is a summary whichever way it reached the worker.
_serving: dict[str, str] = {}


def serving(task: Task, name: str) -> None:
    """The running task (a ticket) runs the job `name`: count it under that name."""
    if task.request.id:
        _serving[task.request.id] = name


def _name_of(task: Task) -> str:
    return _serving.get(task.request.id, task.name) if task.request.id else task.name


def _header(task: Task, name: str) -> float | None:
    request = task.request
    value = (getattr(request, "headers", None) or {}).get(name, getattr(request, name, None))
    try:
        return float(value) if value is not None else None
    except (TypeError, ValueError):  # someone else's message: no lag to measure
        return None


def _queue_of(task: Task) -> str:
    delivery_info = getattr(task.request, "delivery_info", None) or {}
    return str(delivery_info.get("routing_key") or delivery_info.get("exchange") or "unknown")


def _on_prerun(task_id: str, task: Task, **_: Any) -> None:
    _started[task_id] = time.perf_counter()
    # A retry carries its first message's headers along; its wait is the backoff, not lag.
    # A ticket's lane wait is its job's, from when the job was pushed (worker/fair.py).
    if task.request.retries:
        return
    due_at = _header(task, DUE_AT_HEADER)
    if due_at is not None:
        # Clocks of sender and worker may differ a little; never report negative lag.
        waited, queue = max(0.0, time.time() - due_at), _queue_of(task)
        QUEUE_LAG.labels(queue).observe(waited)
        if task.name != NEXT_MODEL_JOB:
            JOB_WAIT.labels(LANE_OF_QUEUE.get(queue, "unknown")).observe(waited)


def _on_postrun(task_id: str, task: Task, retval: Any = None, **_: Any) -> None:
    started = _started.pop(task_id, None)
    if started is not None:
        TASK_SECONDS.labels(_name_of(task)).observe(time.perf_counter() - started)
    _serving.pop(task_id, None)
    if task.name == FIRE_DEBOUNCE and isinstance(retval, str):
        DEBOUNCE_FIRES.labels(retval).inc()
    elif task.name == RECONCILE and isinstance(retval, dict):
        for kind, count in retval.items():
            RECONCILE_RECOVERED.labels(kind).inc(count)


def _on_success(sender: Task, **_: Any) -> None:
    JOBS_SUCCEEDED.labels(_name_of(sender)).inc()


def _on_failure(sender: Task, **_: Any) -> None:
    JOBS_FAILED.labels(_name_of(sender)).inc()


def _on_retry(sender: Task, **_: Any) -> None:
    JOBS_RETRIED.labels(_name_of(sender)).inc()


def connect_task_signals() -> None:
    """Count every task this process runs (idempotent: signals are global, apps are many)."""
    task_prerun.connect(_on_prerun, weak=False, dispatch_uid="driftless-metrics-prerun")
    task_postrun.connect(_on_postrun, weak=False, dispatch_uid="driftless-metrics-postrun")
    task_success.connect(_on_success, weak=False, dispatch_uid="driftless-metrics-success")
    task_failure.connect(_on_failure, weak=False, dispatch_uid="driftless-metrics-failure")
    task_retry.connect(_on_retry, weak=False, dispatch_uid="driftless-metrics-retry")


def start_at_zero() -> None:
    """Create the series of the shared job counters, at 0, for every known task."""
    for counter in (JOBS_ENQUEUED, JOBS_SEND_FAILED):
        at_zero(counter, TASKS)


# --- queue depth, read from the broker at scrape time -----------------------------------


class QueueDepthCollector(Collector):
    """Jobs waiting in each queue: the length of its Redis list, as KEDA reads it.

    Celery's Redis transport keeps a queue as a list named after it. Jobs a worker has
    reserved or is running (countdown jobs included) are not in it; the lag histogram
    shows how long jobs waited. Every worker reports every queue, so take the max.
    """

    def __init__(self, client: redis.Redis, queues: Sequence[str]) -> None:
        self._client = client
        self._queues = list(queues)
        self._failing = False

    def describe(self) -> Iterable[Metric]:
        # What registering needs to know, without asking Redis at the worker's start.
        return [self._family()]

    def collect(self) -> Iterable[Metric]:
        try:
            pipe = self._client.pipeline(transaction=False)
            for queue in self._queues:
                pipe.llen(queue)
            depths = pipe.execute()
        except redis.RedisError as exc:
            # No gauge rather than a wrong one; the rest of the scrape still answers.
            if not self._failing:
                log.warning("queue depth unavailable: %s", exc)
            self._failing = True
            return []
        self._failing = False
        gauge = self._family()
        for queue, depth in zip(self._queues, depths, strict=True):
            gauge.add_metric([queue], float(depth))
        return [gauge]

    @staticmethod
    def _family() -> GaugeMetricFamily:
        return GaugeMetricFamily(
            QUEUE_DEPTH, "Jobs waiting in the broker's queue (not yet reserved)", labels=["queue"]
        )


def queue_depth_collector(broker_url: str) -> QueueDepthCollector | None:
    """The collector of a Redis broker's queues; None for another broker (no depth)."""
    if not broker_url.startswith(REDIS_SCHEMES):
        return None
    client = redis_client(
        broker_url, socket_timeout=DEPTH_TIMEOUT_S, socket_connect_timeout=DEPTH_TIMEOUT_S
    )
    return QueueDepthCollector(client, sorted(QUEUES))


# --- re-evaluation campaigns, read from PostgreSQL at scrape time ----------------------

REEVALUATIONS_RUNNING = "driftless_reevaluations_running"
REEVALUATION_TOPICS_PENDING = "driftless_reevaluation_topics_pending"


class ReevaluationCollector(Collector):
    """Running re-evaluation campaigns and their topics not settled yet, as the database
    has them: every worker reports the same numbers (take the max), whichever ran a tick."""

    def __init__(self, read: Callable[[], tuple[int, int]]) -> None:
        self._read = read
        self._failing = False

    def describe(self) -> Iterable[Metric]:
        return list(self._families())

    def collect(self) -> Iterable[Metric]:
        try:
            running, pending = self._read()
        except SQLAlchemyError as exc:
            if not self._failing:
                log.warning("re-evaluation gauges unavailable: %s", exc)
            self._failing = True
            return []
        self._failing = False
        campaigns, topics = self._families()
        campaigns.add_metric([], float(running))
        topics.add_metric([], float(pending))
        return [campaigns, topics]

    @staticmethod
    def _families() -> tuple[GaugeMetricFamily, GaugeMetricFamily]:
        return (
            GaugeMetricFamily(REEVALUATIONS_RUNNING, "Re-evaluation campaigns running"),
            GaugeMetricFamily(
                REEVALUATION_TOPICS_PENDING,
                "Topics of running re-evaluation campaigns not settled yet (done or failed)",
            ),
        )


def reevaluation_collector(database_url: str) -> ReevaluationCollector:
    """The collector, on a connection of its own for each scrape: the worker's main process
    keeps none open for a prefork child to inherit."""
    # A scrape answers while PostgreSQL hangs, as the queue depth does while Redis does;
    # bounded per transaction, as PgBouncer in transaction mode wants (shared/infra/db/engine.py).
    engine = create_engine(
        sqlalchemy_url(database_url), poolclass=NullPool, connect_args={"connect_timeout": 1}
    )
    bound_transactions(engine, lock_timeout_s=DEPTH_TIMEOUT_S, statement_timeout_s=DEPTH_TIMEOUT_S)
    factory = make_session_factory(engine)

    def read() -> tuple[int, int]:
        with UnitOfWork(factory, RecordingQueue()) as uow:
            return running_totals(uow=uow)

    return ReevaluationCollector(read)


# --- the exporter (the worker's main process only) -------------------------------------


def start_exporter(
    port: int, *, addr: str = "0.0.0.0", collectors: Iterable[Collector] = ()
) -> bool:
    """Serve the worker's metrics (and `collectors`) on `port`; False (and a log line)
    when it cannot."""
    if port == 0:
        return False
    if not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        log.error("worker metrics are off: PROMETHEUS_MULTIPROC_DIR is not set")
        return False
    registry = multiprocess_registry()
    for collector in collectors:
        registry.register(collector)
    try:
        _start_http_server(port, addr=addr, registry=registry)
    except OSError as exc:
        # Metrics are not worth a dead worker: two workers on one host share a port.
        log.error("worker metrics could not listen on port %d: %s", port, exc)
        return False
    log.info(
        "worker metrics on http://%s:%d/metrics (PROMETHEUS_MULTIPROC_DIR=%s)",
        addr, port, os.environ["PROMETHEUS_MULTIPROC_DIR"],
    )  # fmt: skip
    return True


def _on_worker_init(sender: Any = None, instance: Any = None, **_: Any) -> None:
    runtime = instance.app.driftless
    if runtime.settings.worker_metrics_port == 0:
        return
    start_at_zero()
    depth = queue_depth_collector(runtime.endpoints.broker_url)
    state = redis_client(
        runtime.endpoints.redis_url, socket_timeout=DEPTH_TIMEOUT_S,
        socket_connect_timeout=DEPTH_TIMEOUT_S,
    )  # fmt: skip
    collectors: list[Collector] = [
        reevaluation_collector(runtime.endpoints.database_url),
        FairQueueCollector(runtime.fair),
        embeddings_lag_collector(state, runtime.settings.embeddings_model),
    ]
    start_exporter(
        runtime.settings.worker_metrics_port, collectors=[*collectors, *([depth] if depth else [])]
    )


def _on_process_shutdown(pid: int | None = None, **_: Any) -> None:
    # Live gauges of a dead child must go; its counters stay in the sum, as they should.
    if pid is not None and os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        multiprocess.mark_process_dead(pid)


def connect_exporter_signals() -> None:
    """Start the exporter with `celery worker` (never with beat); tidy after dead children."""
    celeryd_init.connect(_on_worker_init, weak=False, dispatch_uid="driftless-metrics-exporter")
    worker_process_shutdown.connect(
        _on_process_shutdown, weak=False, dispatch_uid="driftless-metrics-process-shutdown"
    )
