"""A worker's and beat's traces (shared/infra/tracing.py): started where each process
begins to serve, before its engine is made, under the process's own service name."""

from __future__ import annotations

from typing import Any

from celery.signals import beat_init, worker_init, worker_process_init, worker_process_shutdown

from shared.infra import tracing
from worker.context import pool_name


def trace_worker(sender: Any = None, **_: Any) -> None:
    """A worker whose tasks run in this process (gevent, threads, solo). A prefork
    worker's parent runs none: each child starts its own after the fork
    (`trace_pool_process`), so no exporter's thread or channel is forked."""
    if pool_name(getattr(sender, "pool_cls", None)) != "prefork":
        tracing.start(tracing.SERVICE_WORKER)


def trace_pool_process(**_: Any) -> None:
    tracing.start(tracing.SERVICE_WORKER)


def flush_pool_process(**_: Any) -> None:
    """A prefork child leaves by os._exit (billiard), which skips the provider's atexit
    flush: the spans of its last tasks, still in the batch processor, would be lost at
    every warm shutdown or recycled child (tests/faults/test_otlp_processes_44.py)."""
    tracing.flush()


def trace_beat(**_: Any) -> None:
    """Beat's sends, each the root of the trace of the periodic job it starts."""
    tracing.start(tracing.SERVICE_BEAT)


def connect_tracing_signals() -> None:
    """Celery's signals are process-wide: connected once however many apps are made."""
    worker_init.connect(trace_worker, dispatch_uid="driftless.trace_worker")
    worker_process_init.connect(trace_pool_process, dispatch_uid="driftless.trace_pool")
    worker_process_shutdown.connect(flush_pool_process, dispatch_uid="driftless.flush_pool")
    beat_init.connect(trace_beat, dispatch_uid="driftless.trace_beat")
