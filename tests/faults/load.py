"""Client threads that keep calling the web while a test breaks something, and a log of
every call with when it left and when it came back.

Which calls may see the fault is decided by time, not by a label read when a call is
sent: a request queued in gunicorn can be served after the fault began. A call
answered before the fault began must be clean; one sent after the fault was over
must be clean again; only those overlapping the fault may see it.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from tests.faults.http import Answer


@dataclass(frozen=True)
class Call:
    kind: str
    sent_at: float
    answered_at: float
    answer: Answer
    content: str | None = None  # of a posted message


@dataclass
class Fault:
    """When the fault began (before the kill) and when it was over (server back)."""

    began: float = math.inf
    ended: float = math.inf

    def begin(self) -> None:
        self.began = time.monotonic()

    def end(self) -> None:
        self.ended = time.monotonic()

    def phase(self, call: Call) -> str:
        if call.answered_at < self.began:
            return "before"
        if call.sent_at > self.ended:
            return "after"
        return "during"


@dataclass
class Load:
    """Runs `body(load, n)` in `clients` threads until stop(); they record with call()."""

    body: Callable[[Load, int], None]
    clients: int
    calls: list[Call] = field(default_factory=list)
    stopping: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _threads: list[threading.Thread] = field(default_factory=list)

    def call(self, kind: str, send: Callable[[], Answer], content: str | None = None) -> Answer:
        sent_at = time.monotonic()
        answer = send()
        with self._lock:
            self.calls.append(Call(kind, sent_at, time.monotonic(), answer, content))
        return answer

    def start(self) -> None:
        self._threads = [
            threading.Thread(target=self.body, args=(self, n), daemon=True)
            for n in range(self.clients)
        ]
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        self.stopping.set()
        for thread in self._threads:
            thread.join(timeout=60)

    def of(self, kind: str) -> list[Call]:
        return [c for c in self.calls if c.kind == kind]
