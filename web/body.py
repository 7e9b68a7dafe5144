"""Malformed JSON is a 400 before any validation runs; an oversized body is a 413."""

from __future__ import annotations

import json

from flask import Flask, Response, request

from web.errors import error_response

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
            json.loads(raw)
        except ValueError as exc:
            return error_response(
                400, "malformed_json", f"the request body is not valid JSON: {exc}"
            )
        return None
