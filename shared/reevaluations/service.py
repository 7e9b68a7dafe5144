"""Starting, reading and cancelling re-evaluation campaigns (HTTP, CLI and beat alike).

A campaign only records what to do: the pump (pump.py) enqueues its topics at its rate,
and each topic's job settles the topic's item when it ends.
"""

from __future__ import annotations

import datetime as dt
import logging
import math
import uuid
from collections.abc import Sequence

from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError

from shared.auth.models import Org
from shared.domain.errors import Conflict, Invalid, NotFound, TooBusy
from shared.domain.limits import MAX_SCOPE_ID_CHARS
from shared.infra.config import Settings
from shared.infra.db.uow import UnitOfWork
from shared.infra.metrics import LIMIT_HITS
from shared.llm.factory import configured_model
from shared.llm.prompts import SUMMARY_PROMPT_VERSION
from shared.reevaluations.models import ReevaluationCampaign
from shared.reevaluations.pump import finish_if_settled
from shared.reevaluations.selection import Maker, Selection, count_topics

# Topics a second. The default keeps the llm queue shallow beside live traffic; the
# bounds keep a typo from flooding it, or from starting a campaign that takes months.
DEFAULT_RATE = 5.0
MIN_RATE = 0.1
MAX_RATE = 1000.0
LISTED = 100  # GET /agents-api/reevaluations answers the newest this many
# A refused start's Retry-After: when the org's soonest campaign has enqueued its last
# topic at its rate, within these bounds (its last jobs still have to run after that).
MIN_RETRY_AFTER_S = 5
MAX_RETRY_AFTER_S = 600

log = logging.getLogger(__name__)


def _check(
    *, agent_id: str | None, user_id: str | None, since: dt.datetime | None, rate: float
) -> None:
    """Invalid, naming the field, for a filter or rate a campaign cannot run with."""
    for field, value in (("agentId", agent_id), ("userId", user_id)):
        if value is not None and (not value.strip() or len(value) > MAX_SCOPE_ID_CHARS):
            raise Invalid(f"{field}: must be 1 to {MAX_SCOPE_ID_CHARS} characters, not blank")
    if since is not None and since.utcoffset() is None:
        raise Invalid("since: must carry a timezone, as in 2026-01-01T00:00:00Z")
    if not math.isfinite(rate) or not MIN_RATE <= rate <= MAX_RATE:
        raise Invalid(f"rate: must be {MIN_RATE:g} to {MAX_RATE:g} topics a second, not {rate:g}")


def _admit(uow: UnitOfWork, *, org_id: uuid.UUID, per_org: int) -> None:
    """TooBusy while the org runs `per_org` campaigns already; the caller's transaction
    then holds the org's lock until it commits the new one."""
    # Two starts of one org queue here, so the second counts the first's campaign. NO KEY
    # UPDATE: the org's other writers (inserts referencing it) do not wait on a start.
    uow.session.execute(select(Org.id).where(Org.id == org_id).with_for_update(key_share=True))
    running = uow.session.execute(
        select(
            ReevaluationCampaign.total, ReevaluationCampaign.enqueued, ReevaluationCampaign.rate
        ).where(ReevaluationCampaign.org_id == org_id, ReevaluationCampaign.state == "running")
    ).all()
    if len(running) < per_org:
        return
    LIMIT_HITS.labels("campaigns").inc()
    soonest_s = min(max(row.total - row.enqueued, 0) / row.rate for row in running)
    retry_after_s = min(max(math.ceil(soonest_s), MIN_RETRY_AFTER_S), MAX_RETRY_AFTER_S)
    raise TooBusy(
        f"{len(running)} re-evaluations of this org are running, the most at once"
        f" (DRIFTLESS_CAMPAIGNS_PER_ORG={per_org}): retry once one has finished, or cancel one",
        retry_after_s=retry_after_s,
    )


def start_campaign(
    *,
    uow: UnitOfWork,
    org_id: uuid.UUID | None,
    origin: str,
    campaigns_per_org: int | None,
    agent_id: str | None = None,
    user_id: str | None = None,
    since: dt.datetime | None = None,
    rate: float | None = None,
    stale_for: Maker | None = None,
) -> ReevaluationCampaign:
    """A running campaign over the matching topics created until now (`org_id` None: every
    org's), its total counted now; with nothing to do, finished at once. TooBusy while the
    org runs `campaigns_per_org` already (None: no cap, for campaigns of no org)."""
    rate = DEFAULT_RATE if rate is None else float(rate)
    _check(agent_id=agent_id, user_id=user_id, since=since, rate=rate)
    if org_id is not None and campaigns_per_org is not None:
        _admit(uow, org_id=org_id, per_org=campaigns_per_org)
    # The campaign's creation, and the newest topic it covers: topics created later are
    # not in it (a campaign is a snapshot, not a subscription).
    started: dt.datetime = uow.session.scalars(select(func.clock_timestamp())).one()
    selection = Selection(
        org_id=org_id, agent_id=agent_id, user_id=user_id, since=since, until=started,
        stale_for=stale_for,
    )  # fmt: skip
    total = count_topics(uow=uow, selection=selection)
    campaign = ReevaluationCampaign(
        id=uuid.uuid4(), org_id=org_id, origin=origin, agent_id=agent_id, user_id=user_id,
        since=since, stale_only=stale_for is not None,
        current_prompt_version=stale_for.prompt_version if stale_for else None,
        current_model=stale_for.model if stale_for else None,
        rate=rate, total=total, exhausted=total == 0, created_at=started, advanced_at=started,
        state="running",
    )  # fmt: skip
    uow.session.add(campaign)
    uow.session.flush()
    if total == 0 and finish_if_settled(uow=uow, campaign_id=campaign.id):
        uow.session.refresh(campaign)
    return campaign


