"""Request ids in logs: every log line of a request carries its request_id (and topic_id
when the route names a topic), and the response echoes the id in `X-Request-Id`."""

from __future__ import annotations

import re
import uuid

from flask import Flask, Response, g, request

from shared.infra import logcontext

REQUEST_ID_HEADER = "X-Request-Id"
# A caller's id (a proxy's, an agent runtime's) is kept so logs join up across systems;
# anything odd is replaced, so a header cannot forge log lines or bloat them.
_ACCEPTABLE_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")


def request_id_of(header: str | None) -> str:
    """The caller's id when it is a sane token, else a new one."""
    if header and _ACCEPTABLE_ID.fullmatch(header):
        return header
    return uuid.uuid4().hex


def install_log_context(app: Flask) -> None:
    @app.before_request
    def _bind_ids() -> None:
        g.request_id = request_id_of(request.headers.get(REQUEST_ID_HEADER))
        topic_id = (request.view_args or {}).get("tid")
        g.log_context = logcontext.bind(request_id=g.request_id, topic_id=topic_id)

    @app.after_request
    def _echo_id(response: Response) -> Response:
        request_id = g.get("request_id")
        if request_id is not None:
            response.headers[REQUEST_ID_HEADER] = request_id
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
