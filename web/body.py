"""Malformed JSON is a 400 before any validation runs; an oversized body is a 413; JSON
nested too deep or holding NaN/Infinity/out-of-range numbers is a 422 (shared/domain/limits.py).

The document the check parsed is the request's JSON from then on: flask-openapi3 reads
the body model from `request.get_json()`, which would otherwise parse it a second time
(a tenth of a message post's CPU)."""

from __future__ import annotations

from typing import Any

from flask import Flask, Request, Response, request

from shared.domain.errors import Invalid
from shared.domain.limits import loads_checked
from web.errors import error_response
from web.runtime import runtime

WRITE_METHODS = {"POST", "PUT", "PATCH", "DELETE"}
# Bodies their view reads as a stream, a line at a time (NDJSON, of any size up to the
# view's own bound): never read whole here, nor held to MAX_CONTENT_LENGTH.
STREAMED_BODIES = {"/agents-api/import"}
_UNCHECKED = object()


class CheckedJsonRequest(Request):
    """Flask's request, answering `get_json()` with the document the body check parsed."""

    checked_json: Any = _UNCHECKED

    def get_json(self, force: bool = False, silent: bool = False, cache: bool = True) -> Any:
        if self.checked_json is not _UNCHECKED:
            return self.checked_json
        return super().get_json(force=force, silent=silent, cache=cache)


def bound_client_waits() -> None:
    """The request's client socket gives up on a read or a write that makes no progress
    for DRIFTLESS_CLIENT_STALL_S: an import whose client stops sending ends (a 400, the
    client disconnected), an export whose client stops reading is aborted, its snapshot
    and slot given back, rather than wait on it for ever. gunicorn hands the socket to
    the request as `gunicorn.socket`; under another server nothing changes."""
    sock = request.environ.get("gunicorn.socket")
    if sock is not None:
        sock.settimeout(runtime().settings.client_stall_s)


def install_body_checks(app: Flask) -> None:
    app.request_class = CheckedJsonRequest

    @app.before_request
    def _reject_malformed_json() -> tuple[Response, int] | None:
        if request.method not in WRITE_METHODS or request.path in STREAMED_BODIES:
            return None
        raw = request.get_data(cache=True)  # raises 413 past MAX_CONTENT_LENGTH
        if not raw.strip():
            return None
        if not request.is_json:
            return error_response(
                400, "bad_request", "the request body must be JSON (Content-Type: application/json)"
            )
        try:
            document = loads_checked(raw.decode("utf-8"), limits=runtime().limits)
        except Invalid as exc:
            return error_response(422, "validation_error", exc.message)
        except ValueError as exc:  # UnicodeDecodeError included
            return error_response(
                400, "malformed_json", f"the request body is not valid JSON: {exc}"
            )
        request.checked_json = document  # type: ignore[attr-defined]  # CheckedJsonRequest
        return None
