"""The driftless MCP server: the built-in tools (notes, important_info, manage_topic_memory,
recall) plus `get_context`.

Built on the SDK's low-level `Server` rather than `MCPServer`, because the input
schemas must be the contract's tool definitions (web/mcp/tools.py), not schemas
inferred from Python signatures.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

import anyio.to_thread
import redis
from mcp.server import Server, ServerRequestContext
from mcp.server.auth.settings import AuthSettings
from mcp.server.stdio import stdio_server
from mcp.types import (
    CallToolRequestParams,
    CallToolResult,
    ListToolsResult,
    PaginatedRequestParams,
    TextContent,
)
from sqlalchemy.exc import IntegrityError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse

from shared.bootstrap import Runtime
from shared.domain.errors import DomainError
from shared.tools.definitions import BUILT_IN_TOOL_NAMES
from web.mcp.auth import ApiKeyVerifier, admitted, caller_key
from web.mcp.calls import call_built_in, session_context
from web.mcp.tools import GET_CONTEXT, INPUT_SCHEMAS, TOOLS

log = logging.getLogger(__name__)

# Named from the tools served, so a new built-in tool is never missing from what the
# model is told.
INSTRUCTIONS = (
    "Memory for this conversation. Call the built-in tools ("
    + ", ".join(tool.name for tool in TOOLS if tool.name != GET_CONTEXT)
    + ") before any other tool; every call is stored in the session's thread. "
    "get_context returns what the model should see next turn."
)


def _result(payload: dict[str, Any], *, is_error: bool) -> CallToolResult:
    text = json.dumps(payload, sort_keys=True, default=str)
    return CallToolResult(
        content=[TextContent(text=text)], structured_content=payload, is_error=is_error
    )


def _error(code: str, message: str) -> CallToolResult:
    """A tool error in the HTTP API's one error shape, so the model can read and correct it."""
    return _result({"error": {"code": code, "message": message}}, is_error=True)


async def _guarded(call: Callable[[], dict[str, Any]]) -> CallToolResult:
    """Run a blocking call off the event loop; every failure becomes a tool error, never a crash."""
    try:
        payload = await anyio.to_thread.run_sync(call)
    except DomainError as exc:
        return _error(exc.code, exc.message)
    except IntegrityError as exc:
        log.warning("constraint violation: %s", exc.orig)
        return _error("conflict", "the call conflicts with a concurrent change; retry it")
    except OperationalError as exc:
        log.error("database unavailable: %s", exc)
        return _error("unavailable", "the database is unavailable; retry shortly")
    except redis.RedisError as exc:
        log.error("redis unavailable: %s", exc)
        return _error("unavailable", "redis is unavailable; retry shortly")
    except Exception:
        log.exception("unhandled error in an MCP tool call")
        return _error("internal_error", "an unexpected error occurred")
    # A refused curation or an unknown topic is a result {ok: false}, stored like any other.
    return _result(payload, is_error=payload.get("ok") is False)


def build_server(rt: Runtime, *, api_key: str | None = None) -> Server[Any]:
    """The MCP server over `rt`; `api_key` identifies the caller where no HTTP request does."""

    async def list_tools(
        ctx: ServerRequestContext[Any, Any], params: PaginatedRequestParams | None
    ) -> ListToolsResult:
        return ListToolsResult(tools=list(TOOLS))

    async def call_tool(
        ctx: ServerRequestContext[Any, Any], params: CallToolRequestParams
    ) -> CallToolResult:
        key = caller_key(ctx, api_key)
        name, arguments = params.name, params.arguments
        if name == GET_CONTEXT:
            return await _guarded(
                lambda: admitted(rt, key, lambda: session_context(rt, key=key, arguments=arguments))
            )
        if name in BUILT_IN_TOOL_NAMES:
            return await _guarded(
                lambda: admitted(
                    rt, key, lambda: call_built_in(rt, key=key, name=name, arguments=arguments)
                )
            )
        return _error("not_found", f"no tool named {name!r}; see tools/list")

    return Server(
        "driftless",
        version="0.1.0",
        instructions=INSTRUCTIONS,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        get_tool_input_schema=INPUT_SCHEMAS.get,
    )


async def serve_stdio(rt: Runtime, *, api_key: str) -> None:
    """Serve one client on stdin/stdout until it closes them."""
    server = build_server(rt, api_key=api_key)
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


def http_app(rt: Runtime, *, host: str, port: int, path: str = "/mcp") -> Starlette:
    """The streamable-HTTP app at `path`; every request needs 'Authorization: Bearer <key>'."""
    server = build_server(rt)
    # The SDK only installs its bearer middleware together with AuthSettings. We act as a
    # resource server with our own keys, not OAuth: no metadata routes are mounted (no
    # resource_server_url), and issuer_url, required by the model, is never served.
    auth = AuthSettings(issuer_url=f"http://{host}:{port}", resource_server_url=None)
    app = server.streamable_http_app(
        streamable_http_path=path, host=host, auth=auth, token_verifier=ApiKeyVerifier(rt)
    )
    # The key is checked in the SDK's middleware, outside every handler of its own: a
    # database outage there would be a bare 500. Starlette routes middleware errors to
    # the handler of Exception only.
    app.add_exception_handler(Exception, _unhandled)
    return app


async def _unhandled(request: Request, exc: Exception) -> JSONResponse:
    if isinstance(exc, OperationalError | PoolTimeout):
        log.error("MCP request failed, the database is unavailable: %s", exc)
        error = {"code": "unavailable", "message": "the database is unavailable; retry shortly"}
        return JSONResponse({"error": error}, status_code=503)
    log.error("MCP request failed", exc_info=exc)
    error = {"code": "internal_error", "message": "an unexpected error occurred"}
    return JSONResponse({"error": error}, status_code=500)


def serve_http(rt: Runtime, *, host: str, port: int) -> None:
    import uvicorn

    # No logging config of uvicorn's own: its loggers ("uvicorn.error", "uvicorn.access")
    # then reach the root logger, whose handler writes every process's lines
    # (LOG_FORMAT: JSON, or text), instead of uvicorn's text among the JSON.
    uvicorn.run(
        http_app(rt, host=host, port=port), host=host, port=port, log_level="info",
        log_config=None,
    )  # fmt: skip
