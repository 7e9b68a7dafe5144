"""The built-in tools: their definitions and one call with its result."""

from __future__ import annotations

import uuid
from typing import Any

from pydantic import Field

from web.schemas.common import Body, CamelModel, Input


class ToolPath(Input):
    sid: uuid.UUID
    name: str = Field(max_length=100)


class ToolCallIn(Body):
    arguments: dict[str, Any]
    tool_call_id: str | None = Field(default=None, min_length=1, max_length=200)


class ToolResultOut(CamelModel):
    ok: bool
    result: Any = None
    error: str | None = None
    tool_call_id: str


class ToolsOut(CamelModel):
    tools: list[dict[str, Any]]
