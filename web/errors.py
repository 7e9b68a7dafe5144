"""Every error a client can see, in the contract's one shape: {"error": {code, message}}."""

from __future__ import annotations

import logging
from typing import Any

from flask import Flask, Response, jsonify
from pydantic import ValidationError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from sqlalchemy.exc import IntegrityError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from werkzeug.exceptions import HTTPException

from shared.domain.errors import (
    Conflict,
    DomainError,
    Invalid,
    NotFound,
    TooBusy,
    TooLarge,
    Unavailable,
)
from web.schemas.common import FORM_TAGS

log = logging.getLogger(__name__)

STATUS_OF: dict[type[DomainError], int] = {
    NotFound: 404,
    Conflict: 409,
    Invalid: 422,
    TooLarge: 413,
    TooBusy: 429,
    Unavailable: 503,
}
HTTP_CODES = {
    400: "bad_request",
    401: "unauthorized",
    404: "not_found",
    405: "method_not_allowed",
    413: "too_large",
    415: "unsupported_media_type",
}
# PostgreSQL's query_canceled: the web's statement_timeout ended the query
# (DRIFTLESS_WEB_STATEMENT_TIMEOUT_MS). The same request is likely as slow again at once.
QUERY_CANCELED = "57014"
TIMEOUT_RETRY_AFTER_S = 5


def error_response(status: int, code: str, message: str, **extra: Any) -> tuple[Response, int]:
    return jsonify({"error": {"code": code, "message": message, **extra}}), status


def _field_name(location: tuple[int | str, ...]) -> str:
    if location and location[0] in FORM_TAGS:  # which form of the body; not a field
        location = location[1:]
    return ".".join(str(part) for part in location) or "body"


def validation_error_response(exc: ValidationError) -> Response:
    """422 naming each bad field; installed as flask-openapi3's validation callback."""
    fields = [
        {"field": _field_name(error["loc"]), "message": error["msg"]} for error in exc.errors()
    ]
    message = "; ".join(f"{f['field']}: {f['message']}" for f in fields)
    response, status = error_response(422, "validation_error", message, fields=fields)
    response.status_code = status
    return response


def _status_of(exc: DomainError) -> int:
    """The status of the error's class or of the nearest class above it that has one (a
    `RateLimited` is a `TooBusy`: 429)."""
    return next((STATUS_OF[cls] for cls in type(exc).__mro__ if cls in STATUS_OF), 400)


def install_error_handlers(app: Flask) -> None:
    @app.errorhandler(DomainError)
    def _domain(exc: DomainError) -> tuple[Response, int]:
        response, status = error_response(_status_of(exc), exc.code, exc.message)
        if isinstance(exc, TooBusy):
            response.headers["Retry-After"] = str(exc.retry_after_s)
        return response, status

    @app.errorhandler(HTTPException)
    def _http(exc: HTTPException) -> tuple[Response, int] | Any:
        if exc.response is not None:  # flask-openapi3 aborts with a ready validation response
            return exc.response
        status = exc.code or 500
        return error_response(status, HTTP_CODES.get(status, "http_error"), exc.description or "")

    @app.errorhandler(IntegrityError)
    def _constraint(exc: IntegrityError) -> tuple[Response, int]:
        # The services lock before they write, so this is a race they lost, not bad input.
        log.warning("constraint violation: %s", exc.orig)
        return error_response(409, "conflict", "the request conflicts with a concurrent change")

    @app.errorhandler(OperationalError)
    def _database_down(exc: OperationalError) -> tuple[Response, int]:
        if getattr(exc.orig, "pgcode", None) == QUERY_CANCELED:
            log.warning("query ended by the statement timeout: %s", exc.orig)
            response, status = error_response(
                503, "timeout", "the query took too long and was stopped; retry later"
            )
            response.headers["Retry-After"] = str(TIMEOUT_RETRY_AFTER_S)
            return response, status
        log.error("database unavailable: %s", exc)
        return error_response(503, "unavailable", "the database is unavailable; retry shortly")

    @app.errorhandler(PoolTimeout)
    def _pool_exhausted(exc: PoolTimeout) -> tuple[Response, int]:
        # Every connection of this process's pool is busy (DRIFTLESS_DB_POOL_SIZE): load,
        # not a fault of the request.
        log.error("database connection pool exhausted: %s", exc)
        return error_response(503, "unavailable", "the service is overloaded; retry shortly")

    @app.errorhandler(RedisConnectionError)
    @app.errorhandler(RedisTimeoutError)
    def _redis_down(exc: RedisConnectionError | RedisTimeoutError) -> tuple[Response, int]:
        # Routes that can do without Redis degrade on their own (memory falls back to
        # PostgreSQL, exit triggers are dropped); what reaches here needs data that only
        # Redis holds (working memory), so the client should retry, as for the database.
        log.error("redis unavailable: %s", exc)
        return error_response(503, "unavailable", "Redis is unavailable; retry shortly")

    @app.errorhandler(Exception)
    def _unexpected(exc: Exception) -> tuple[Response, int]:
        log.exception("unhandled error")
        return error_response(500, "internal_error", "an unexpected error occurred")
