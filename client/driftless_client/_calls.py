"""What an operation becomes on the wire, shared by both clients: a `Call` (method, path,
query, body), the connection every request is sent with, and the answer read back."""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import quote

import httpx

from ._errors import ApiError
from ._retry import RetryPolicy
from ._version import __version__

API_PREFIX = "/agents-api"
USER_AGENT = f"driftless-client/{__version__}"
DEFAULT_TIMEOUT_S = 10.0

JSON = dict[str, Any]
Id = str | uuid.UUID
Message = Mapping[str, Any]
MemoryState = Literal["none", "promoted", "deprecated"]
Trigger = Literal["navigation", "visibility", "disconnect", "manual"]


@dataclass(frozen=True)
class Call:
    """One request: `path` is under /agents-api with its segments already encoded; no
    body when `json` is None."""

    method: str
    path: str
    params: Mapping[str, str] | None = None
    json: Any = None
    ndjson: bytes | None = None  # a body of JSON lines (POST /import), sent as it is


def query_value(value: Any) -> str:
    """A query parameter as the API reads it: `true`/`false` for a flag."""
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


def scope(agent_id: str, user_id: str) -> dict[str, str]:
    return {"agentId": agent_id, "userId": user_id}


def seg(value: Id) -> str:
    """One path segment, percent-encoded whole: ids are opaque (`/`, `:`, `{`, spaces, …)."""
    return quote(str(value), safe="")


def events_call(session_id: Id) -> Call:
    """`GET /sessions/{sid}/events` (each client streams it its own way)."""
    return Call("GET", f"/sessions/{seg(session_id)}/events")


def export_call(agent_id: str | None = None, user_id: str | None = None) -> Call:
    """`GET /export?agentId=&userId=` (each client streams it its own way)."""
    given = {"agentId": agent_id, "userId": user_id}
    return Call("GET", "/export", params={k: v for k, v in given.items() if v is not None})


def export_line(line: str) -> JSON | None:
    """One line of an export as a dict; None for a blank line."""
    return json.loads(line) if line.strip() else None


@dataclass(frozen=True)
class Connection:
    """What both clients send every request with: the server's root, the key's headers,
    the timeout and the retry policy."""

    base_url: str
    headers: dict[str, str]
    timeout: httpx.Timeout
    retry: RetryPolicy

    @classmethod
    def of(
        cls,
        base_url: str,
        api_key: str,
        *,
        timeout: float | httpx.Timeout,
        max_retries: int,
        backoff: float,
        transport: object | None,
        http_client: object | None,
    ) -> Connection:
        """The client's arguments, checked (ValueError names a bad one)."""
        if transport is not None and http_client is not None:
            raise ValueError("pass transport or http_client, not both")
        return cls(
            base_url=_base_url_of(base_url),
            headers=_headers_of(api_key),
            timeout=httpx.Timeout(timeout),
            retry=RetryPolicy(max_retries=max_retries, backoff_s=backoff),
        )

    def request(self, http: httpx.Client | httpx.AsyncClient, call: Call) -> httpx.Request:
        """`call` as the request `http` sends (again, on a retry)."""
        return http.build_request(
            call.method,
            f"{self.base_url}{API_PREFIX}{call.path}",
            params=call.params,
            json=call.json,
            content=call.ndjson,
            headers=self.headers
            if call.ndjson is None
            else {**self.headers, "Content-Type": "application/x-ndjson"},
            timeout=self.timeout,
        )


def _base_url_of(base_url: str) -> str:
    """The server's root (`http://127.0.0.1:8000`), without a trailing slash; a path
    (a proxy's prefix) is kept."""
    url = httpx.URL(base_url)
    if url.scheme not in ("http", "https") or not url.host:
        raise ValueError(f"base_url must be an http(s) URL, not {base_url!r}")
    return str(url.copy_with(query=None, fragment=None)).rstrip("/")


def _headers_of(api_key: str) -> dict[str, str]:
    if not api_key:
        raise ValueError("api_key must not be empty")
    return {
        "Authorization": f"Bearer {api_key}",
        "Accept": "application/json",
        "User-Agent": USER_AGENT,
    }


def json_answer(response: httpx.Response) -> JSON:
    """The answer's JSON object; ApiError for an error answer (its body read)."""
    if not response.is_success:
        raise ApiError.from_response(response)
    try:
        body: Any = response.json()
    except ValueError:
        body = None
    if not isinstance(body, dict):
        raise ApiError(response.status_code, "invalid_answer", "the answer is not a JSON object")
    return body


def no_content(response: httpx.Response) -> None:
    if not response.is_success:
        raise ApiError.from_response(response)
