from __future__ import annotations

from typing import Any

from shared.agents.service import get_agent, put_agent
from web.auth import current_org
from web.runtime import unit_of_work
from web.schemas.agents import AgentIn, AgentOut, AgentPath
from web.schemas.common import dump
from web.views.common import api_blueprint

bp = api_blueprint("agents", "agents")


@bp.put("/agents/<agent_id>", responses={200: AgentOut})
def put(path: AgentPath, body: AgentIn) -> dict[str, Any]:
    """Create or replace an agent profile (the stable prefix's soul, skills and tools)."""
    with unit_of_work() as uow:
        agent = put_agent(
            uow=uow,
            org_id=current_org(),
            agent_id=path.agent_id,
            soul=body.soul,
            skills=body.skills,
            tools=body.tools,
        )
        answer = dump(AgentOut.model_validate(agent))  # before the commit: nothing fails after it
        uow.commit()
    return answer


@bp.get("/agents/<agent_id>", responses={200: AgentOut})
def get(path: AgentPath) -> dict[str, Any]:
    """An agent profile."""
    with unit_of_work() as uow:
        agent = get_agent(uow=uow, org_id=current_org(), agent_id=path.agent_id)
    return dump(AgentOut.model_validate(agent))
