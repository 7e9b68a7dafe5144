"""Request ids in logs: every log line of a request carries its request_id (and topic_id
when the route names a topic), and the response echoes the id in `X-Request-Id`. Each
request logs one access line (`web.access`): method, path, status and milliseconds (a
probe's at DEBUG).

The access line is the app's, not gunicorn's (`--access-logfile`): it comes out in the
format LOG_FORMAT chooses, JSON or text, with the request's ids on it."""

from __future__ import annotations

import logging
import re
import time
import uuid

from flask import Flask, Response, g, request

from shared.infra import logcontext

access_log = logging.getLogger("web.access")
# A machine's, every few seconds (the orchestrator's probes, Prometheus's scrapes): logged
# at DEBUG when they succeed, or they would be most of a quiet web's log.
PROBES = frozenset({"/healthz", "/readyz", "/metrics"})

REQUEST_ID_HEADER = "X-Request-Id"
# A caller's id (a proxy's, an agent runtime's) is kept so logs join up across systems;
# anything odd is replaced, so a header cannot forge log lines or bloat them.
_ACCEPTABLE_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")


def request_id_of(header: str | None) -> str:
    """The caller's id when it is a sane token, else a new one."""
    if header and _ACCEPTABLE_ID.fullmatch(header):
        return header
    return uuid.uuid4().hex


def request_target() -> str:
    """The path, and the names of the query's parameters but not their values: a value may
    be a secret (a token in a link) or someone's words (a search)."""
    names = "&".join(request.args.keys())
    return f"{request.path}?{names}" if names else request.path


def install_log_context(app: Flask) -> None:
    @app.before_request
    def _bind_ids() -> None:
        g.access_started = time.perf_counter()
        g.request_id = request_id_of(request.headers.get(REQUEST_ID_HEADER))
        topic_id = (request.view_args or {}).get("tid")
        g.log_context = logcontext.bind(request_id=g.request_id, topic_id=topic_id)

    @app.after_request
    def _echo_id(response: Response) -> Response:
        request_id = g.get("request_id")
        if request_id is not None:
            response.headers[REQUEST_ID_HEADER] = request_id
        # A streamed response (an event stream) is logged as it starts: its time is the
        # time to its first byte.
        started = g.get("access_started", time.perf_counter())
        probed = request.path in PROBES and response.status_code < 400
        access_log.log(
            logging.DEBUG if probed else logging.INFO,
            "%s %s %d %.1f ms", request.method, request_target(), response.status_code,
            (time.perf_counter() - started) * 1000,
        )  # fmt: skip
        return response

    @app.teardown_request
    def _unbind_ids(_exc: BaseException | None) -> None:
        tokens = g.pop("log_context", None)
        if tokens is None:
            return
        try:
            logcontext.unbind(tokens)
        except ValueError:  # torn down in another context (a streamed response): just forget
            logcontext.clear()
