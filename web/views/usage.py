"""GET /agents-api/usage: the calling org's LLM calls and tokens (shared/usage/)."""

from __future__ import annotations

from typing import Any

from shared.usage.service import org_usage
from web.auth import current_org
from web.runtime import unit_of_work
from web.schemas.common import dump
from web.schemas.usage import UsageOut, UsageQuery
from web.views.common import api_blueprint

bp = api_blueprint("usage", "usage")


@bp.get("/usage", responses={200: UsageOut})
def get_usage(query: UsageQuery) -> dict[str, Any]:
    """The calling org's LLM calls and tokens since `since` (default: 30 days ago), by model."""
    with unit_of_work() as uow:
        usage = org_usage(uow=uow, org_id=current_org(), since=query.since)
    return dump(UsageOut.model_validate(usage))
