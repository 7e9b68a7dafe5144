"""A memory scope: one agent's memory of one user, inside one org."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Scope:
    org_id: uuid.UUID
    agent_id: str
    user_id: str

    @property
    def cache_tag(self) -> str:
        """`agentId:userId:orgId` in braces: a Redis Cluster hash tag, so a scope's keys
        share a slot and one Lua script may touch them all."""
        return "{" + f"{self.agent_id}:{self.user_id}:{self.org_id}" + "}"

    def as_job_kwargs(self) -> dict[str, Any]:
        return {"org_id": str(self.org_id), "agent_id": self.agent_id, "user_id": self.user_id}

    @classmethod
    def from_job_kwargs(cls, org_id: str, agent_id: str, user_id: str) -> Scope:
        return cls(org_id=uuid.UUID(org_id), agent_id=agent_id, user_id=user_id)
