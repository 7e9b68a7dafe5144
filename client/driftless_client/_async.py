"""`AsyncClient`: the API over an `httpx.AsyncClient`, for asyncio."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Coroutine
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


class AsyncClient(Operations[Coroutine[Any, Any, JSON], Coroutine[Any, Any, None]]):
    """`Client`'s operations, each to be awaited: the same arguments, answers, errors,
    retries and timeouts. Use it in `async with AsyncClient(...) as client` or call
    `await client.aclose()`."""

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        timeout: float | httpx.Timeout = DEFAULT_TIMEOUT_S,
        max_retries: int = 3,
        backoff: float = 0.5,
        transport: httpx.AsyncBaseTransport | None = None,
        http_client: httpx.AsyncClient | None = None,
    ) -> None:
        self._connection = Connection.of(
            base_url, api_key, timeout=timeout, max_retries=max_retries, backoff=backoff,
            transport=transport, http_client=http_client,
        )  # fmt: skip
        self._owns_http = http_client is None
        self._http = http_client or httpx.AsyncClient(
            transport=transport, timeout=self._connection.timeout
        )

    async def aclose(self) -> None:
        """Close the connections (not those of an `http_client` you passed)."""
        if self._owns_http:
            await self._http.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def events(self, session_id: Id) -> AsyncGenerator[dict[str, Any], None]:
        """`Client.events`, asynchronously. Close it with `contextlib.aclosing(...)`:
        an async generator left in a loop closes only when it is collected."""
        response = await self._send(events_call(session_id), stream=True)
        try:
            if not response.is_success:
                await response.aread()
                raise ApiError.from_response(response)
            parser = EventParser()
            async for line in response.aiter_lines():
                event = parser.feed(line)
                if event is not None:
                    yield event
                    if event["event"] == "end":
                        return
        finally:
            await response.aclose()

    async def export(
        self, agent_id: str | None = None, user_id: str | None = None
    ) -> AsyncGenerator[dict[str, Any], None]:
        """`Client.export`, asynchronously. Close it with `contextlib.aclosing(...)`."""
        response = await self._send(export_call(agent_id, user_id), stream=True)
        try:
            if not response.is_success:
                await response.aread()
                raise ApiError.from_response(response)
            async for line in response.aiter_lines():
                parsed = export_line(line)
                if parsed is not None:
                    yield parsed
        finally:
            await response.aclose()

    def _call(self, call: Call) -> Coroutine[Any, Any, JSON]:
        return self._json(call)

    def _call_no_content(self, call: Call) -> Coroutine[Any, Any, None]:
        return self._no_content(call)

    async def _json(self, call: Call) -> JSON:
        return json_answer(await self._send(call))

    async def _no_content(self, call: Call) -> None:
        no_content(await self._send(call))

    async def _send(self, call: Call, *, stream: bool = False) -> httpx.Response:
        """The answer, after the retries the policy allows (an error answer too)."""
        request = self._connection.request(self._http, call)
        attempt = 0
        while True:
            try:
                response = await self._http.send(request, stream=stream)
            except httpx.TransportError as error:
                wait = self._connection.retry.after_error(attempt, call.method, error)
                if wait is None:
                    raise
            else:
                wait = self._connection.retry.after_response(attempt, response)
                if wait is None:
                    return response
                await response.aclose()
            await asyncio.sleep(wait)
            attempt += 1
