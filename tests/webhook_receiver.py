"""A webhook receiver for tests: a real HTTP server on 127.0.0.1 that verifies each
delivery's Standard Webhooks signature with the `standardwebhooks` package, as a
customer's endpoint would, and deduplicates by `webhook-id`.

What it answers is scripted per request (`answer_with`): a status, after a delay, or a
redirect; or trickled, its status line and headers a byte at a time (`trickle_s`
apart), as a receiver that holds a sender's worker would. Every request is logged,
verified or not, and counted while it is being answered (`in_flight`, `most_in_flight`);
each trickle is kept (`trickles`): how far it got before the sender hung up.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

from standardwebhooks.webhooks import Webhook, WebhookVerificationError


@dataclass(frozen=True)
class Answer:
    status: int = 204
    delay_s: float = 0.0
    location: str | None = None  # a redirect's target
    trickle_s: float = 0.0  # when set, the answer's head goes a byte at a time, this apart


@dataclass
class Trickle:
    """One trickled answer: `sent` of its head's `total` bytes went out before it ended,
    `broken` if the sender had hung up."""

    total: int
    sent: int = 0
    broken: bool = False
    ended: bool = False


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes
    verified: dict[str, Any] | None  # the parsed body, if its signature verified


@dataclass
class Receiver:
    """Start with `with Receiver(secret) as receiver:`; `url` is where it listens."""

    secret: str | None = None  # None: requests are logged, not verified
    requests: list[Received] = field(default_factory=list)
    trickles: list[Trickle] = field(default_factory=list)
    in_flight: int = 0  # requests being answered right now
    most_in_flight: int = 0
    _answer: Callable[[Received, int], Answer] = lambda _r, _n: Answer()
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def answer_with(self, answer: Callable[[Received, int], Answer]) -> None:
        """`answer(request, n)`: n counts this webhook-id's requests so far, from 1."""
        self._answer = answer

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def events(self) -> dict[str, dict[str, Any]]:
        """Each verified event once, by webhook-id: what a deduplicating receiver keeps."""
        with self._lock:
            return {r.headers["webhook-id"]: r.verified for r in self.requests if r.verified}

    def attempts_of(self, webhook_id: str) -> int:
        with self._lock:
            return sum(r.headers.get("webhook-id") == webhook_id for r in self.requests)

    def __enter__(self) -> Receiver:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                headers = {k.lower(): v for k, v in self.headers.items()}
                received = Received(self.path, headers, body, receiver._verify(headers, body))
                with receiver._lock:
                    receiver.requests.append(received)
                    n = receiver.attempts_of_locked(headers.get("webhook-id", ""))
                    receiver.in_flight += 1
                    receiver.most_in_flight = max(receiver.most_in_flight, receiver.in_flight)
                try:
                    answer = receiver._answer(received, n)
                    time.sleep(answer.delay_s)
                    if answer.trickle_s:
                        self._trickle(answer)
                        return
                    self.send_response(answer.status)
                    if answer.location:
                        self.send_header("location", answer.location)
                    self.send_header("content-length", "0")
                    self.end_headers()
                finally:
                    with receiver._lock:
                        receiver.in_flight -= 1

            def _trickle(self, answer: Answer) -> None:
                head = (
                    f"HTTP/1.1 {answer.status} {self.responses[answer.status][0]}\r\n"
                    "content-length: 0\r\nx-trickled: one byte at a time\r\n\r\n"
                ).encode()
                trickle = Trickle(total=len(head))
                with receiver._lock:
                    receiver.trickles.append(trickle)
                self.close_connection = True
                try:
                    for byte in head:
                        self.wfile.write(bytes([byte]))
                        trickle.sent += 1
                        time.sleep(answer.trickle_s)
                except OSError:  # the sender hung up (a write after its close fails)
                    trickle.broken = True
                trickle.ended = True

            def log_message(self, *_: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def attempts_of_locked(self, webhook_id: str) -> int:
        return sum(r.headers.get("webhook-id") == webhook_id for r in self.requests)

    def __exit__(
        self, _t: type[BaseException] | None, _e: BaseException | None, _tb: TracebackType | None
    ) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _verify(self, headers: dict[str, str], body: bytes) -> dict[str, Any] | None:
        if self.secret is None:
            return None
        try:
            verified: dict[str, Any] = Webhook(self.secret).verify(body, headers)
        except WebhookVerificationError:
            return None
        return verified
