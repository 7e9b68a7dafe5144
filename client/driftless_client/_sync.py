"""`Client`: the API over a blocking `httpx.Client`."""

from __future__ import annotations

import time
from collections.abc import Generator
from types import TracebackType
from typing import Any

import httpx

from ._api import Operations
from ._calls import (
    DEFAULT_TIMEOUT_S,
    JSON,
    Call,
    Connection,
    Id,
    events_call,
    export_call,
    export_line,
    json_answer,
    no_content,
)
from ._errors import ApiError
from ._sse import EventParser


class Client(Operations[JSON, None]):
    """The driftless API: one method per operation, each answering the API's JSON as a
    dict (`None` for a 204). An error answer raises `ApiError`; 429 and 503 are tried
    again (honouring `Retry-After`) up to `max_retries` times, and so are timeouts and
    broken connections of GET, PUT and DELETE. A transport failure that is not retried,
    or still fails, raises httpx's exception (`httpx.TransportError`).

    `base_url` is the server's root, e.g. `http://127.0.0.1:8000`. Pass `transport` or
    a ready `http_client` (yours to close) to change how requests go out.
    """

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        timeout: float | httpx.Timeout = DEFAULT_TIMEOUT_S,
        max_retries: int = 3,
        backoff: float = 0.5,
        transport: httpx.BaseTransport | None = None,
        http_client: httpx.Client | None = None,
    ) -> None:
        self._connection = Connection.of(
            base_url, api_key, timeout=timeout, max_retries=max_retries, backoff=backoff,
            transport=transport, http_client=http_client,
        )  # fmt: skip
        self._owns_http = http_client is None
        self._http = http_client or httpx.Client(
            transport=transport, timeout=self._connection.timeout
        )

    def close(self) -> None:
        """Close the connections (not those of an `http_client` you passed)."""
        if self._owns_http:
            self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def events(self, session_id: Id) -> Generator[dict[str, Any], None, None]:
        """`GET /sessions/{sid}/events`: the session's Server-Sent Events as they come,
        each `{"event": name, "data": parsed JSON}`: `ready` first, `session` when a
        worker changed the session, `end` when the server ends the stream (reconnect to
        go on). The request goes out at the first `next()`. Closing the iterator
        (`with contextlib.closing(client.events(sid)) as events:`) closes the stream,
        which the server takes as the user leaving (the disconnect exit trigger)."""
        response = self._send(events_call(session_id), stream=True)
        try:
            if not response.is_success:
                response.read()
                raise ApiError.from_response(response)
            parser = EventParser()
            for line in response.iter_lines():
                event = parser.feed(line)
                if event is not None:
                    yield event
                    if event["event"] == "end":
                        return
        finally:
            response.close()

    def export(
        self, agent_id: str | None = None, user_id: str | None = None
    ) -> Generator[dict[str, Any], None, None]:
        """`GET /export?agentId=&userId=`: the scope's export (docs/export-format.md), one
        dict a line as it streams, the header first; neither id: the whole org. Close the
        iterator (`contextlib.closing`) to stop reading early."""
        response = self._send(export_call(agent_id, user_id), stream=True)
        try:
            if not response.is_success:
                response.read()
                raise ApiError.from_response(response)
            for line in response.iter_lines():
                parsed = export_line(line)
                if parsed is not None:
                    yield parsed
        finally:
            response.close()

    def _call(self, call: Call) -> JSON:
        return json_answer(self._send(call))

    def _call_no_content(self, call: Call) -> None:
        no_content(self._send(call))

    def _send(self, call: Call, *, stream: bool = False) -> httpx.Response:
        """The answer, after the retries the policy allows (an error answer too)."""
        request = self._connection.request(self._http, call)
        attempt = 0
        while True:
            try:
                response = self._http.send(request, stream=stream)
            except httpx.TransportError as error:
                wait = self._connection.retry.after_error(attempt, call.method, error)
                if wait is None:
                    raise
            else:
                wait = self._connection.retry.after_response(attempt, response)
                if wait is None:
                    return response
                response.close()
            time.sleep(wait)
            attempt += 1
