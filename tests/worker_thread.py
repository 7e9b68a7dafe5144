"""A real Celery worker running in a thread of the test process (never eager mode)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from celery import Celery
from celery.contrib.testing.worker import start_worker
from kombu.asynchronous import set_event_loop


@contextmanager
def worker_thread(app: Celery, *, concurrency: int = 4) -> Iterator[Any]:
    """Consume `app`'s queues in a thread until the block ends.

    The threads pool runs several jobs at once, as production does. There is no ping
    check: it needs a result backend, which driftless does not use.

    Celery's Hub step reuses the process's kombu event loop when one is set. A worker
    started after another (or beside it) would inherit that loop, closed or busy, so
    each gets a fresh one. Celery still keeps some worker state in module globals
    (celery.worker.state), so fixtures must not keep two of these alive at once.
    """
    set_event_loop(None)
    with start_worker(
        app,
        pool="threads",
        concurrency=concurrency,
        perform_ping_check=False,
        shutdown_timeout=30,
    ) as worker:
        yield worker
