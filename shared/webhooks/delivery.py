"""Delivering webhook events: one signed POST per attempt, retried until delivered or dead.

A delivery job (worker/tasks.py `deliver_webhook`) runs `deliver`:

1. It takes one of the subscription's few slots and one of its org's
   (`WebhookSlots`, in Redis, both in one script). A receiver that answers slowly
   therefore holds at most SLOTS_PER_WEBHOOK workers, whatever its backlog, and an
   org's receivers at most DRIFTLESS_WEBHOOKS_PER_ORG. A job that finds the
   subscription's slots taken leaves its delivery to their holders; one that finds
   the org's taken is put back for later (one such job per subscription waits, the
   others leave their delivery to it) and counts in driftless_limit_hits_total.
2. Holding the slot, it claims the delivery (`claim`: due, owed, not being attempted)
   and makes the attempt (attempt.py), outside any transaction: the Standard Webhooks
   headers and the event's body as recorded, to a checked address, within one deadline.
3. `settle` records the answer: delivered; or failed, due again after an exponential
   backoff with jitter; or dead after DRIFTLESS_WEBHOOK_MAX_ATTEMPTS.
4. It goes on with the subscription's next due delivery while one more attempt ends,
   at its deadline, within DRAIN_BUDGET_S; then frees the slots and, if more are due,
   sends a job for the next.

Claiming moves `next_attempt_at` a lease ahead, so a second job for the same delivery
finds nothing to do, and a worker killed mid-attempt leaves it due again once the lease
ends; the beat's dispatcher (`overdue_jobs`) sends a job for every delivery overdue by
more than its period, which is how nothing is lost. The times nest (policy.py).
Receivers deduplicate by `webhook-id`, the event's id, the same on every attempt.
"""

from __future__ import annotations

import datetime as dt
import functools
import logging
import random
import time
import uuid
from collections.abc import Callable

import httpx
from sqlalchemy import text

from shared.infra.db.uow import UnitOfWork
from shared.infra.metrics import (
    LIMIT_HITS,
    WEBHOOK_ATTEMPT_SECONDS,
    WEBHOOK_DELIVERIES,
    count_on_commit,
)
from shared.infra.queue import DELIVER_WEBHOOK, Job
from shared.infra.sealing import SecretBox
from shared.webhooks.attempt import Answer, Attempt, attempt
from shared.webhooks.policy import DRAIN_BUDGET_S, Policy
from shared.webhooks.slots import ORG_WAIT_S, Slot, WebhookSlots

log = logging.getLogger(__name__)

MAX_BACKOFF_S = 6 * 3600.0
# A retry due within this is sent as a job with a countdown; a later one is left to the
# dispatcher (a broker holds a countdown job in a worker's memory until it is due).
COUNTDOWN_LIMIT_S = 300.0
DISPATCH_BATCH = 1000


_CLAIM = """
    UPDATE webhook_deliveries AS d
    SET attempts = d.attempts + 1, next_attempt_at = :now + :lease
    FROM webhooks AS w, webhook_events AS e
    WHERE d.id = (
        SELECT id FROM webhook_deliveries
        WHERE {which} AND status IN ('pending', 'failed') AND next_attempt_at <= :now
        ORDER BY next_attempt_at, id
        LIMIT 1
        FOR UPDATE SKIP LOCKED
    ) AND w.id = d.webhook_id AND e.id = d.event_id
    RETURNING d.id, d.webhook_id, d.event_id, w.url, w.sealed_secret, e.body, d.attempts
"""
_CLAIM_DELIVERY = text(_CLAIM.format(which="id = :id"))
_CLAIM_NEXT_OF_WEBHOOK = text(_CLAIM.format(which="webhook_id = :id"))


