"""Bearer-key authentication: every /agents-api request is scoped to its key's org, and
taken from that org's request rate limit (shared/orgs/ratelimit.py)."""

from __future__ import annotations

import uuid

from flask import Flask, Response, g, request

from shared.infra import tracing
from web.errors import error_response
from web.runtime import runtime

PUBLIC_PATHS = {"/agents-api/openapi.json"}


def current_org() -> uuid.UUID:
    org_id: uuid.UUID = g.org_id
    return org_id


def install_auth(app: Flask) -> None:
    @app.before_request
    def _authenticate() -> tuple[Response, int] | None:
        if not request.path.startswith("/agents-api") or request.path in PUBLIC_PATHS:
            return None
        scheme, _, key = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not key.strip():
            return error_response(401, "unauthorized", "missing 'Authorization: Bearer <key>'")
        rt = runtime()
        caller = rt.key_cache.caller_for_key(key.strip())
        if caller is None:
            return error_response(401, "unauthorized", "unknown or revoked API key")
        g.org_id = caller.org_id
        tracing.set_org(caller.org_id)  # one tenant's traces, filtered by the request's span
        rt.request_limiter.admit(caller)  # RateLimited: 429 with Retry-After (web/errors.py)
        return None
