"""The pump: each running campaign's topics enqueued at its rate, and settled as they end.

Beat runs `advance_campaigns` every TICK_S. Under the campaign's row lock, one short
transaction takes the topics owed since the last tick (its rate times the time passed,
never more than a burst's worth) from its cursor, records each as an item and moves the
cursor; the jobs go out after the commit. Nothing is fanned out beyond that, and all the
state is in PostgreSQL: a worker restart, or a tick that never ran, loses nothing.

Each topic's job settles its item when it ends (`settle_item`): done, whatever the
outcome (a skip, a fallback), or failed when it fails for good. Settling moves an item
out of `enqueued` once, so a job run twice counts once. When every topic was enqueued
and every item settled, the campaign is finished, and `reevaluation.finished` recorded
in the same transaction. An item whose job never came back within ITEM_TIMEOUT (a send
lost after the commit, a job lost with its broker) is sent once more; after a second
timeout it counts as failed, so every campaign finishes.
"""

from __future__ import annotations

import datetime as dt
import logging
import uuid
from collections.abc import Callable
from dataclasses import astuple, dataclass

from sqlalchemy import func, select, update
from sqlalchemy.dialects.postgresql import insert

from shared.infra.db.uow import UnitOfWork
from shared.infra.metrics import REEVALUATION_TOPICS, count_on_commit
from shared.llm.prompts import SUMMARY_PROMPT_VERSION
from shared.reevaluations.budget import Demand, share_budget
from shared.reevaluations.models import ReevaluationCampaign, ReevaluationItem
from shared.reevaluations.selection import Maker, Selection, reevaluation_job, topics_after
from shared.topics.models import Topic
from shared.webhooks.events import REEVALUATION_FINISHED, record_event

log = logging.getLogger(__name__)

TICK_S = 1.0  # beat's period
# Topics one tick enqueues, over all campaigns: the most the llm queue gets a second.
MAX_PER_TICK = 1000
# After a pause (no tick ran for a while: beat down, the fast queue backed up) a campaign
# makes up at most this many seconds of its rate, not the whole gap at once.
BURST_S = 2.0
# Longer than a job can take once started (its retries' backoff included) plus a deep
# queue's wait; the broker's own redelivery (its visibility timeout) comes first.
ITEM_TIMEOUT = dt.timedelta(minutes=30)
MAX_ATTEMPTS = 2  # jobs sent for one item before it counts as failed

Campaign = ReevaluationCampaign
Item = ReevaluationItem


def owed(*, rate: float, elapsed_s: float, limit: int = MAX_PER_TICK) -> tuple[int, float]:
    """Topics to enqueue after `elapsed_s` at `rate` a second (at most `limit`, and a
    burst's worth after a pause), and the seconds of credit left over for the next tick:
    a rate below one a tick still adds up."""
    # The cap keeps one more topic than a burst: a slow rate's saved-up fraction survives.
    budget = min(rate * max(elapsed_s, 0.0), rate * BURST_S + 1.0)
    count = min(int(budget), limit)
    return count, (budget - count) / rate


def selection_of(campaign: ReevaluationCampaign) -> Selection:
    stale_for = None
    if campaign.stale_only and campaign.current_prompt_version and campaign.current_model:
        stale_for = Maker(campaign.current_prompt_version, campaign.current_model)
    return Selection(
        org_id=campaign.org_id, agent_id=campaign.agent_id, user_id=campaign.user_id,
        since=campaign.since, until=campaign.created_at, stale_for=stale_for,
    )  # fmt: skip


@dataclass(frozen=True)
class Tick:
    enqueued: int = 0  # topics enqueued for the first time
    resent: int = 0  # jobs sent again for items overdue
    given_up: int = 0  # items overdue twice, counted failed
    finished: int = 0  # campaigns that finished
    skipped: int = 0  # topics settled at once: current already, or another campaign's

    def __add__(self, other: Tick) -> Tick:
        return Tick(*(a + b for a, b in zip(astuple(self), astuple(other), strict=True)))


