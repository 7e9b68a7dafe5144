"""One MCP tool call: resolve the caller's org, run the same service the HTTP API runs.

Synchronous on purpose (SQLAlchemy, redis-py); the server runs these in worker threads.
The JSON returned is exactly what the HTTP endpoints answer.
"""

from __future__ import annotations

import uuid
from typing import Any

from shared.auth.service import org_for_key
from shared.bootstrap import Runtime
from shared.context.service import ContextOptions, assemble_context
from shared.domain.errors import DomainError, Invalid
from shared.infra.db.uow import UnitOfWork
from shared.tools.service import execute_tool
from web.schemas.common import dump
from web.schemas.context import context_document
from web.schemas.tools import ToolResultOut


class Unauthorized(DomainError):
    """No API key, or one that is unknown or revoked."""

    code = "unauthorized"


def split_session_id(arguments: dict[str, Any] | None) -> tuple[uuid.UUID, dict[str, Any]]:
    """The `sessionId` argument and the tool's own arguments (everything else)."""
    rest = dict(arguments or {})
    raw = rest.pop("sessionId", None)
    if raw is None:
        raise Invalid("arguments.sessionId: Field required")
    if not isinstance(raw, str):
        raise Invalid("arguments.sessionId: must be a string (a session id)")
    try:
        return uuid.UUID(raw), rest
    except ValueError:
        raise Invalid(f"arguments.sessionId: {raw[:64]!r} is not a session id (a UUID)") from None


def _org(uow: UnitOfWork, key: str | None) -> uuid.UUID:
    if not key:
        raise Unauthorized("no API key: set DRIFTLESS_API_KEY, or send 'Authorization: Bearer'")
    org_id = org_for_key(uow=uow, key=key)
    if org_id is None:
        raise Unauthorized("unknown or revoked API key")
    return org_id


def call_built_in(
    rt: Runtime, *, key: str | None, name: str, arguments: dict[str, Any] | None
) -> dict[str, Any]:
    """Run a built-in tool as POST /sessions/{id}/tools/{name} does; stored in the thread (R7)."""
    session_id, tool_arguments = split_session_id(arguments)
    with rt.unit_of_work() as uow:
        result = execute_tool(
            uow=uow,
            org_id=_org(uow, key),
            session_id=session_id,
            name=name,
            arguments=tool_arguments,
            tool_call_id=None,
            vectors=rt.query_vectors,
        )
        answer = dump(ToolResultOut.model_validate(result))  # nothing may fail after the commit
        uow.commit()
    return answer


def session_context(
    rt: Runtime, *, key: str | None, arguments: dict[str, Any] | None
) -> dict[str, Any]:
    """The context stack, as GET /sessions/{id}/context answers it (R1–R3)."""
    session_id, rest = split_session_id(arguments)
    if rest:
        raise Invalid(
            "; ".join(f"arguments.{name}: Extra inputs are not permitted" for name in rest)
        )
    with rt.unit_of_work() as uow:
        stack = assemble_context(
            uow=uow,
            client=rt.redis,
            org_id=_org(uow, key),
            session_id=session_id,
            options=ContextOptions.from_settings(rt.settings),
        )
    return context_document(stack)
