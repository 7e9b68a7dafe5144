"""The MCP tool list, derived from the same definitions the context stack advertises.

Each built-in tool's input schema is its OpenAI `parameters` plus a required
`sessionId`, built at import from `shared.tools.definitions`, so the two cannot drift.
"""

from __future__ import annotations

import copy
from typing import Any

from mcp.types import Tool, ToolAnnotations

from shared.tools.definitions import BUILT_IN_TOOLS

GET_CONTEXT = "get_context"

SESSION_ID: dict[str, Any] = {
    "type": "string",
    "format": "uuid",
    "description": "The driftless session this call belongs to (POST /agents-api/sessions).",
}


def with_session_id(parameters: dict[str, Any]) -> dict[str, Any]:
    """An OpenAI function's parameters schema with a required `sessionId` added first."""
    schema = copy.deepcopy(parameters)
    schema["properties"] = {"sessionId": SESSION_ID, **schema.get("properties", {})}
    schema["required"] = ["sessionId", *schema.get("required", [])]
    return schema


def _built_in(definition: dict[str, Any]) -> Tool:
    function = definition["function"]
    return Tool(
        name=function["name"],
        description=function["description"],
        input_schema=with_session_id(function["parameters"]),
    )


CONTEXT_TOOL = Tool(
    name=GET_CONTEXT,
    description=(
        "The context stack for the session's next turn, stable first: identity, skills, "
        "tools, persistent memory, durable facts, drift result; then the active topic's "
        "notes and prior topic summaries; then the recent thread, tool results and "
        "working memory. Also rendered as provider messages."
    ),
    input_schema=with_session_id(
        {"type": "object", "properties": {}, "additionalProperties": False}
    ),
    annotations=ToolAnnotations(read_only_hint=True),
)

TOOLS: tuple[Tool, ...] = (*(_built_in(d) for d in BUILT_IN_TOOLS), CONTEXT_TOOL)
INPUT_SCHEMAS: dict[str, dict[str, Any]] = {tool.name: tool.input_schema for tool in TOOLS}