def advance_campaigns(
    *, new_uow: Callable[[], UnitOfWork], now: dt.datetime, model: str | None = None
) -> Tick:
    """Beat, every TICK_S: each running campaign advanced in a transaction of its own, by
    its share of MAX_PER_TICK (budget.py: round robin across orgs, then their campaigns).
    `model`, the configured one: topics it summarized already are skipped (None: none)."""
    with new_uow() as uow:
        running = uow.session.execute(
            select(Campaign.id, Campaign.org_id, Campaign.rate, Campaign.advanced_at,
                   Campaign.exhausted)
            .where(Campaign.state == "running")
            .order_by(Campaign.advanced_at)
        ).all()  # fmt: skip
    demands = [
        Demand(row.id, row.org_id, 0 if row.exhausted else owed(
            rate=row.rate, elapsed_s=(now - row.advanced_at).total_seconds()
        )[0])
        for row in running
    ]  # fmt: skip
    shares = share_budget(demands, MAX_PER_TICK)
    current = None if model is None else Maker(SUMMARY_PROMPT_VERSION, model)
    total = Tick()
    for demand in demands:
        # A campaign without a share this tick still has its overdue items looked at; its
        # time passed stays owed for the next tick.
        with new_uow() as uow:
            tick = advance_campaign(
                uow=uow, campaign_id=demand.campaign_id, now=now,
                limit=shares[demand.campaign_id], current=current,
            )  # fmt: skip
            uow.commit()
        total += tick
    total += _release_abandoned(new_uow, now)
    return total


def advance_campaign(
    *,
    uow: UnitOfWork,
    campaign_id: uuid.UUID,
    now: dt.datetime,
    limit: int = MAX_PER_TICK,
    current: Maker | None = None,
) -> Tick:
    """One tick of one campaign, in `uow`'s transaction (the caller commits)."""
    # Waits for a settling job's short transaction; a cancel waits for this one.
    campaign = uow.session.scalars(
        select(Campaign).where(Campaign.id == campaign_id).with_for_update(),
        execution_options={"populate_existing": True},
    ).first()
    if campaign is None or campaign.state != "running":
        return Tick()
    enqueued, skipped = (0, 0) if campaign.exhausted else _enqueue_owed(
        uow, campaign, now, limit, current
    )  # fmt: skip
    resent, given_up = _overdue(uow, campaign, now)
    uow.session.flush()
    finished = finish_if_settled(uow=uow, campaign_id=campaign.id)
    return Tick(enqueued, resent, given_up, int(finished), skipped)


def _enqueue_owed(
    uow: UnitOfWork,
    campaign: ReevaluationCampaign,
    now: dt.datetime,
    limit: int,
    current: Maker | None,
) -> tuple[int, int]:
    """(topics enqueued, topics skipped) of what the campaign is owed, at most `limit`."""
    elapsed_s = (now - campaign.advanced_at).total_seconds()
    count, leftover_s = owed(rate=campaign.rate, elapsed_s=elapsed_s, limit=limit)
    if count == 0:
        return 0, 0  # the time passed stays owed: advanced_at does not move
    rows = topics_after(
        uow=uow, selection=selection_of(campaign), after=campaign.cursor, limit=count,
        current=current,
    )  # fmt: skip
    claimed: set[uuid.UUID] = set()
    skipped: set[uuid.UUID] = set()
    if rows:
        claimed = _claim(uow, campaign.id, [row.id for row in rows if not row.current], now)
        skipped = _settle_skipped(
            uow, campaign.id, [r.id for r in rows if r.id not in claimed], now
        )
        for topic_id, status, _ in rows:
            if topic_id in claimed:
                uow.enqueue(
                    reevaluation_job(
                        topic_id=topic_id,
                        status=status,
                        campaign_id=campaign.id,
                        org_id=campaign.org_id,
                    )
                )
        campaign.cursor = rows[-1].id
        campaign.enqueued += len(claimed) + len(skipped)
        campaign.done += len(skipped)
        count_on_commit(
            uow.session, REEVALUATION_TOPICS.labels("enqueued"), len(claimed) + len(skipped)
        )
        count_on_commit(uow.session, REEVALUATION_TOPICS.labels("done"), len(skipped))
    if len(rows) < count:  # none left after the cursor
        campaign.exhausted = True
        campaign.advanced_at = now
    else:
        campaign.advanced_at = now - dt.timedelta(seconds=leftover_s)
    return len(claimed), len(skipped)


