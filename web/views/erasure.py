from __future__ import annotations

from typing import Any

from shared.erasure.service import erase_user_everywhere
from shared.memory.scope import Scope
from web.auth import current_org
from web.runtime import runtime, unit_of_work
from web.schemas.common import dump
from web.schemas.erasure import ErasedOut, UserPath
from web.views.common import api_blueprint

bp = api_blueprint("erasure", "erasure")


@bp.delete("/agents/<agent_id>/users/<user_id>", responses={200: ErasedOut})
def erase(path: UserPath) -> dict[str, Any]:
    """Erase everything held about this user of this agent; reports what went."""
    scope = Scope(org_id=current_org(), agent_id=path.agent_id, user_id=path.user_id)
    erased = erase_user_everywhere(new_uow=unit_of_work, redis_client=runtime().redis, scope=scope)
    return dump(ErasedOut(erased=erased.counts))
