"""Malformed JSON is a 400 before any validation runs; an oversized body is a 413; JSON
nested too deep or holding NaN/Infinity/out-of-range numbers is a 422 (shared/limits.py)."""

from __future__ import annotations

from flask import Flask, Response, request

from shared.errors import Invalid
from shared.limits import loads_checked
from web.errors import error_response
from web.runtime import runtime

WRITE_METHODS = {"POST", "PUT", "PATCH", "DELETE"}


def install_body_checks(app: Flask) -> None:
    @app.before_request
    def _reject_malformed_json() -> tuple[Response, int] | None:
        if request.method not in WRITE_METHODS:
            return None
        raw = request.get_data(cache=True)  # raises 413 past MAX_CONTENT_LENGTH
        if not raw.strip():
            return None
        if not request.is_json:
            return error_response(
                400, "bad_request", "the request body must be JSON (Content-Type: application/json)"
            )
        try:
            loads_checked(raw.decode("utf-8"), limits=runtime().limits)
        except Invalid as exc:
            return error_response(422, "validation_error", exc.message)
        except ValueError as exc:  # UnicodeDecodeError included
            return error_response(
                400, "malformed_json", f"the request body is not valid JSON: {exc}"
            )
        return None
