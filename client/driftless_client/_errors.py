"""`ApiError`: an error answer of the API, as the server put it."""

from __future__ import annotations

import re
from http import HTTPStatus
from typing import Any

import httpx

# How much of a body that is not the API's error shape goes into the message.
_EXCERPT_CHARS = 200


class ApiError(Exception):
    """An error answer: `status` (the HTTP status), `code` and `message`.

    `code` and `message` are the server's `{"error": {"code", "message"}}`; an answer not
    in that shape (a proxy's 502, say) gets the status text as `code`, snake_case
    (`bad_gateway`), and as the start of `message`. `details` holds the error object's
    other members, if any (a 422's `fields`: `[{field, message}]`).
    """

    def __init__(
        self, status: int, code: str, message: str, details: dict[str, Any] | None = None
    ) -> None:
        super().__init__(status, code, message)
        self.status = status
        self.code = code
        self.message = message
        self.details: dict[str, Any] = details or {}

    def __str__(self) -> str:
        return f"{self.status} {self.code}: {self.message}"

    @classmethod
    def from_response(cls, response: httpx.Response) -> ApiError:
        """The error of an answer whose body has been read."""
        status = response.status_code
        detail = _error_detail(response)
        if detail is not None:
            code, message, details = detail
            return cls(status, code, message, details)
        phrase = _status_text(response)
        code = re.sub(r"[^a-z0-9]+", "_", phrase.lower()).strip("_") or f"http_{status}"
        excerpt = response.text.strip()[:_EXCERPT_CHARS]
        return cls(status, code, f"{phrase}: {excerpt}" if excerpt else phrase)


def _error_detail(response: httpx.Response) -> tuple[str, str, dict[str, Any]] | None:
    try:
        body: Any = response.json()
    except ValueError:  # not JSON (json.JSONDecodeError and UnicodeDecodeError are both)
        return None
    error = body.get("error") if isinstance(body, dict) else None
    if not isinstance(error, dict):
        return None
    code, message = error.get("code"), error.get("message")
    if not isinstance(code, str) or not isinstance(message, str):
        return None
    details = {k: v for k, v in error.items() if k not in ("code", "message")}
    return code, message, details


def _status_text(response: httpx.Response) -> str:
    if response.reason_phrase:
        return response.reason_phrase
    try:
        return HTTPStatus(response.status_code).phrase
    except ValueError:
        return f"HTTP {response.status_code}"
