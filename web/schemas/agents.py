"""Agent profiles: the soul, skills and tools of the stable prefix."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from web.schemas.common import Body, CamelModel, Input, ScopeId


class AgentPath(Input):
    agent_id: ScopeId


class AgentIn(Body):
    soul: str = Field(default="", max_length=50_000)
    skills: list[Any] = Field(default_factory=list, max_length=200)
    tools: list[dict[str, Any]] = Field(default_factory=list, max_length=200)


class AgentOut(CamelModel):
    agent_id: str
    soul: str
    skills: list[Any]
    tools: list[dict[str, Any]]
