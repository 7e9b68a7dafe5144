from __future__ import annotations

import logging
from typing import Any

from redis.exceptions import RedisError

from shared.erasure.service import erase_user, forget_in_redis
from shared.memory.scope import Scope
from web.auth import current_org
from web.runtime import runtime, unit_of_work
from web.schemas.common import dump
from web.schemas.erasure import ErasedOut, UserPath
from web.views.common import api_blueprint

log = logging.getLogger(__name__)
bp = api_blueprint("erasure", "erasure")


@bp.delete("/agents/<agent_id>/users/<user_id>", responses={200: ErasedOut})
def erase(path: UserPath) -> dict[str, Any]:
    """Erase everything held about this user of this agent; reports what went."""
    scope = Scope(org_id=current_org(), agent_id=path.agent_id, user_id=path.user_id)
    with unit_of_work() as uow:
        erased = erase_user(uow=uow, scope=scope)
        uow.commit()
    try:
        erased.counts["redisKeys"] = forget_in_redis(runtime().redis, scope, erased)
    except RedisError:  # the rows are gone; the keys expire on their own
        log.warning("erasure of %s left Redis keys to expire", scope)
    return dump(ErasedOut(erased=erased.counts))
