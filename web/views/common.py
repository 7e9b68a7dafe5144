"""What every API blueprint shares: the bearer security scheme and the error responses."""

from __future__ import annotations

from http import HTTPStatus
from typing import Any

from flask_openapi3 import APIBlueprint, Tag
from pydantic import BaseModel

from web.schemas.common import ErrorOut

SECURITY: list[dict[str, list[str]]] = [{"bearer": []}]
# Every status the app's own handlers can answer on any route (web/body.py, web/errors.py):
# a client reading the document must not meet an undocumented one.
ERRORS: dict[str | int | HTTPStatus, type[BaseModel] | dict[Any, Any] | None] = {
    400: ErrorOut,
    401: ErrorOut,
    404: ErrorOut,
    409: ErrorOut,
    413: ErrorOut,
    422: ErrorOut,
    503: ErrorOut,
}


def api_blueprint(name: str, tag: str) -> APIBlueprint:
    return APIBlueprint(
        name,
        __name__,
        url_prefix="/agents-api",
        abp_tags=[Tag(name=tag)],
        abp_security=SECURITY,
        abp_responses=ERRORS,
    )
