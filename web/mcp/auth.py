"""Who is calling: the bearer key of an HTTP request, or the key the stdio process was given.

Over streamable HTTP the SDK's bearer middleware asks `ApiKeyVerifier` about each
request's key and answers 401 itself when there is none or it is unknown. Every call
then resolves the key again inside its own transaction (`calls._org`), so a key revoked
mid-session stops working at once, on either transport.

Each tool call is also taken from its org's request rate limit (`admitted`), as an API
request is: past it, the call is a tool error `rate_limited` naming when to retry.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import anyio.to_thread
from mcp.server import ServerRequestContext
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken

from shared.auth.service import org_for_key
from shared.bootstrap import Runtime

T = TypeVar("T")


class ApiKeyVerifier:
    """The SDK's TokenVerifier over driftless API keys (shared/auth)."""

    def __init__(self, rt: Runtime) -> None:
        self._rt = rt

    def _org_of(self, key: str) -> str | None:
        with self._rt.unit_of_work() as uow:
            org_id = org_for_key(uow=uow, key=key)
        return None if org_id is None else str(org_id)

    async def verify_token(self, token: str) -> AccessToken | None:
        key = token.strip()
        org_id = await anyio.to_thread.run_sync(self._org_of, key) if key else None
        if org_id is None:
            return None
        # client_id is the org: the SDK binds an MCP session to it, so another org's
        # key cannot continue this org's session.
        return AccessToken(token=key, client_id=org_id, scopes=[])


def caller_key(ctx: ServerRequestContext[Any, Any], stdio_key: str | None) -> str | None:
    """The key of this call: the HTTP request's verified bearer key, else the process's."""
    if ctx.request is None:
        return stdio_key
    user = ctx.request.scope.get("user")
    return user.access_token.token if isinstance(user, AuthenticatedUser) else None


def admitted(rt: Runtime, key: str | None, call: Callable[[], T]) -> T:
    """Run `call` once its org's request bucket gave it a token (`RateLimited` if not).

    An unknown or missing key takes nothing: `call` refuses it itself.
    """
    caller = rt.key_cache.caller_for_key(key) if key else None
    if caller is not None:
        rt.request_limiter.admit(caller)
    return call()