def _claim(
    uow: UnitOfWork, campaign_id: uuid.UUID, topic_ids: list[uuid.UUID], now: dt.datetime
) -> set[uuid.UUID]:
    """The topics whose claim this campaign took: an item in flight. A topic another
    campaign has in flight (uq_reevaluation_items_in_flight) is not among them; a claim
    taken by a transaction not committed yet is waited for, so two ticks never both win."""
    if not topic_ids:
        return set()
    items = [{"campaign_id": campaign_id, "topic_id": t, "enqueued_at": now} for t in topic_ids]
    return set(
        uow.session.scalars(
            insert(Item).values(items).on_conflict_do_nothing().returning(Item.topic_id)
        )
    )


def _settle_skipped(
    uow: UnitOfWork, campaign_id: uuid.UUID, topic_ids: list[uuid.UUID], now: dt.datetime
) -> set[uuid.UUID]:
    """Topics current already, or in flight for another campaign: done at once, no job.

    Their jobs' own check would skip a current topic too, but two campaigns' jobs for one
    topic both find it stale before either's model call: only the claim prevents that.
    """
    if not topic_ids:
        return set()
    items = [
        {"campaign_id": campaign_id, "topic_id": t, "enqueued_at": now, "status": "done"}
        for t in topic_ids
    ]
    return set(
        uow.session.scalars(
            insert(Item).values(items).on_conflict_do_nothing().returning(Item.topic_id)
        )
    )


def _overdue(uow: UnitOfWork, campaign: ReevaluationCampaign, now: dt.datetime) -> tuple[int, int]:
    """Items whose job has not come back: sent again once, then counted failed."""
    rows = uow.session.execute(
        select(Item.topic_id, Item.attempts, Topic.status)
        .outerjoin(Topic, Topic.id == Item.topic_id)
        .where(
            Item.campaign_id == campaign.id,
            Item.status == "enqueued",
            Item.enqueued_at < now - ITEM_TIMEOUT,
        )
        .order_by(Item.enqueued_at)
        .limit(MAX_PER_TICK)
    ).all()
    again = [row for row in rows if row.attempts < MAX_ATTEMPTS]
    lost = [row.topic_id for row in rows if row.attempts >= MAX_ATTEMPTS]
    if again:
        uow.session.execute(
            update(Item)
            .where(Item.campaign_id == campaign.id, Item.topic_id.in_([r.topic_id for r in again]))
            .values(attempts=Item.attempts + 1, enqueued_at=now)
            .execution_options(synchronize_session=False)
        )
        for row in again:
            job = reevaluation_job(
                topic_id=row.topic_id, status=row.status, campaign_id=campaign.id,
                org_id=campaign.org_id,
            )  # fmt: skip
            uow.enqueue(job)
        log.warning(
            "re-evaluation %s: %d jobs never came back; sent again", campaign.id, len(again)
        )
    if lost:
        uow.session.execute(
            update(Item)
            .where(Item.campaign_id == campaign.id, Item.topic_id.in_(lost))
            .values(status="failed")
            .execution_options(synchronize_session=False)
        )
        campaign.failed += len(lost)
        count_on_commit(uow.session, REEVALUATION_TOPICS.labels("failed"), len(lost))
        log.warning("re-evaluation %s: %d topics failed (no job came back)", campaign.id, len(lost))
    return len(again), len(lost)


