"""One deadline per webhook attempt: connect, send and the answer's headers, all hops.

httpx's timeouts are per operation: a receiver that trickles its answer a byte a second
never trips a 10 s read timeout, and holds a worker as long as it likes. The webhook
client's connections therefore go through `DeadlineBackend`, whose streams give each
connect, read and write at most the time left to the deadline of the attempt in
progress (`attempt_deadline`, a context variable: each thread or greenlet has its own,
and a pooled connection serves whichever attempt uses it next) and time out when none
is left.
"""

from __future__ import annotations

import contextvars
import ssl
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import httpcore
import httpx

_DEADLINE: contextvars.ContextVar[float | None] = contextvars.ContextVar(
    "webhook_attempt_deadline", default=None
)


@contextmanager
def attempt_deadline(seconds: float) -> Iterator[None]:
    """Every network operation of the webhook client in this block ends `seconds` from now."""
    token = _DEADLINE.set(time.monotonic() + seconds)
    try:
        yield
    finally:
        _DEADLINE.reset(token)


def time_left() -> float | None:
    """Seconds left to the attempt's deadline (0 when past); None outside an attempt."""
    deadline = _DEADLINE.get()
    return None if deadline is None else max(deadline - time.monotonic(), 0.0)


def _capped(timeout: float | None, expired: type[httpcore.TimeoutException]) -> float | None:
    left = time_left()
    if left is None:
        return timeout
    if left <= 0:
        raise expired("the attempt's deadline has passed")
    return left if timeout is None else min(timeout, left)


class DeadlineStream(httpcore.NetworkStream):
    """A connection whose every operation ends by the deadline of the attempt using it."""

    def __init__(self, stream: httpcore.NetworkStream) -> None:
        self._stream = stream

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._stream.read(max_bytes, _capped(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._stream.write(buffer, _capped(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._stream.close()

    def start_tls(
        self, ssl_context: ssl.SSLContext, server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.NetworkStream:  # fmt: skip
        timeout = _capped(timeout, httpcore.ConnectTimeout)
        return DeadlineStream(self._stream.start_tls(ssl_context, server_hostname, timeout))

    def get_extra_info(self, info: str) -> Any:
        return self._stream.get_extra_info(info)


class DeadlineBackend(httpcore.NetworkBackend):
    """httpcore's own sockets, each wrapped in a `DeadlineStream`."""

    def __init__(self, backend: httpcore.NetworkBackend | None = None) -> None:
        self._backend = backend or httpcore.SyncBackend()

    def connect_tcp(
        self, host: str, port: int, timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.NetworkStream:  # fmt: skip
        timeout = _capped(timeout, httpcore.ConnectTimeout)
        stream = self._backend.connect_tcp(host, port, timeout, local_address, socket_options)
        return DeadlineStream(stream)

    def connect_unix_socket(
        self, path: str, timeout: float | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.NetworkStream:  # fmt: skip
        timeout = _capped(timeout, httpcore.ConnectTimeout)
        return DeadlineStream(self._backend.connect_unix_socket(path, timeout, socket_options))

    def sleep(self, seconds: float) -> None:
        self._backend.sleep(seconds)


def webhook_client(*, limits: httpx.Limits) -> httpx.Client:
    """The webhook attempts' client: no redirects followed by itself, no proxy from the
    environment, and every connection under its attempt's deadline."""
    transport = httpx.HTTPTransport(limits=limits, trust_env=False)
    # httpx.HTTPTransport takes no network backend; its pool is rebuilt as it builds it
    # (no proxy, HTTP/1.1), with ours. tests/integration/webhooks/test_attempt_deadline.py
    # fails if an httpx upgrade stops using it.
    transport._pool = httpcore.ConnectionPool(
        ssl_context=httpx.create_ssl_context(trust_env=False),
        max_connections=limits.max_connections,
        max_keepalive_connections=limits.max_keepalive_connections,
        keepalive_expiry=limits.keepalive_expiry,
        network_backend=DeadlineBackend(),
    )
    return httpx.Client(transport=transport, follow_redirects=False, trust_env=False)
