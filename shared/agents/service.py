"""Reading and replacing agent profiles."""

from __future__ import annotations

import uuid
from typing import Any

from sqlalchemy import func
from sqlalchemy.dialects.postgresql import insert

from shared.agents.models import AgentProfile
from shared.agents.rules import check_profile
from shared.domain.errors import NotFound
from shared.infra.db.uow import UnitOfWork


def put_agent(
    *,
    uow: UnitOfWork,
    org_id: uuid.UUID,
    agent_id: str,
    soul: str,
    skills: list[Any],
    tools: list[Any],
) -> AgentProfile:
    """Create or replace the profile (an upsert, so concurrent PUTs cannot collide)."""
    check_profile(soul=soul, skills=skills, tools=tools, limits=uow.limits)
    values = {"soul": soul, "skills": skills, "tools": tools}
    statement = (
        insert(AgentProfile)
        .values(org_id=org_id, agent_id=agent_id, **values)
        .on_conflict_do_update(
            index_elements=[AgentProfile.org_id, AgentProfile.agent_id],
            set_={**values, "updated_at": func.now()},
        )
    )
    uow.session.execute(statement)
    return get_agent(uow=uow, org_id=org_id, agent_id=agent_id)


def get_agent(*, uow: UnitOfWork, org_id: uuid.UUID, agent_id: str) -> AgentProfile:
    agent = uow.session.get(AgentProfile, (org_id, agent_id), populate_existing=True)
    if agent is None:
        raise NotFound(f"agent {agent_id!r} not found")
    return agent
