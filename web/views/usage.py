"""GET /agents-api/usage: the calling org's LLM calls and tokens (shared/usage/)."""

from __future__ import annotations

from typing import Any

from shared.orgs.service import usage_with_budget
from web.auth import current_org
from web.runtime import runtime, unit_of_work
from web.schemas.common import dump
from web.schemas.usage import UsageOut, UsageQuery
from web.views.common import api_blueprint

bp = api_blueprint("usage", "usage")


@bp.get("/usage", responses={200: UsageOut})
def get_usage(query: UsageQuery) -> dict[str, Any]:
    """The calling org's LLM calls and tokens since `since` (default: 30 days ago), by
    model, and whether its tokens for this month are used up."""
    budget = runtime().budget_defaults
    with unit_of_work() as uow:
        usage = usage_with_budget(uow=uow, org_id=current_org(), since=query.since, budget=budget)
    return dump(UsageOut.model_validate(usage))