def claim(
    uow: UnitOfWork, *, delivery_id: int | None = None, webhook_id: uuid.UUID | None = None,
    now: dt.datetime, lease: dt.timedelta,
) -> Attempt | None:  # fmt: skip
    """Claim the delivery (or the webhook's next due one) for an attempt; None if it is
    not owed, not due, or being attempted."""
    statement = _CLAIM_DELIVERY if delivery_id is not None else _CLAIM_NEXT_OF_WEBHOOK
    key = delivery_id if delivery_id is not None else webhook_id
    row = uow.connection().execute(statement, {"id": key, "now": now, "lease": lease}).first()
    return None if row is None else Attempt(*row)


def backoff_s(attempts: int, *, base_s: float, rng: Callable[[], float] = random.random) -> float:
    """The wait after the `attempts`-th failed attempt: doubling from `base_s`, capped at
    6 h, with equal jitter (half fixed, half random) so receivers that failed together
    are not retried together."""
    doublings = min(attempts - 1, 64)  # far past the cap already; 2.0 ** 1024 overflows
    ceiling = min(MAX_BACKOFF_S, base_s * 2.0**doublings)
    return ceiling / 2 + rng() * ceiling / 2


_SETTLE = text(
    """
    UPDATE webhook_deliveries
    SET status = :status, last_status_code = :code, last_error = :error,
        next_attempt_at = :next_at, delivered_at = :delivered_at
    WHERE id = :id AND attempts = :number AND status IN ('pending', 'failed')
    """
)


def settle(
    uow: UnitOfWork, attempt: Attempt, answer: Answer, *, now: dt.datetime, policy: Policy
) -> Job | None:
    """Record the attempt's answer; the job of the retry when it is due soon enough for
    a countdown (a later one is the dispatcher's). An attempt that a newer one overtook
    (its lease ended) records nothing."""
    retry_in: float | None = None
    if answer.delivered:
        status = "delivered"
    elif attempt.number >= policy.max_attempts:
        status = "dead"
    else:
        status = "failed"
        retry_in = backoff_s(attempt.number, base_s=policy.backoff_s)
    next_at = now + dt.timedelta(seconds=retry_in or 0)
    recorded = uow.connection().execute(
        _SETTLE,
        {
            "id": attempt.delivery_id, "number": attempt.number, "status": status,
            "code": answer.status_code, "error": answer.error, "next_at": next_at,
            "delivered_at": now if answer.delivered else None,
        },
    )  # fmt: skip
    if not recorded.rowcount:
        return None
    count_on_commit(uow.session, WEBHOOK_DELIVERIES.labels(status))
    if status == "dead":
        log.warning(
            "webhook delivery %s of event %s is dead after %d attempts: %s",
            attempt.delivery_id, attempt.event_id, attempt.number,
            answer.error or f"HTTP {answer.status_code}",
        )  # fmt: skip
    if retry_in is None or retry_in > COUNTDOWN_LIMIT_S:
        return None
    return Job(DELIVER_WEBHOOK, {"delivery_id": attempt.delivery_id}, countdown=retry_in)


_OWNER = text(
    "SELECT d.webhook_id, w.org_id FROM webhook_deliveries AS d"
    " JOIN webhooks AS w ON w.id = d.webhook_id WHERE d.id = :id"
)


