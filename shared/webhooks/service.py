"""An org's webhook subscriptions and their deliveries (the API's side of webhooks)."""

from __future__ import annotations

import datetime as dt
import logging
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from sqlalchemy import delete, func, select

from shared.domain.errors import Conflict, Invalid, NotFound
from shared.infra.db.uow import UnitOfWork
from shared.infra.sealing import SecretBox
from shared.infra.targets import UnsafeTarget, check_target
from shared.webhooks.delivery import overdue_jobs
from shared.webhooks.events import EVENT_TYPES, PURGE_PASS_S, purge_old_events
from shared.webhooks.models import Webhook, WebhookDelivery, WebhookEvent
from shared.webhooks.secrets import checked_secret, new_secret

log = logging.getLogger(__name__)

# Subscriptions per org: every event is one delivery per matching subscription.
MAX_WEBHOOKS_PER_ORG = 20
# GET …/deliveries answers the newest this many.
DELIVERIES_PAGE = 100


@dataclass(frozen=True)
class Subscribed:
    webhook: Webhook
    secret: str  # shown once, in the answer that created it


def subscribe(
    *,
    uow: UnitOfWork,
    org_id: uuid.UUID,
    url: str,
    events: Sequence[str],
    secret: str | None,
    box: SecretBox,
    allow_private: bool,
) -> Subscribed:
    """A new subscription of the org to `events` at `url`, signed with `secret` (or a new one)."""
    try:
        check_target(url, allow_private=allow_private)
    except UnsafeTarget as exc:
        log.info("org %s: webhook url refused: %s", org_id, exc.detail)
        raise Invalid(f"url: {exc}") from None
    wanted = _checked_events(events)
    secret = new_secret() if secret is None else checked_secret(secret)
    # Before anything is written: a generated secret is refused, as a given one, when
    # the server has no key to seal it with.
    sealed = box.seal(secret)
    # One subscription at a time per org past this point: the count stays exact under
    # concurrent requests (a transaction-scoped advisory lock on the org).
    uow.session.execute(select(func.pg_advisory_xact_lock(func.hashtextextended(str(org_id), 7))))
    count = uow.session.scalar(select(func.count()).where(Webhook.org_id == org_id))
    if (count or 0) >= MAX_WEBHOOKS_PER_ORG:
        raise Conflict(f"an org may have at most {MAX_WEBHOOKS_PER_ORG} webhooks; delete one first")
    webhook = Webhook(org_id=org_id, url=url, events=wanted, sealed_secret=sealed)
    uow.session.add(webhook)
    uow.session.flush()
    uow.session.refresh(webhook)  # its created_at, from the database
    return Subscribed(webhook=webhook, secret=secret)


def _checked_events(events: Sequence[str]) -> list[str]:
    if not events:
        raise Invalid(f"events: name at least one of {', '.join(EVENT_TYPES)}")
    unknown = [event for event in events if event not in EVENT_TYPES]
    if unknown:
        raise Invalid(
            f"events: unknown type {unknown[0][:80]!r}; the types are {', '.join(EVENT_TYPES)}"
        )
    return sorted(set(events), key=EVENT_TYPES.index)


def list_webhooks(*, uow: UnitOfWork, org_id: uuid.UUID) -> list[Webhook]:
    return list(
        uow.session.scalars(
            select(Webhook).where(Webhook.org_id == org_id).order_by(Webhook.created_at, Webhook.id)
        )
    )


def unsubscribe(*, uow: UnitOfWork, org_id: uuid.UUID, webhook_id: uuid.UUID) -> None:
    """Delete the subscription and its deliveries: nothing more is sent to it."""
    deleted = uow.session.execute(
        delete(Webhook).where(Webhook.id == webhook_id, Webhook.org_id == org_id)
    )
    if not deleted.rowcount:  # type: ignore[attr-defined]
        raise NotFound("no such webhook")


@dataclass(frozen=True)
class DeliveryView:
    """A delivery as the deliveries list shows it."""

    id: int
    event_id: uuid.UUID
    type: str
    status: str
    attempts: int
    last_status_code: int | None
    last_error: str | None
    created_at: dt.datetime
    delivered_at: dt.datetime | None
    next_attempt_at: dt.datetime | None  # None once delivered or dead


def list_deliveries(
    *, uow: UnitOfWork, org_id: uuid.UUID, webhook_id: uuid.UUID
) -> list[DeliveryView]:
    """The subscription's newest deliveries first; NotFound for another org's."""
    owner = uow.session.scalar(select(Webhook.org_id).where(Webhook.id == webhook_id))
    if owner != org_id:
        raise NotFound("no such webhook")
    rows = uow.session.execute(
        select(WebhookDelivery, WebhookEvent.type)
        .join(WebhookEvent, WebhookEvent.id == WebhookDelivery.event_id)
        .where(WebhookDelivery.webhook_id == webhook_id)
        .order_by(WebhookDelivery.id.desc())
        .limit(DELIVERIES_PAGE)
    )
    return [_view(delivery, event_type) for delivery, event_type in rows]


def _view(delivery: WebhookDelivery, event_type: str) -> DeliveryView:
    owed = delivery.status in ("pending", "failed")
    return DeliveryView(
        id=delivery.id,
        event_id=delivery.event_id,
        type=event_type,
        status=delivery.status,
        attempts=delivery.attempts,
        last_status_code=delivery.last_status_code,
        last_error=delivery.last_error,
        created_at=delivery.created_at,
        delivered_at=delivery.delivered_at,
        next_attempt_at=delivery.next_attempt_at if owed else None,
    )


def dispatch_overdue(
    *, new_uow: Callable[[], UnitOfWork], now: dt.datetime, period_s: float
) -> dict[str, int]:
    """Beat: a job per delivery overdue past its period (sent on commit), then old events
    purged in batches for at most half the period (counts of both)."""
    with new_uow() as uow:
        jobs = overdue_jobs(uow, now=now, grace=dt.timedelta(seconds=period_s))
        for job in jobs:
            uow.enqueue(job)
        uow.commit()
    # Half the period at most: a pass ends before beat sends the next one.
    purged = purge_old_events(new_uow=new_uow, now=now, budget_s=min(PURGE_PASS_S, period_s / 2))
    return {"sent": len(jobs), "purged": purged}
