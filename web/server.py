"""The web's gunicorn worker: gevent, with every keep-alive connection taking its turn.

gunicorn's gevent worker serves a keep-alive connection in one greenlet that loops:
read the next request, answer it, read again. A read only yields to the other greenlets
when the socket has nothing to read, so a client that sends its next request before the
answer has left (a pipelining or simply fast client, one tenant's import loop) is served
again and again while every other connection of the process waits. Measured with
`ab -k -c 32` against `/healthz` on one process: p50 1 ms but p99 789 ms and 2.1 s at
worst, the mean connection starved behind the fast ones; yielding after each answer:
p99 30 ms, worst 42 ms, at 8 % less throughput (docs/operations.md, "Fair turns").

A worker told to stop ends its open event streams first. The stock worker waits for
its open connections up to gunicorn's graceful timeout (30 s) and then cuts them, so one
open stream held a stopping worker that long (`driftless up` SIGKILLed it after its own
10 s) and its client saw a dropped connection. Now each stream sends `event: end` with
`{"reason": "shutdown"}` and its response ends; its connection closes after it (the
stock loop would wait `--keep-alive` for another request), and the worker exits as soon
as its connections are gone: on SIGTERM (a graceful stop) and on SIGINT or SIGQUIT (a
quick one, which waits at most `QUIT_WAIT_S` for the streams to say goodbye).

A response leaves in one send: gunicorn writes its header block and its body in two
(`sendall` each, a getsockopt and a sendto in gevent), and on this project's hosts a
loopback send is the dearest call of a message post (py-spy, [4.2]). The worker hands
the response a socket that holds the header block until the body's first bytes, or the
end of the request, whichever comes first.

Only this module is imported by gunicorn's master (it loads the worker class before it
forks); the worker monkey-patches the standard library in its own process, as the
stock class does.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from types import FrameType
from typing import Any

import gevent
from gunicorn.workers.ggevent import GeventWorker

# A quick stop (SIGINT, SIGQUIT) gives the streams this long to send their `end`.
QUIT_WAIT_S = 1.0
SHUTDOWN = "shutdown"


class OneSendResponses:
    """A client socket whose next header block waits for the first bytes after it, so
    that a response and its headers go in one `sendall`; anything else done with the
    socket (sendfile, shutdown, close, a timeout) sends what waits first."""

    def __init__(self, sock: Any) -> None:
        self._sock = sock
        self._held = b""

    def sendall(self, data: bytes) -> None:
        if self._held:
            data, self._held = self._held + data, b""
        elif data.startswith(b"HTTP/") and data.endswith(b"\r\n\r\n"):
            self._held = bytes(data)  # gunicorn's send_headers: the body comes next
            return
        self._sock.sendall(data)

    def flush(self) -> None:
        if self._held:
            held, self._held = self._held, b""
            self._sock.sendall(held)

    def __getattr__(self, name: str) -> Any:
        self.flush()
        return getattr(self._sock, name)


class FairGeventWorker(GeventWorker):
    """The stock gevent worker, yielding to the process's other greenlets after each
    request, so the requests of every connection run in turn, and ending its event
    streams when it stops."""

    def handle_request(self, listener_name: Any, req: Any, sock: Any, addr: Any) -> Any:
        responses = OneSendResponses(sock)
        try:
            try:
                answered = super().handle_request(listener_name, req, responses, addr)
            finally:
                responses.flush()  # a response without a body (204, HEAD): its headers
        finally:
            # Back of the queue: the greenlets whose requests arrived meanwhile run first.
            try:
                gevent.sleep(0)
            except gevent.GreenletExit:
                # Killed at shutdown between two requests: close this connection (how
                # gunicorn's loop ends one), rather than let its error handler write a
                # 500 after a whole response.
                raise StopIteration from None
        if not self.alive:
            # Stopping: close the connection now (gunicorn's own loop only closes those
            # whose request began after the stop) rather than wait for another request.
            raise StopIteration
        return answered

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        super().handle_exit(sig, frame)  # stop accepting; wait for open connections
        # Out of the signal handler, which may run in the hub, where nothing may block.
        gevent.spawn(_end_streams)

    def handle_quit(self, sig: int, frame: FrameType | None) -> None:
        gevent.spawn(self._quit, sig, frame)

    def _quit(self, sig: int, frame: FrameType | None) -> None:
        self.alive = False
        open_streams = _end_streams()
        deadline = time.monotonic() + QUIT_WAIT_S
        while open_streams() and time.monotonic() < deadline:
            gevent.sleep(0.02)
        super().handle_quit(sig, frame)  # exits the process


def _end_streams() -> Callable[[], int]:
    """End this process's event streams; returns how to count those still open."""
    # Imported here, not at the top: the master imports this module before it forks and
    # before gevent patches the standard library, and must not import Redis's client.
    from shared.infra import live

    live.end_all(SHUTDOWN)
    return live.listening
