"""The worker's runtime (shared/bootstrap.py), sized for the pool that runs its tasks."""

from __future__ import annotations

from typing import Any

from celery import Celery
from celery.signals import worker_init

from shared.bootstrap import Runtime
from shared.config import Settings
from shared.db.uow import UnitOfWork
from shared.queue import CeleryJobQueue
from shared.runtime import Endpoints

# Pools whose tasks run side by side in one process, sharing its engine.
THREADED_POOLS = frozenset({"threads", "gevent", "eventlet"})
# A worker transaction waits this long for a row lock, and runs a statement this long,
# before it fails (and its task retries). Writers hold locks for milliseconds. The
# threads pool enforces no Celery time limit: without these, a task blocked on a row
# lock or a runaway statement would hold its thread for good.
LOCK_TIMEOUT_S = 30.0
STATEMENT_TIMEOUT_S = 60.0


def worker_runtime(app: Celery, settings: Settings, endpoints: Endpoints) -> Runtime:
    """The runtime of a process running this Celery app: its jobs go out through the app."""
    return Runtime(
        settings,
        endpoints=endpoints,
        queue=CeleryJobQueue(app),
        transaction_bounds=(LOCK_TIMEOUT_S, STATEMENT_TIMEOUT_S),
        # A worker waits on Redis as long as it must (a blocked debounce read is a retry).
        request_timeouts=False,
    )


def size_for_worker(runtime: Runtime, *, pool: str, concurrency: int) -> None:
    """Give the engine a connection per task that may hold one at once (before it is made).

    Each task holds at most one connection at a time (its unit of work; never during the
    LLM call), so a threads pool of N needs N: fewer would make tasks queue for a
    connection and, past pool_timeout, fail. A prefork child or a solo worker runs one
    task at a time.
    """
    if pool in THREADED_POOLS:
        runtime.tasks_per_process = concurrency
        runtime.pool_size = max(runtime.settings.db_pool_size, concurrency)


def pool_name(pool_cls: Any) -> str:
    """`threads`, `prefork`, … from a pool given by alias (`-P threads`) or by class."""
    if isinstance(pool_cls, str):
        return {"thread": "threads", "processes": "prefork"}.get(pool_cls, pool_cls)
    module = str(getattr(pool_cls, "__module__", "")).rsplit(".", 1)[-1]
    return {"thread": "threads"}.get(module, module)


@worker_init.connect
def size_engine_for_worker(sender: Any = None, **_: Any) -> None:
    """Size the engine from the worker's pool and concurrency, before any task runs."""
    runtime = getattr(getattr(sender, "app", None), "driftless", None)
    concurrency = getattr(sender, "concurrency", None)
    if isinstance(runtime, Runtime) and isinstance(concurrency, int):
        size_for_worker(runtime, pool=pool_name(sender.pool_cls), concurrency=concurrency)


def context_of(app: Celery) -> Runtime:
    runtime: Runtime = app.driftless
    return runtime


def unit_of_work(app: Celery) -> UnitOfWork:
    """A unit of work whose follow-up jobs go out through this same Celery app."""
    return context_of(app).unit_of_work()
