"""Live updates for the console: Server-Sent Events fed by the workers through Redis.

A stream holds one of the server's threads while it is open, so it is admitted first
(shared/live_streams.py): at most half this process's threads, at most
`DRIFTLESS_MAX_STREAMS_PER_ORG` per org across the fleet; beyond either, 429 with a
Retry-After. The server ends a stream that stayed idle or grew too old.
"""

from __future__ import annotations

import gc
import json
import logging
import sys
import threading
import time
import uuid
from collections.abc import Iterator

import redis
from flask import Response, current_app, stream_with_context

from shared.bootstrap import Runtime
from shared.evaluations.requests import request_evaluation
from shared.live import channel
from shared.live_streams import Refusal, Slot, StreamGate, StreamLeases, StreamTimer
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
# Threads of a server whose count we cannot read: the Procfile's 8.
FALLBACK_THREADS = 8
_GATE = "driftless.streams"
_gate_lock = threading.Lock()


def _server_threads() -> int | None:
    """gunicorn's `--threads` in this worker process, or None under another server.

    gunicorn hands the app no configuration; its worker object (the one its server
    hooks receive) lives in this process and holds it. `type()`, not isinstance(): a
    werkzeug proxy answers isinstance() slowly, by looking for its request.
    """
    base = sys.modules.get("gunicorn.workers.base")
    if base is None:
        return None
    for candidate in gc.get_objects():
        if issubclass(type(candidate), base.Worker):
            return int(candidate.cfg.threads)
    return None


def _gate(rt: Runtime) -> StreamGate:
    """This app's gate, made on its first stream (in gunicorn's worker, after the fork)."""
    with _gate_lock:
        gate: StreamGate | None = current_app.extensions.get(_GATE)
        if gate is None:
            threads = _server_threads() or FALLBACK_THREADS
            gate = StreamGate(
                leases=StreamLeases(rt.redis),
                per_process=max(1, threads // 2),
                per_org=rt.settings.max_streams_per_org,
            )
            current_app.extensions[_GATE] = gate
            log.info("live streams: at most %d per process (%d threads)", gate.per_process, threads)
    return gate


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
    admitted = _gate(rt).admit(org_id=org_id)
    if isinstance(admitted, Refusal):
        return _refused(admitted)
    body = stream_with_context(_stream(rt, org_id, session.id, admitted))
    headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    response = Response(body, mimetype="text/event-stream", headers=headers)
    # Also when the body never started (the generator's finally would not run).
    response.call_on_close(admitted.release)
    return response


def _stream(rt: Runtime, org_id: uuid.UUID, session_id: uuid.UUID, slot: Slot) -> Iterator[str]:
    settings = rt.settings
    timer = StreamTimer.start(
        time.monotonic(), idle_s=settings.stream_idle_s, max_s=settings.stream_max_s
    )
    # A connection of its own without a read timeout: it waits for events by design.
    listener = redis.Redis.from_url(rt.endpoints.redis_url)
    pubsub = listener.pubsub(ignore_subscribe_messages=True)
    ended: str | None = None  # why the server ended it; None: the client went away
    try:
        pubsub.subscribe(channel(session_id))
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
            message = pubsub.get_message(timeout=min(next_ping, timer.deadline()) - now)
            if message is None:  # a timeout, or a subscription notice it skipped
                continue
            timer.event(time.monotonic())
            data = message["data"]
            text = data.decode() if isinstance(data, bytes) else str(data)
            yield f"event: session\ndata: {text}\n\n"
        yield f"event: end\ndata: {json.dumps({'reason': ended})}\n\n"
    finally:
        pubsub.close()
        listener.close()
        slot.release()
        if ended is None:
            _disconnected(rt, org_id, session_id)
