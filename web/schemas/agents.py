"""Agent profiles: the soul, skills and tools of the stable prefix."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from shared.domain.limits import MAX_AGENT_SKILLS, MAX_AGENT_TOOLS, MAX_SOUL_CHARS
from web.schemas.common import Body, CamelModel, Input, ScopeId


class AgentPath(Input):
    agent_id: ScopeId


class AgentIn(Body):
    # The caps are the domain's (the import writes profiles too); the tools' shape is
    # checked there, by the one rule (shared/agents/rules.py).
    soul: str = Field(default="", max_length=MAX_SOUL_CHARS)
    skills: list[Any] = Field(default_factory=list, max_length=MAX_AGENT_SKILLS)
    tools: list[dict[str, Any]] = Field(default_factory=list, max_length=MAX_AGENT_TOOLS)


class AgentOut(CamelModel):
    agent_id: str
    soul: str
    skills: list[Any]
    # As stored: a profile written before [4.1] may hold tools the route now refuses.
    tools: list[Any]
