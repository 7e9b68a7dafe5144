"""One deadline per call to a tenant's server: connect, send and the whole answer, all hops.

httpx's timeouts are per operation: a server that trickles its answer a byte a second
never trips a 10 s read timeout, and holds a worker as long as it likes. The webhook
client's connections (shared/webhooks/deadline.py) and those to an org's own embeddings
server (shared/embeddings/provider.py) therefore go through `DeadlineBackend`, whose
streams give each connect, read and write at most the time left to the deadline of the
attempt in progress (`attempt_deadline`, a context variable: each thread or greenlet has
its own, and a pooled connection serves whichever attempt uses it next) and time out
when none is left.

Both httpcore stacks are served, httpx's (`httpcore`, the webhooks') and the openai
client's (`httpcore2`): the backend wraps either kind of backend and raises the timeouts
of the stack it was made for, which its client maps to its own timeout error.
"""

from __future__ import annotations

import contextvars
import ssl
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import httpcore
import httpcore2

_DEADLINE: contextvars.ContextVar[float | None] = contextvars.ContextVar(
    "attempt_deadline", default=None
)


@contextmanager
def attempt_deadline(seconds: float) -> Iterator[None]:
    """Every network operation through a `DeadlineBackend` in this block ends `seconds`
    from now."""
    token = _DEADLINE.set(time.monotonic() + seconds)
    try:
        yield
    finally:
        _DEADLINE.reset(token)


def time_left() -> float | None:
    """Seconds left to the attempt's deadline (0 when past); None outside an attempt."""
    deadline = _DEADLINE.get()
    return None if deadline is None else max(deadline - time.monotonic(), 0.0)


@dataclass(frozen=True)
class Timeouts:
    """The timeout errors of one httpcore stack, which its client maps to its own."""

    connect: type[Exception]
    read: type[Exception]
    write: type[Exception]


HTTPCORE = Timeouts(httpcore.ConnectTimeout, httpcore.ReadTimeout, httpcore.WriteTimeout)
HTTPCORE2 = Timeouts(httpcore2.ConnectTimeout, httpcore2.ReadTimeout, httpcore2.WriteTimeout)


def _capped(timeout: float | None, expired: type[Exception]) -> float | None:
    left = time_left()
    if left is None:
        return timeout
    if left <= 0:
        raise expired("the attempt's deadline has passed")
    return left if timeout is None else min(timeout, left)


class DeadlineStream(httpcore.NetworkStream, httpcore2.NetworkStream):
    """A connection whose every operation ends by the deadline of the attempt using it."""

    def __init__(self, stream: Any, timeouts: Timeouts) -> None:
        self._stream = stream
        self._timeouts = timeouts

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        data: bytes = self._stream.read(max_bytes, _capped(timeout, self._timeouts.read))
        return data

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._stream.write(buffer, _capped(timeout, self._timeouts.write))

    def close(self) -> None:
        self._stream.close()

    def start_tls(
        self, ssl_context: ssl.SSLContext, server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> DeadlineStream:  # fmt: skip
        timeout = _capped(timeout, self._timeouts.connect)
        stream = self._stream.start_tls(ssl_context, server_hostname, timeout)
        return DeadlineStream(stream, self._timeouts)

    def get_extra_info(self, info: str) -> Any:
        return self._stream.get_extra_info(info)


class DeadlineBackend(httpcore.NetworkBackend, httpcore2.NetworkBackend):
    """`backend`'s sockets (httpcore's own by default), each wrapped in a `DeadlineStream`
    that raises `timeouts` (those of the stack `backend` is of)."""

    def __init__(self, backend: Any = None, *, timeouts: Timeouts = HTTPCORE) -> None:
        self._backend = backend or httpcore.SyncBackend()
        self._timeouts = timeouts

    def connect_tcp(
        self, host: str, port: int, timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> DeadlineStream:  # fmt: skip
        timeout = _capped(timeout, self._timeouts.connect)
        stream = self._backend.connect_tcp(host, port, timeout, local_address, socket_options)
        return DeadlineStream(stream, self._timeouts)

    def connect_unix_socket(
        self, path: str, timeout: float | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> DeadlineStream:  # fmt: skip
        timeout = _capped(timeout, self._timeouts.connect)
        stream = self._backend.connect_unix_socket(path, timeout, socket_options)
        return DeadlineStream(stream, self._timeouts)

    def sleep(self, seconds: float) -> None:
        self._backend.sleep(seconds)
