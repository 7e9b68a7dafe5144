"""Live updates for the console: Server-Sent Events fed by the workers through Redis."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator

import redis
from flask import Response, g, stream_with_context

from shared.live import channel
from shared.sessions.service import load_session
from shared.triggers.service import request_evaluation
from web.auth import current_org
from web.runtime import WebRuntime, runtime, unit_of_work
from web.schemas import SessionPath
from web.views.common import api_blueprint

log = logging.getLogger(__name__)
bp = api_blueprint("live", "live")

# A ping this often also notices a client that went away: the next write fails.
PING_S = 5.0


def _disconnected(rt: WebRuntime, session_id: object) -> None:
    """The live connection dropped: the "socket disconnect" exit trigger (R27)."""
    try:
        with unit_of_work() as uow:
            request_evaluation(
                uow=uow, debouncer=rt.debouncer, queue=rt.queue, org_id=g.org_id,
                session_id=session_id, trigger="disconnect",  # type: ignore[arg-type]
            )  # fmt: skip
    except Exception:  # the client is gone; nobody to tell
        log.warning("disconnect trigger for session %s failed", session_id, exc_info=True)


@bp.get("/sessions/<sid>/events", responses={200: None})
def events(path: SessionPath) -> Response:
    """text/event-stream: `ready`, then a `session` event whenever a worker changed the
    session (fork, summary, evaluation). Its end is the disconnect exit trigger."""
    with unit_of_work() as uow:
        session = load_session(uow=uow, org_id=current_org(), session_id=path.sid)
    rt = runtime()
    # A connection of its own without a read timeout: it waits for events by design.
    listener = redis.Redis.from_url(rt.redis_url)

    def stream() -> Iterator[str]:
        pubsub = listener.pubsub(ignore_subscribe_messages=True)
        try:
            pubsub.subscribe(channel(session.id))
            yield "event: ready\ndata: {}\n\n"
            last_write = time.monotonic()
            while True:
                message = pubsub.get_message(timeout=PING_S)
                if message is None:  # a timeout, or a subscription notice it skipped
                    if time.monotonic() - last_write >= PING_S:
                        yield ": ping\n\n"
                        last_write = time.monotonic()
                    continue
                last_write = time.monotonic()
                data = message["data"]
                text = data.decode() if isinstance(data, bytes) else str(data)
                yield f"event: session\ndata: {text}\n\n"
        finally:
            pubsub.close()
            listener.close()
            _disconnected(rt, session.id)

    headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    return Response(stream_with_context(stream()), mimetype="text/event-stream", headers=headers)
