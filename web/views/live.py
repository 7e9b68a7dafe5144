"""Live updates for the console: Server-Sent Events fed by the workers through Redis.

Under gunicorn's gevent worker (the Procfile) an open stream costs a greenlet and a
connection slot, not a thread, and the streams of a process share one Redis
subscription (shared/infra/live.py `LiveHub`). A stream is still admitted first
(shared/infra/live_streams.py): at most three quarters of this process's
`--worker-connections` (half its threads on a threaded server), so ordinary requests
always find room, and at most `DRIFTLESS_MAX_STREAMS_PER_ORG` per org across the fleet;
beyond either, 429 with a Retry-After. The server ends a stream that stayed idle, grew
too old, or whose key was revoked (re-checked at each ping), and every stream of a
process that shuts down (web/server.py), each with `event: end` and the reason.
"""

from __future__ import annotations

import functools
import logging
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any

from flask import Response, current_app, request, stream_with_context

from shared.bootstrap import Runtime
from shared.evaluations.requests import request_evaluation
from shared.infra.live import LiveHub
from shared.infra.live_streams import Refusal, StreamGate, StreamLeases, StreamTimer, event_stream
from shared.sessions.service import load_session
from web.auth import current_org
from web.errors import error_response
from web.runtime import runtime, unit_of_work
from web.schemas.common import ErrorOut, SessionPath
from web.views.common import api_blueprint

log = logging.getLogger(__name__)
bp = api_blueprint("live", "live")

# A ping this often renews the stream's lease, re-checks its key, and notices a client
# that went away (the next write fails).
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
    session (fork, summary, evaluation), and `end` when the server ends the stream (idle,
    too old, key revoked, server shutting down: reconnect). The client going away is the
    disconnect exit trigger."""
    org_id = current_org()
    with unit_of_work() as uow:
        session = load_session(uow=uow, org_id=org_id, session_id=path.sid)
    opened = _open(runtime(), org_id, session.id)
    return _refused(opened) if isinstance(opened, Refusal) else opened


def _open(rt: Runtime, org_id: uuid.UUID, session_id: uuid.UUID) -> Response | Refusal:
    """The session's event stream, admitted and subscribed, or why it was refused."""
    streams = _streams(rt)
    slot = streams.gate.admit(org_id=org_id)
    if isinstance(slot, Refusal):
        return slot
    try:
        # Subscribed before `ready`: an event published after it reaches the client.
        listener = streams.hub.listen(session_id)
    except BaseException:
        slot.release()
        raise
    settings = rt.settings
    body = event_stream(
        slot=slot, listener=listener, ping_s=PING_S,
        timer=StreamTimer.start(
            time.monotonic(), idle_s=settings.stream_idle_s, max_s=settings.stream_max_s
        ),
        key_live=functools.partial(_key_live, rt, org_id, _presented_key()),
        client_left=functools.partial(_disconnected, rt, org_id, session_id),
    )  # fmt: skip
    headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    response = Response(stream_with_context(body), mimetype="text/event-stream", headers=headers)
    # Also when the body never started (the generator's finally would not run).
    response.call_on_close(listener.close)
    response.call_on_close(slot.release)
    return response


def _presented_key() -> str:
    """The request's bearer key (web/auth.py has checked it)."""
    return request.headers.get("Authorization", "").partition(" ")[2].strip()


def _key_live(rt: Runtime, org_id: uuid.UUID, key: str) -> bool:
    """Whether the stream's key still works, as of one ping ago at most.

    Through the process's key cache, so the streams of one key cost one lookup per ping
    interval between them. A lookup that fails keeps the stream: the next ping asks
    again, and an outage of the database does not end every stream at once.
    """
    try:
        return rt.key_cache.org_for_key(key, max_age_s=PING_S) == org_id
    except Exception:
        log.warning("could not re-check an event stream's key; asking again at the next ping")
        return True