def deliver(
    *,
    new_uow: Callable[[], UnitOfWork],
    slots: WebhookSlots,
    http: httpx.Client,
    box: SecretBox,
    policy: Policy,
    delivery_id: int,
) -> int:
    """The deliver_webhook job: attempt this delivery and, holding its subscription's
    slot, the subscription's other due ones. Returns how many attempts it made."""
    started = time.monotonic()
    with new_uow() as uow:
        owner = uow.connection().execute(_OWNER, {"id": delivery_id}).first()
    if owner is None:  # the subscription was deleted, and its deliveries with it
        return 0
    webhook_id, org_id = owner
    with slots.slot(webhook_id, org_id) as slot:
        if slot is not Slot.HELD:
            _wait_for_slot(new_uow, slot, org_id=org_id, delivery_id=delivery_id)
            return 0
        attempt_one = functools.partial(
            _attempt_one, new_uow=new_uow, http=http, box=box, policy=policy
        )
        made = int(attempt_one(delivery_id=delivery_id))
        # One more only if it ends, at its deadline, within the budget: the job stays
        # within its hard time limit (Policy.time_limit_s), and so within its lease.
        while time.monotonic() - started + policy.timeout_s <= DRAIN_BUDGET_S and attempt_one(
            webhook_id=webhook_id
        ):
            made += 1
    # Deliveries whose jobs found every slot taken: the next one gets a job now.
    with new_uow() as uow:
        due = (
            uow.connection()
            .execute(
                text(
                    "SELECT id FROM webhook_deliveries WHERE webhook_id = :w"
                    " AND status IN ('pending', 'failed') AND next_attempt_at <= now()"
                    " ORDER BY next_attempt_at, id LIMIT 1"
                ),
                {"w": webhook_id},
            )
            .scalar()
        )
        if due is not None:
            uow.enqueue(Job(DELIVER_WEBHOOK, {"delivery_id": due}))
        uow.commit()
    return made


def _wait_for_slot(
    new_uow: Callable[[], UnitOfWork], slot: Slot, *, org_id: uuid.UUID, delivery_id: int
) -> None:
    """A job without a slot: the subscription's holders will reach its delivery (the
    dispatcher if they do not); past the org's limit, the subscription's waiting job
    comes back later, and the others leave their deliveries to it."""
    if slot is Slot.SUBSCRIPTION_FULL:
        return
    LIMIT_HITS.labels("webhooks").inc()
    log.info("webhook delivery %s: org %s has every webhook slot taken", delivery_id, org_id)
    if slot is Slot.ORG_WAIT:
        countdown = ORG_WAIT_S + random.random()
        with new_uow() as uow:
            uow.enqueue(Job(DELIVER_WEBHOOK, {"delivery_id": delivery_id}, countdown=countdown))
            uow.commit()


def _attempt_one(
    *, new_uow: Callable[[], UnitOfWork], http: httpx.Client, box: SecretBox, policy: Policy,
    delivery_id: int | None = None, webhook_id: uuid.UUID | None = None,
) -> bool:  # fmt: skip
    with new_uow() as uow:
        claimed = claim(
            uow, delivery_id=delivery_id, webhook_id=webhook_id,
            now=dt.datetime.now(dt.UTC), lease=policy.lease,
        )  # fmt: skip
        uow.commit()
    if claimed is None:
        return False
    started = time.perf_counter()
    try:
        answer = attempt(claimed, http=http, box=box, policy=policy)
    except Exception:
        # Still an attempt: left unsettled, the delivery would be claimed again after
        # every lease, past the last attempt, and never be dead.
        log.exception("webhook delivery %s: the attempt raised", claimed.delivery_id)
        answer = Answer(None, "internal error")
    WEBHOOK_ATTEMPT_SECONDS.observe(time.perf_counter() - started)
    with new_uow() as uow:
        retry = settle(uow, claimed, answer, now=dt.datetime.now(dt.UTC), policy=policy)
        if retry is not None:
            uow.enqueue(retry)
        uow.commit()
    return True


def overdue_jobs(uow: UnitOfWork, *, now: dt.datetime, grace: dt.timedelta) -> list[Job]:
    """The dispatcher (beat, every DRIFTLESS_RECONCILE_S): a job for each delivery overdue
    by more than `grace` (that period), whose job was lost, outlived a killed worker, or
    was never sent (a long backoff). A delivery whose job is merely queued behind others
    gets a second one, which finds nothing to do."""
    ids = (
        uow.connection()
        .execute(
            text(
                "SELECT id FROM webhook_deliveries WHERE status IN ('pending', 'failed')"
                " AND next_attempt_at <= :before ORDER BY next_attempt_at LIMIT :limit"
            ),
            {"before": now - grace, "limit": DISPATCH_BATCH},
        )
        .scalars()
    )
    return [Job(DELIVER_WEBHOOK, {"delivery_id": delivery_id}) for delivery_id in ids]
