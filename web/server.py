"""The web's gunicorn worker: gevent, with every keep-alive connection taking its turn.

gunicorn's gevent worker serves a keep-alive connection in one greenlet that loops:
read the next request, answer it, read again. A read only yields to the other greenlets
when the socket has nothing to read, so a client that sends its next request before the
answer has left (a pipelining or simply fast client, one tenant's import loop) is served
again and again while every other connection of the process waits. Measured with
`ab -k -c 32` against `/healthz` on one process: p50 1 ms but p99 789 ms and 2.1 s at
worst, the mean connection starved behind the fast ones; yielding after each answer:
p99 30 ms, worst 42 ms, at 8 % less throughput (docs/operations.md, "Fair turns").

Only this module is imported by gunicorn's master (it loads the worker class before it
forks); the worker monkey-patches the standard library in its own process, as the
stock class does.
"""

from __future__ import annotations

from typing import Any

import gevent
from gunicorn.workers.ggevent import GeventWorker


class FairGeventWorker(GeventWorker):
    """The stock gevent worker, yielding to the process's other greenlets after each
    request, so the requests of every connection run in turn."""

    def handle_request(self, *args: Any) -> Any:
        try:
            return super().handle_request(*args)
        finally:
            # Back of the queue: the greenlets whose requests arrived meanwhile run first.
            try:
                gevent.sleep(0)
            except gevent.GreenletExit:
                # Killed at shutdown between two requests: close this connection (how
                # gunicorn's loop ends one), rather than let its error handler write a
                # 500 after a whole response.
                raise StopIteration from None
