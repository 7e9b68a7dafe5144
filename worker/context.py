"""The worker's runtime (shared/bootstrap.py), sized for the pool that runs its tasks."""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import Any

import redis
from celery import Celery
from celery.apps.worker import Worker as CommandLineWorker
from celery.signals import worker_init
from redis.exceptions import RedisError

from shared.bootstrap import Runtime
from shared.infra.broker import CONSUMER_POLLS
from shared.infra.config import Settings
from shared.infra.db.uow import UnitOfWork
from shared.infra.heap import freeze_startup_objects
from shared.infra.queue import INVALIDATE_MEMORY, CeleryJobQueue, Job, JobQueue
from shared.infra.runtime import Endpoints
from shared.memory.cache import MemoryCache
from shared.memory.scope import Scope

log = logging.getLogger(__name__)

# Pools whose tasks run side by side in one process, sharing its engine.
THREADED_POOLS = frozenset({"threads", "gevent", "eventlet"})
# ...of which these run them as greenlets: hundreds per process, one OS thread.
GREEN_POOLS = frozenset({"gevent", "eventlet"})
# A task holds a connection only for its transactions (milliseconds), never across the
# LLM call (seconds), so one connection serves many greenlets: 256 of them get 16.
GREENLETS_PER_CONNECTION = 16
# kombu's Redis channel opens at most 10 connections (its `max_connections`) and fails
# an 11th with MaxConnectionsError: 256 greenlets acking at once lost their acks and the
# consumer stalled (bench/worker_pool). A green worker's channel gets one per task.
KOMBU_REDIS_MAX_CONNECTIONS = 10
# A worker transaction waits this long for a row lock, and runs a statement this long,
# before it fails (and its task retries). Writers hold locks for milliseconds. The
# threads pool enforces no Celery time limit: without these, a task blocked on a row
# lock or a runaway statement would hold its thread for good.
LOCK_TIMEOUT_S = 30.0
STATEMENT_TIMEOUT_S = 60.0


class WorkerJobQueue:
    """A worker's jobs go out through its Celery app, except a memory-cache invalidation
    (R15), which the worker does itself once the transaction commits.

    An invalidation is one Redis pipeline. As a job it costs a broker send here and a
    receive, an ack and a task run on another worker: a tenth of a summary's CPU, and
    nearly every summary promotes (invalidates). When Redis refuses, the job is sent
    instead; when that fails too, the unit of work logs it and the reconciler invalidates
    the block from its memory version, as for any lost job.
    """

    def __init__(self, jobs: JobQueue, redis_client: Callable[[], redis.Redis]) -> None:
        self._jobs = jobs
        self._redis = redis_client

    def send(self, job: Job) -> None:
        if job.task == INVALIDATE_MEMORY:
            try:
                MemoryCache(self._redis()).invalidate(Scope.from_job_kwargs(**job.kwargs))
                return
            except RedisError:
                log.warning("could not invalidate the memory cache; sending the job instead")
        self._jobs.send(job)


def worker_runtime(app: Celery, settings: Settings, endpoints: Endpoints) -> Runtime:
    """The runtime of a process running this Celery app: its jobs go out through the app."""
    runtime: Runtime = Runtime(
        settings,
        endpoints=endpoints,
        make_queue=lambda built: WorkerJobQueue(
            CeleryJobQueue(app, built.fair), lambda: runtime.redis
        ),
        transaction_bounds=(LOCK_TIMEOUT_S, STATEMENT_TIMEOUT_S),
        # A worker waits on Redis as long as it must (a blocked debounce read is a retry).
        request_timeouts=False,
    )
    return runtime


