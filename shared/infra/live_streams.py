"""Admission and lifetime of live event streams (`GET …/events`).

An open stream holds one of the server's connections (under gevent, a greenlet) or, on
a threaded server, one of its threads, so streams are admitted, not just served:

- **Per process**: at most a fixed number of streams, so ordinary requests always find
  room: the web passes three quarters of gunicorn's `--worker-connections` under gevent,
  half its `--threads` on a threaded server. A process-local semaphore.
- **Per org, across the fleet**: at most `DRIFTLESS_MAX_STREAMS_PER_ORG`, as leases in
  `driftless:streams:{<org>}` (shared/infra/leases.py). A stream renews its lease at
  every ping and removes it when it ends; a process that dies leaves leases that lapse
  within `LEASE_S`, so the count cannot leak.
- **In time**: the server ends a stream that had no event for `stream_idle_s` (pings do
  not count) or that is `stream_max_s` old (`StreamTimer`).

`event_stream` is a stream's body: it also ends, at a ping, a stream whose key was
revoked, and at once a stream whose process shuts down (shared/infra/live.py `end_all`).
Whenever the server ends a stream it says why, as `event: end`, so the client knows to
reconnect rather than guess at a dropped connection.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import redis

from shared.infra.leases import OrgLeases, leases_key
from shared.infra.live import Listener

# A stream renews its lease every ping (5 s); a few missed renewals are a stalled
# process, not a dead one.
LEASE_S = 30
# When a refused client may try again: a slot of its org frees when one of its streams
# ends; a process slot may free sooner, or the retry may land on another process.
ORG_RETRY_AFTER_S = 30
PROCESS_RETRY_AFTER_S = 5


def streams_key(org_id: uuid.UUID) -> str:
    return leases_key("streams", org_id)


class StreamLeases(OrgLeases):
    """The fleet-wide count of each org's open streams (shared/infra/leases.py)."""

    def __init__(self, client: redis.Redis, *, lease_s: int = LEASE_S) -> None:
        super().__init__(client, kind="streams", lease_s=lease_s)


@dataclass(frozen=True)
class Refusal:
    """Why a stream was not admitted, in the contract's error terms."""

    code: str
    message: str
    retry_after_s: int


class Slot:
    """An admitted stream's process slot and lease, given back exactly once."""

    def __init__(
        self, *, leases: StreamLeases, room: threading.BoundedSemaphore, org_id: uuid.UUID,
        stream_id: str,
    ) -> None:  # fmt: skip
        self._leases, self._room = leases, room
        self._org_id, self._stream_id = org_id, stream_id
        self._lock = threading.Lock()
        self._released = False

    def renew(self) -> bool:
        """Extend the lease; False if it lapsed (the stream should end)."""
        return self._leases.renew(org_id=self._org_id, lease_id=self._stream_id)

    def release(self) -> None:
        with self._lock:
            if self._released:
                return
            self._released = True
        try:
            self._leases.release(org_id=self._org_id, lease_id=self._stream_id)
        finally:
            self._room.release()


class StreamGate:
    """Admits a stream while this process has room for one more and its org is under its
    fleet-wide limit."""

    def __init__(self, *, leases: StreamLeases, per_process: int, per_org: int) -> None:
        self.per_process, self.per_org = per_process, per_org
        self._leases = leases
        self._room = threading.BoundedSemaphore(per_process)

    def admit(self, *, org_id: uuid.UUID) -> Slot | Refusal:
        """A slot for a new stream of the org, or why not; Redis errors propagate."""
        # The org's lease first: a burst the org is refused for then holds, for a moment,
        # only leases of its own, never a process slot another org's stream needs.
        stream_id = self._leases.acquire(org_id=org_id, limit=self.per_org)
        if stream_id is None:
            message = f"this organization already has {self.per_org} open event streams"
            return Refusal("too_many_streams", message, ORG_RETRY_AFTER_S)
        if not self._room.acquire(blocking=False):
            self._leases.release(org_id=org_id, lease_id=stream_id)
            message = "this server has no room for another event stream; retry shortly"
            return Refusal("streams_busy", message, PROCESS_RETRY_AFTER_S)
        return Slot(leases=self._leases, room=self._room, org_id=org_id, stream_id=stream_id)


@dataclass
class StreamTimer:
    """When the server ends a stream: no event for `idle_s`, or `max_s` after it began.

    Times are `time.monotonic()` readings; pings are not events.
    """

    idle_s: float
    max_s: float
    started: float
    last_event: float

    @classmethod
    def start(cls, now: float, *, idle_s: float, max_s: float) -> StreamTimer:
        return cls(idle_s=idle_s, max_s=max_s, started=now, last_event=now)

    def event(self, now: float) -> None:
        self.last_event = now

    def deadline(self) -> float:
        return min(self.started + self.max_s, self.last_event + self.idle_s)

    def ended(self, now: float) -> str | None:
        """ "lifetime" or "idle" once the stream must end, else None."""
        if now >= self.started + self.max_s:
            return "lifetime"
        if now >= self.last_event + self.idle_s:
            return "idle"
        return None


READY = "event: ready\ndata: {}\n\n"
PING = ": ping\n\n"


def event_stream(
    *, slot: Slot, listener: Listener, timer: StreamTimer, ping_s: float,
    key_live: Callable[[], bool], client_left: Callable[[], None],
) -> Iterator[str]:  # fmt: skip
    """A stream's Server-Sent Events: `ready`, the session's events with a ping every
    `ping_s`, and `end` with why the server ended it.

    At each ping the stream renews its lease and asks `key_live` whether its key still
    works. It gives back its slot and listener however it ends; `client_left` runs only
    when the client went away (the server closed the body at a failed write), not when
    the server ended the stream.
    """
    ended: str | None = None  # why the server ended it
    left = False
    try:
        yield READY
        next_ping = time.monotonic() + ping_s
        while True:
            now = time.monotonic()
            ended = listener.ended or timer.ended(now)
            if ended:
                break
            if now >= next_ping:
                ended = _ping_ends(slot, key_live)
                if ended:
                    break
                yield PING
                next_ping = time.monotonic() + ping_s
                continue
            data = listener.next(timeout=min(next_ping, timer.deadline()) - now)
            if data is not None:
                timer.event(time.monotonic())
                yield f"event: session\ndata: {data}\n\n"
        yield f"event: end\ndata: {json.dumps({'reason': ended})}\n\n"
    except GeneratorExit:
        left = ended is None
        raise
    finally:
        listener.close()
        slot.release()
        if left:
            client_left()


def _ping_ends(slot: Slot, key_live: Callable[[], bool]) -> str | None:
    """Why the stream ends at this ping, if it does."""
    if not slot.renew():  # the process stalled past its lease
        return "lease"
    if not key_live():
        return "revoked"
    return None
