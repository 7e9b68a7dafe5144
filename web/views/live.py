"""Live updates for the console: Server-Sent Events fed by the workers through Redis.

Under gunicorn's gevent worker (the Procfile) an open stream costs a greenlet and a
connection slot, not a thread, and the streams of a process share one Redis
subscription (shared/infra/live.py `LiveHub`). A stream is still admitted first
(shared/infra/live_streams.py): at most three quarters of this process's
`--worker-connections` (half its threads on a threaded server), so ordinary requests
always find room, and at most `DRIFTLESS_MAX_STREAMS_PER_ORG` per org across the fleet;
beyond either, 429 with a Retry-After. The server ends a stream that stayed idle or
grew too old.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from flask import Response, current_app, stream_with_context

from shared.evaluations.requests import request_evaluation
from shared.infra.bootstrap import Runtime
from shared.infra.live import Listener, LiveHub
from shared.infra.live_streams import Refusal, Slot, StreamGate, StreamLeases, StreamTimer
from shared.sessions.service import load_session
from web.auth import current_org
from web.errors import error_response
from web.runtime import runtime, unit_of_work
from web.schemas.common import ErrorOut, SessionPath
from web.views.common import api_blueprint

log = logging.getLogger(__name__)
bp = api_blueprint("live", "live")

# A ping this often renews the stream's lease and notices a client that went away (the
# next write fails).
PING_S = 5.0
# Threads of a server whose count we cannot read: the old Procfile's 8.
FALLBACK_THREADS = 8
# Under gevent, the share of gunicorn's --worker-connections that streams may hold; the
# rest serves the API (1,000 connections: 750 streams, 250 for requests, far more
# requests than one process's core can run at once).
STREAM_SHARE = 0.75
_STREAMS = "driftless.streams"
_streams_lock = threading.Lock()


@dataclass(frozen=True)
class _Streams:
    """This process's admission gate and its one Redis subscription."""

    gate: StreamGate
    hub: LiveHub


def _stream_room() -> tuple[int, str]:
    """How many streams this worker process may hold, and why (for the log).

    gunicorn hands the app no configuration; its worker object holds it, and it is on
    the stack of the request being served: `self` of the worker's `handle_request`
    (the first stream's request asks). Not `gc.get_objects()`: the process froze its
    startup objects (shared/infra/heap.py), the worker among them, and frozen objects are not
    listed. `type()`, not isinstance(): a werkzeug proxy answers isinstance() slowly,
    by looking for its request.
    """
    base = sys.modules.get("gunicorn.workers.base")
    frame = sys._getframe() if base is not None else None
    while frame is not None:
        candidate = frame.f_locals.get("self")
        if base is not None and issubclass(type(candidate), base.Worker):
            return _room_of(candidate)
        frame = frame.f_back
    threads = FALLBACK_THREADS
    return max(1, threads // 2), f"{threads} threads assumed"


def _room_of(worker: Any) -> tuple[int, str]:
    cfg = worker.cfg
    asynchronous = sys.modules.get("gunicorn.workers.base_async")
    if asynchronous is not None and isinstance(worker, asynchronous.AsyncWorker):
        connections = int(cfg.worker_connections)
        return max(1, int(connections * STREAM_SHARE)), f"{connections} worker connections"
    threads = int(cfg.threads)
    return max(1, threads // 2), f"{threads} threads"


def _streams(rt: Runtime) -> _Streams:
    """This app's gate and hub, made on its first stream (in gunicorn's worker, after
    the fork)."""
    with _streams_lock:
        streams: _Streams | None = current_app.extensions.get(_STREAMS)
        if streams is None:
            room, why = _stream_room()
            gate = StreamGate(
                leases=StreamLeases(rt.redis),
                per_process=room,
                per_org=rt.settings.max_streams_per_org,
            )
            streams = _Streams(gate, LiveHub(rt.endpoints.redis_url))
            current_app.extensions[_STREAMS] = streams
            log.info("live streams: at most %d per process (%s)", room, why)
    return streams


def _disconnected(rt: Runtime, org_id: uuid.UUID, session_id: uuid.UUID) -> None:
    """The client went away: the "socket disconnect" exit trigger (R27)."""
    try:
        with unit_of_work() as uow:
            request_evaluation(
                uow=uow, debouncer=rt.debouncer, queue=rt.queue, org_id=org_id,
                session_id=session_id, trigger="disconnect",
            )  # fmt: skip
    except Exception:  # the client is gone; nobody to tell
        log.warning("disconnect trigger for session %s failed", session_id, exc_info=True)


def _refused(refusal: Refusal) -> Response:
    response, status = error_response(429, refusal.code, refusal.message)
    response.status_code = status
    response.headers["Retry-After"] = str(refusal.retry_after_s)
    return response


@bp.get("/sessions/<sid>/events", responses={200: None, 429: ErrorOut})
def events(path: SessionPath) -> Response:
    """text/event-stream: `ready`, then a `session` event whenever a worker changed the
    session (fork, summary, evaluation), and `end` when the server ends the stream (idle
    or too old: reconnect). The client going away is the disconnect exit trigger."""
    org_id = current_org()
    with unit_of_work() as uow:
        session = load_session(uow=uow, org_id=org_id, session_id=path.sid)
    rt = runtime()
    streams = _streams(rt)
    admitted = streams.gate.admit(org_id=org_id)
    if isinstance(admitted, Refusal):
        return _refused(admitted)
    try:
        # Subscribed before `ready`: an event published after it reaches the client.
        listener = streams.hub.listen(session.id)
    except BaseException:
        admitted.release()
        raise
    body = stream_with_context(_stream(rt, org_id, session.id, admitted, listener))
    headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    response = Response(body, mimetype="text/event-stream", headers=headers)
    # Also when the body never started (the generator's finally would not run).
    response.call_on_close(listener.close)
    response.call_on_close(admitted.release)
    return response


def _stream(
    rt: Runtime, org_id: uuid.UUID, session_id: uuid.UUID, slot: Slot, listener: Listener
) -> Iterator[str]:
    settings = rt.settings
    timer = StreamTimer.start(
        time.monotonic(), idle_s=settings.stream_idle_s, max_s=settings.stream_max_s
    )
    ended: str | None = None  # why the server ended it
    gone = False  # the client went away: the server closed the body at a failed write
    try:
        yield "event: ready\ndata: {}\n\n"
        next_ping = time.monotonic() + PING_S
        while True:
            now = time.monotonic()
            ended = timer.ended(now)
            if ended:
                break
            if now >= next_ping:
                if not slot.renew():  # the process stalled past its lease
                    ended = "lease"
                    break
                yield ": ping\n\n"
                next_ping = time.monotonic() + PING_S
                continue
            data = listener.next(timeout=min(next_ping, timer.deadline()) - now)
            if data is None:  # a timeout
                continue
            timer.event(time.monotonic())
            yield f"event: session\ndata: {data}\n\n"
        yield f"event: end\ndata: {json.dumps({'reason': ended})}\n\n"
    except GeneratorExit:
        gone = ended is None
        raise
    finally:
        listener.close()
        slot.release()
        # Only a client that left is the exit trigger: a server that stops (its worker's
        # greenlets killed at shutdown) or an error is not the user leaving the session.
        if gone:
            _disconnected(rt, org_id, session_id)
