"""GET /agents-api/limits: the limits the calling org is held to (shared/orgs/)."""

from __future__ import annotations

from typing import Any

from shared.orgs.service import limits_of
from web.auth import current_org
from web.runtime import runtime, unit_of_work
from web.schemas.common import dump
from web.schemas.limits import LimitsOut
from web.views.common import api_blueprint

bp = api_blueprint("limits", "limits")


@bp.get("/limits", responses={200: LimitsOut})
def get_limits() -> dict[str, Any]:
    """The org's request rate and LLM budget in effect (its own or the fleet's; 0: none),
    and its tokens used this month."""
    rt = runtime()
    with unit_of_work() as uow:
        limits = limits_of(
            uow=uow, org_id=current_org(), requests=rt.request_limiter.default,
            budget=rt.budget_defaults,
        )  # fmt: skip
    return dump(LimitsOut.model_validate(limits))