def size_for_worker(
    runtime: Runtime, *, pool: str, concurrency: int, time_limit_s: float | None = None
) -> None:
    """Size the engine for the tasks that share it (before it is made).

    Each task holds at most one connection at a time (its unit of work; never during the
    LLM call). A threads pool of N gets N: fewer would make tasks queue for a connection
    and, past pool_timeout, fail, and threads are few. A green pool runs hundreds of
    tasks that each hold a connection for milliseconds: it gets one connection per
    GREENLETS_PER_CONNECTION, and a task waits for one as long as it may run at all
    (`time_limit_s`, the hard time limit that frees its slot anyway) instead of failing.
    A prefork child or a solo worker runs one task at a time.
    """
    if pool in GREEN_POOLS:
        runtime.tasks_per_process = concurrency
        needed = math.ceil(concurrency / GREENLETS_PER_CONNECTION)
        runtime.pool_size = max(runtime.settings.db_pool_size, needed)
        if time_limit_s:
            runtime.pool_timeout = max(runtime.pool_timeout, float(time_limit_s))
    elif pool in THREADED_POOLS:
        runtime.tasks_per_process = concurrency
        runtime.pool_size = max(runtime.settings.db_pool_size, concurrency)


def make_psycopg_green() -> None:
    """Let a query's wait yield to the other greenlets (psycogreen), before any connection.

    gevent's monkey-patching (celery's `-P gevent` does it before the app is imported)
    covers Python's sockets, but psycopg2 waits on PostgreSQL in C: unpatched, one slow
    query would stop every task of the process.
    """
    from psycogreen.gevent import patch_psycopg

    patch_psycopg()
    log.info("gevent pool: psycopg2 waits yield to other greenlets (psycogreen)")


def pool_name(pool_cls: Any) -> str:
    """`threads`, `prefork`, … from a pool given by alias (`-P threads`) or by class."""
    if isinstance(pool_cls, str):
        return {"thread": "threads", "processes": "prefork"}.get(pool_cls, pool_cls)
    module = str(getattr(pool_cls, "__module__", "")).rsplit(".", 1)[-1]
    return {"thread": "threads"}.get(module, module)


@worker_init.connect
def size_engine_for_worker(sender: Any = None, **_: Any) -> None:
    """Size the engine (and, for a green pool, the broker channel's connection pool) from
    the worker's pool and concurrency, before any task runs; under gevent, make psycopg2
    green first. The worker's broker connections are marked as a consumer's, whose polls
    shared/infra/broker.py's Transport keeps short."""
    app: Any = getattr(sender, "app", None)
    runtime = getattr(app, "driftless", None)
    concurrency = getattr(sender, "concurrency", None)
    if not isinstance(runtime, Runtime) or not isinstance(concurrency, int):
        return
    pool = pool_name(sender.pool_cls)
    if pool == "gevent":
        make_psycopg_green()
    # Read when the consumer connects, after this hook.
    options = {**(app.conf.broker_transport_options or {}), CONSUMER_POLLS: True}
    if pool in GREEN_POOLS:
        wanted = max(options.get("max_connections", KOMBU_REDIS_MAX_CONNECTIONS), concurrency)
        options["max_connections"] = wanted
    app.conf.broker_transport_options = options
    time_limit = getattr(getattr(app, "conf", None), "task_time_limit", None)
    size_for_worker(runtime, pool=pool, concurrency=concurrency, time_limit_s=time_limit)


@worker_init.connect
def freeze_worker_startup_objects(sender: Any = None, **_: Any) -> None:
    """The worker is built (tasks imported, pool chosen): its startup objects out of the
    collector's way (shared/infra/heap.py). Before a prefork pool forks, so its children share
    them too. Only a worker process (`celery worker`), not one a test runs in a thread."""
    if isinstance(sender, CommandLineWorker):
        log.info("startup objects frozen for the collector: %d", freeze_startup_objects())


def context_of(app: Celery) -> Runtime:
    runtime: Runtime = app.driftless
    return runtime


def unit_of_work(app: Celery) -> UnitOfWork:
    """A unit of work whose follow-up jobs go out through this same Celery app."""
    return context_of(app).unit_of_work()