def _release_abandoned(new_uow: Callable[[], UnitOfWork], now: dt.datetime) -> Tick:
    """Items of cancelled campaigns whose job never came back: counted failed, so their
    topics' claims go (the pump times out only a running campaign's items)."""
    with new_uow() as uow:
        abandoned = uow.session.scalars(
            select(Item.campaign_id)
            .join(Campaign, Campaign.id == Item.campaign_id)
            .where(
                Item.status == "enqueued",
                Item.enqueued_at < now - ITEM_TIMEOUT * MAX_ATTEMPTS,
                Campaign.state != "running",
            )
            .distinct()
            .limit(MAX_PER_TICK)
        ).all()
    lost = 0
    for campaign_id in abandoned:
        with new_uow() as uow:
            # The campaign's lock first, as settle_item takes it.
            uow.session.execute(
                select(Campaign.id).where(Campaign.id == campaign_id).with_for_update()
            )
            released = len(
                uow.session.scalars(
                    update(Item)
                    .where(
                        Item.campaign_id == campaign_id,
                        Item.status == "enqueued",
                        Item.enqueued_at < now - ITEM_TIMEOUT * MAX_ATTEMPTS,
                    )
                    .values(status="failed")
                    .returning(Item.topic_id)
                    .execution_options(synchronize_session=False)
                ).all()
            )
            uow.session.execute(
                update(Campaign)
                .where(Campaign.id == campaign_id)
                .values(failed=Campaign.failed + released)
                .execution_options(synchronize_session=False)
            )
            count_on_commit(uow.session, REEVALUATION_TOPICS.labels("failed"), released)
            uow.commit()
        lost += released
    if lost:
        log.warning("%d topics of cancelled re-evaluations failed (no job came back)", lost)
    return Tick(given_up=lost)


def settle_item(
    *, uow: UnitOfWork, campaign_id: uuid.UUID, topic_id: uuid.UUID, failed: bool
) -> bool:
    """The topic's job ended: done (any outcome), or failed for good. False when the item
    was settled already (a job run twice) or is unknown; the caller commits."""
    # The campaign's lock first, as a tick takes it: never one waiting on the other's item.
    locked = uow.session.scalars(
        select(Campaign.id).where(Campaign.id == campaign_id).with_for_update()
    ).first()
    if locked is None:
        return False
    status = "failed" if failed else "done"
    moved = uow.session.scalars(
        update(Item)
        .where(
            Item.campaign_id == campaign_id, Item.topic_id == topic_id, Item.status == "enqueued"
        )
        .values(status=status)
        .returning(Item.topic_id)
        .execution_options(synchronize_session=False)
    ).first()
    if moved is None:
        return False
    counter = Campaign.failed if failed else Campaign.done
    uow.session.execute(
        update(Campaign)
        .where(Campaign.id == campaign_id)
        .values({counter: counter + 1})
        .execution_options(synchronize_session=False)
    )
    count_on_commit(uow.session, REEVALUATION_TOPICS.labels(status))
    finish_if_settled(uow=uow, campaign_id=campaign_id)
    return True


def finish_if_settled(*, uow: UnitOfWork, campaign_id: uuid.UUID) -> bool:
    """Finish the running campaign once every topic was enqueued and every item settled;
    its total becomes what was enqueued (topics erased since the count are not). An
    org's campaign records `reevaluation.finished` in this same transaction."""
    row = uow.session.execute(
        update(Campaign)
        .where(
            Campaign.id == campaign_id,
            Campaign.state == "running",
            Campaign.exhausted,
            Campaign.done + Campaign.failed >= Campaign.enqueued,
        )
        .values(state="finished", finished_at=func.clock_timestamp(), total=Campaign.enqueued)
        .returning(Campaign.org_id, Campaign.total, Campaign.done, Campaign.failed)
        .execution_options(synchronize_session=False)
    ).first()
    if row is None:
        return False
    log.info("re-evaluation %s finished: %d done, %d failed", campaign_id, row.done, row.failed)
    if row.org_id is not None:
        data = {
            "reevaluationId": str(campaign_id), "state": "finished", "total": row.total,
            "done": row.done, "failed": row.failed,
        }  # fmt: skip
        record_event(uow, org_id=row.org_id, type=REEVALUATION_FINISHED, data=data)
    return True


def running_totals(*, uow: UnitOfWork) -> tuple[int, int]:
    """(running campaigns, their topics not settled yet), for the worker's gauges."""
    row = uow.session.execute(
        select(
            func.count(),
            func.coalesce(
                func.sum(func.greatest(Campaign.total - Campaign.done - Campaign.failed, 0)), 0
            ),
        ).where(Campaign.state == "running")
    ).one()
    return int(row[0]), int(row[1])
