"""A memory scope: one agent's memory of one user, inside one org."""

from __future__ import annotations

import hashlib
import json
import uuid
from dataclasses import dataclass
from functools import cached_property
from typing import Any


@dataclass(frozen=True)
class Scope:
    org_id: uuid.UUID
    agent_id: str
    user_id: str

    @cached_property
    def cache_tag(self) -> str:
        """The scope's Redis Cluster hash tag: its keys share a slot, so one Lua script may
        touch them all.

        agentId and userId are opaque strings (CONTRACT.md): joined with a separator,
        agent `a:b` + user `c` and agent `a` + user `b:c` would be one key, and a `}`
        would end the hash tag early. A JSON array encodes the tuple without ambiguity,
        and hashing it keeps every character out of the key (nor does the key name the
        user, which erasure relies on).
        """
        encoded = json.dumps([str(self.org_id), self.agent_id, self.user_id], ensure_ascii=False)
        return "{" + hashlib.sha256(encoded.encode("utf-8", "surrogatepass")).hexdigest() + "}"

    def as_job_kwargs(self) -> dict[str, Any]:
        return {"org_id": str(self.org_id), "agent_id": self.agent_id, "user_id": self.user_id}

    @classmethod
    def from_job_kwargs(cls, org_id: str, agent_id: str, user_id: str) -> Scope:
        return cls(org_id=uuid.UUID(org_id), agent_id=agent_id, user_id=user_id)
