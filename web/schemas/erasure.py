"""Erasure of one user of one agent, with the counts of what went."""

from __future__ import annotations

from web.schemas.common import CamelModel, Input, ScopeId


class UserPath(Input):
    agent_id: ScopeId
    user_id: ScopeId


class ErasedOut(CamelModel):
    erased: dict[str, int]