def start_stale_campaign(
    *, uow: UnitOfWork, model: str, rate: float = DEFAULT_RATE
) -> ReevaluationCampaign | None:
    """Beat's campaign (DRIFTLESS_REEVALUATE_CRON): every org's topics summarized by an
    older prompt version or another model than `model` (the configured one). None while
    the previous one still runs.

    It is no org's campaign, so no org's cap refuses it nor does it take an org's place:
    it is one at a time fleet-wide already, and a topic an org's own campaign has in
    flight is skipped by the pump (pump.py), so running beside them costs no extra call.
    """
    running = select(ReevaluationCampaign.id).where(
        ReevaluationCampaign.origin == "cron", ReevaluationCampaign.state == "running"
    )
    if uow.session.scalars(running).first() is not None:
        return None
    try:
        # A duplicate job racing this one: the partial unique index lets one through.
        with uow.session.begin_nested():
            current = Maker(prompt_version=SUMMARY_PROMPT_VERSION, model=model)
            return start_campaign(
                uow=uow,
                org_id=None,
                origin="cron",
                campaigns_per_org=None,
                stale_for=current,
                rate=rate,
            )
    except IntegrityError:
        return None


def start_scheduled_reevaluation(*, uow: UnitOfWork, settings: Settings) -> uuid.UUID | None:
    """Beat's run: the stale campaign for the configured model, committed; its id or None."""
    campaign = start_stale_campaign(uow=uow, model=configured_model(settings))
    uow.commit()
    if campaign is None:
        log.info("the previous scheduled re-evaluation still runs; none started")
        return None
    log.info("scheduled re-evaluation %s started: %d topics", campaign.id, campaign.total)
    return campaign.id


def _find(
    uow: UnitOfWork, campaign_id: uuid.UUID, *, org_id: uuid.UUID, lock: bool
) -> ReevaluationCampaign:
    query = select(ReevaluationCampaign).where(
        ReevaluationCampaign.id == campaign_id, ReevaluationCampaign.org_id == org_id
    )
    if lock:
        query = query.with_for_update()
    campaign = uow.session.scalars(query).first()
    if campaign is None:  # another org's is missing too (docs/contract.md)
        raise NotFound(f"no re-evaluation {campaign_id}")
    return campaign


def get_campaign(
    *, uow: UnitOfWork, org_id: uuid.UUID, campaign_id: uuid.UUID
) -> ReevaluationCampaign:
    """The org's campaign; NotFound for an unknown one, another org's or an operator's."""
    return _find(uow, campaign_id, org_id=org_id, lock=False)


def read_campaign(*, uow: UnitOfWork, campaign_id: uuid.UUID) -> ReevaluationCampaign:
    """Any campaign, whoever started it: for operators (the CLI following its own)."""
    found = uow.session.get(ReevaluationCampaign, campaign_id, populate_existing=True)
    if found is None:
        raise NotFound(f"no re-evaluation {campaign_id}")
    return found


def list_campaigns(*, uow: UnitOfWork, org_id: uuid.UUID) -> Sequence[ReevaluationCampaign]:
    """The org's newest campaigns, newest first."""
    return uow.session.scalars(
        select(ReevaluationCampaign)
        .where(ReevaluationCampaign.org_id == org_id)
        .order_by(ReevaluationCampaign.created_at.desc(), ReevaluationCampaign.id.desc())
        .limit(LISTED)
    ).all()


def cancel_campaign(
    *, uow: UnitOfWork, org_id: uuid.UUID, campaign_id: uuid.UUID
) -> ReevaluationCampaign:
    """Stop enqueuing the org's campaign; jobs already sent still run and settle.

    Cancelling a cancelled campaign answers it unchanged (a retried DELETE); a finished
    one is a Conflict: there is nothing left to stop.
    """
    # Under the row lock the pump takes for a tick: once this commits, no tick enqueues.
    campaign = _find(uow, campaign_id, org_id=org_id, lock=True)
    if campaign.state == "finished":
        raise Conflict(f"re-evaluation {campaign_id} has finished: there is nothing to cancel")
    if campaign.state == "running":
        campaign.state = "cancelled"
        campaign.finished_at = uow.session.scalars(select(func.clock_timestamp())).one()
        uow.session.flush()
    return campaign
