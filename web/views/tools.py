from __future__ import annotations

from typing import Any

from shared.tools.definitions import BUILT_IN_TOOLS
from shared.tools.service import execute_tool
from web.auth import current_org
from web.runtime import runtime, unit_of_work
from web.schemas.common import dump
from web.schemas.tools import ToolCallIn, ToolPath, ToolResultOut, ToolsOut
from web.views.common import api_blueprint

bp = api_blueprint("tools", "tools")


@bp.get("/tools", responses={200: ToolsOut})
def list_tools() -> dict[str, Any]:
    """The built-in tools as OpenAI function definitions (dispatch them before MCP tools)."""
    return dump(ToolsOut(tools=list(BUILT_IN_TOOLS)))


@bp.post("/sessions/<sid>/tools/<name>", responses={200: ToolResultOut})
def call_tool(path: ToolPath, body: ToolCallIn) -> dict[str, Any]:
    """Execute a built-in tool; the call and its result join the thread (R7)."""
    with unit_of_work() as uow:
        result = execute_tool(
            uow=uow,
            org_id=current_org(),
            session_id=path.sid,
            name=path.name,
            arguments=body.arguments,
            tool_call_id=body.tool_call_id,
            vectors=runtime().query_vectors,
        )
        answer = dump(ToolResultOut.model_validate(result))  # nothing may fail after the commit
        uow.commit()
    return answer
