"""Re-evaluation campaigns of the calling org: start, follow, list, cancel."""

from __future__ import annotations

from typing import Any

from shared.reevaluations.service import (
    cancel_campaign,
    get_campaign,
    list_campaigns,
    start_campaign,
)
from web.auth import current_org
from web.runtime import runtime, unit_of_work
from web.schemas.common import ErrorOut, dump
from web.schemas.reevaluations import (
    ReevaluationIn,
    ReevaluationOut,
    ReevaluationPath,
    ReevaluationsOut,
    StartedOut,
)
from web.views.common import api_blueprint

bp = api_blueprint("reevaluations", "reevaluations")


@bp.post("/reevaluations", responses={202: StartedOut, 429: ErrorOut})
def start(body: ReevaluationIn) -> tuple[dict[str, Any], int]:
    """Start re-evaluating the org's matching topics at `rate` a second (closed ones are
    re-summarized, active ones evaluated); follow it with GET …/reevaluations/{id}. 429
    with Retry-After while the org runs DRIFTLESS_CAMPAIGNS_PER_ORG campaigns already."""
    per_org = runtime().settings.campaigns_per_org
    with unit_of_work() as uow:
        campaign = start_campaign(
            uow=uow, org_id=current_org(), origin="api", campaigns_per_org=per_org,
            agent_id=body.agent_id, user_id=body.user_id, since=body.since, rate=body.rate,
        )  # fmt: skip
        uow.commit()
    return dump(StartedOut.model_validate(campaign)), 202


@bp.get("/reevaluations", responses={200: ReevaluationsOut})
def index() -> dict[str, Any]:
    """The org's campaigns, newest first (the latest 100)."""
    with unit_of_work() as uow:
        campaigns = list_campaigns(uow=uow, org_id=current_org())
    return dump(
        ReevaluationsOut(reevaluations=[ReevaluationOut.model_validate(c) for c in campaigns])
    )


@bp.get("/reevaluations/<reevaluation_id>", responses={200: ReevaluationOut})
def get(path: ReevaluationPath) -> dict[str, Any]:
    """One campaign and its progress: enqueued, done and failed of total."""
    with unit_of_work() as uow:
        campaign = get_campaign(uow=uow, org_id=current_org(), campaign_id=path.reevaluation_id)
    return dump(ReevaluationOut.model_validate(campaign))


@bp.delete("/reevaluations/<reevaluation_id>", responses={200: ReevaluationOut})
def cancel(path: ReevaluationPath) -> dict[str, Any]:
    """Cancel a running campaign: nothing more is enqueued (jobs already sent still run).
    A cancelled one is answered unchanged; a finished one is 409."""
    with unit_of_work() as uow:
        campaign = cancel_campaign(uow=uow, org_id=current_org(), campaign_id=path.reevaluation_id)
        uow.commit()
    return dump(ReevaluationOut.model_validate(campaign))
