"""One attempt at a time per delivery: a claim is a lease, a duplicate job finds nothing,
an attempt overtaken by a newer one records nothing, an attempt that cannot be built is
failed like any other (so is one that raises), and the dispatcher finds what a lost job
left owed."""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Iterator

import httpx
import pytest
import redis
from sqlalchemy import update
from sqlalchemy.orm import Session, sessionmaker

from shared.auth.models import Org
from shared.infra.db.uow import UnitOfWork
from shared.infra.queue import DELIVER_WEBHOOK, Job, RecordingQueue
from shared.infra.sealing import SecretBox
from shared.webhooks.attempt import Answer, attempt
from shared.webhooks.delivery import claim, deliver, overdue_jobs, settle
from shared.webhooks.events import FACTS_CHANGED, record_event
from shared.webhooks.models import Webhook, WebhookDelivery
from shared.webhooks.policy import Policy
from shared.webhooks.service import dispatch_overdue, subscribe
from shared.webhooks.slots import WebhookSlots
from tests.services import SEALING_KEY

POLICY = Policy(max_attempts=3, backoff_s=1.0, timeout_s=2.0, allow_private=True)
BOX = SecretBox(SEALING_KEY)
# Long before any row other tests committed: the dispatcher's "overdue" finds only ours.
NOW = dt.datetime(2000, 1, 1, 12, 0, tzinfo=dt.UTC)
SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"


@pytest.fixture
def uow(session_factory: sessionmaker[Session]) -> Iterator[UnitOfWork]:
    with UnitOfWork(session_factory, RecordingQueue()) as uow:
        yield uow


@pytest.fixture
def delivery_id(uow: UnitOfWork) -> int:
    """One pending delivery of a new org's subscription, due at NOW."""
    org = Org(name=f"org-{uuid.uuid4().hex[:8]}")
    uow.session.add(org)
    uow.session.flush()
    webhook = subscribe(
        uow=uow, org_id=org.id, url="http://127.0.0.1:9/", events=[FACTS_CHANGED],
        secret=None, box=BOX, allow_private=True,
    ).webhook  # fmt: skip
    record_event(uow, org_id=org.id, type=FACTS_CHANGED, data={"agentId": "a", "userId": "u"})
    return int(
        uow.session.execute(
            update(WebhookDelivery)
            .where(WebhookDelivery.webhook_id == webhook.id)
            .values(next_attempt_at=NOW)
            .returning(WebhookDelivery.id)
        ).scalar_one()
    )


def test_a_claimed_delivery_cannot_be_claimed_again_until_its_lease_ends(
    uow: UnitOfWork, delivery_id: int
) -> None:
    first = claim(uow, delivery_id=delivery_id, now=NOW, lease=POLICY.lease)

    assert first is not None and first.number == 1
    duplicate = claim(uow, delivery_id=delivery_id, now=NOW, lease=POLICY.lease)
    assert duplicate is None  # a second job for the same delivery finds it taken
    after_lease = NOW + POLICY.lease
    second = claim(uow, delivery_id=delivery_id, now=after_lease, lease=POLICY.lease)
    assert second is not None and second.number == 2  # the worker holding it was killed


def test_an_attempt_overtaken_by_a_newer_one_records_nothing(
    uow: UnitOfWork, delivery_id: int
) -> None:
    stale = claim(uow, delivery_id=delivery_id, now=NOW, lease=POLICY.lease)
    fresh = claim(uow, delivery_id=delivery_id, now=NOW + POLICY.lease, lease=POLICY.lease)
    assert stale is not None and fresh is not None

    assert settle(uow, stale, Answer(204), now=NOW, policy=POLICY) is None
    row = uow.session.get(WebhookDelivery, delivery_id)
    assert row is not None and row.status == "pending"
    settle(uow, fresh, Answer(204), now=NOW, policy=POLICY)
    uow.session.refresh(row)
    assert (row.status, row.attempts, row.last_status_code) == ("delivered", 2, 204)


def test_a_failed_attempt_is_retried_after_its_backoff_and_the_last_one_is_dead(
    uow: UnitOfWork, delivery_id: int
) -> None:
    statuses = []
    now = NOW
    for _ in range(POLICY.max_attempts):
        claimed = claim(uow, delivery_id=delivery_id, now=now, lease=POLICY.lease)
        assert claimed is not None
        retry = settle(uow, claimed, Answer(None, "ReadTimeout"), now=now, policy=POLICY)
        row = uow.session.get(WebhookDelivery, delivery_id, populate_existing=True)
        assert row is not None
        statuses.append(row.status)
        if retry is not None:
            assert retry.task == DELIVER_WEBHOOK and 0.5 <= (retry.countdown or 0) <= 1 * 2
            assert claim(uow, delivery_id=delivery_id, now=now, lease=POLICY.lease) is None
        now = row.next_attempt_at

    assert statuses == ["failed", "failed", "dead"]
    assert row.last_error == "ReadTimeout"


def test_the_dispatcher_sends_a_job_only_for_deliveries_overdue_past_its_period(
    uow: UnitOfWork, delivery_id: int
) -> None:
    grace = dt.timedelta(seconds=60)

    assert overdue_jobs(uow, now=NOW + grace / 2, grace=grace) == []  # its own job may be queued
    (job,) = overdue_jobs(uow, now=NOW + grace * 2, grace=grace)
    assert job.kwargs == {"delivery_id": delivery_id}
    delivered = update(WebhookDelivery).where(WebhookDelivery.id == delivery_id)
    uow.session.execute(delivered.values(status="delivered"))
    assert overdue_jobs(uow, now=NOW + grace * 2, grace=grace) == []


def test_an_attempt_that_cannot_be_built_is_failed_each_time_and_dead_after_the_last(
    uow: UnitOfWork, delivery_id: int
) -> None:
    # A URL subscribed before such URLs were refused: httpx cannot even build its request.
    row = uow.session.get(WebhookDelivery, delivery_id)
    assert row is not None
    uow.session.execute(
        update(Webhook)
        .where(Webhook.id == row.webhook_id)
        .values(url="http://127.0.0.1:9/ok\r\nX-Inj: 1")
    )
    statuses, now = [], NOW
    with httpx.Client(trust_env=False) as http:
        for _ in range(POLICY.max_attempts):
            claimed = claim(uow, delivery_id=delivery_id, now=now, lease=POLICY.lease)
            assert claimed is not None
            answer = attempt(claimed, http=http, box=BOX, policy=POLICY)
            settle(uow, claimed, answer, now=now, policy=POLICY)
            uow.session.refresh(row)
            statuses.append(row.status)
            now = row.next_attempt_at

    assert statuses == ["failed", "failed", "dead"]
    assert row.attempts == POLICY.max_attempts
    assert (row.last_error or "").startswith("refused target: not a valid URL")


def test_the_dispatcher_sends_the_overdue_jobs_once_its_transaction_committed(
    session_factory: sessionmaker[Session], uow: UnitOfWork, delivery_id: int
) -> None:
    grace = dt.timedelta(seconds=60)
    uow.commit()  # the outbox's own job for the new event goes now
    queue = RecordingQueue()

    done = dispatch_overdue(
        new_uow=lambda: UnitOfWork(session_factory, queue),
        now=NOW + grace * 2,
        period_s=grace.total_seconds(),
    )

    assert done == {"sent": 1, "purged": 0}  # the event is new: it stays
    assert queue.sent == [Job(DELIVER_WEBHOOK, {"delivery_id": delivery_id})]


class BrokenBox(SecretBox):
    """Opening fails in a way no attempt expects: a bug."""

    def open(self, sealed: str) -> str:
        raise RuntimeError("a bug")


def test_an_attempt_that_raises_is_still_an_attempt_and_the_delivery_dies_at_the_last(
    session_factory: sessionmaker[Session], uow: UnitOfWork, delivery_id: int, redis_url: str
) -> None:
    client = redis.Redis.from_url(redis_url)
    slots = WebhookSlots(client, hold=POLICY.lease, per_org=32)
    due_now = (
        update(WebhookDelivery).where(WebhookDelivery.id == delivery_id).values(next_attempt_at=NOW)
    )
    with httpx.Client(trust_env=False) as http:
        for _ in range(POLICY.max_attempts):
            deliver(
                new_uow=lambda: UnitOfWork(session_factory, RecordingQueue()), slots=slots,
                http=http, box=BrokenBox(None), policy=POLICY, delivery_id=delivery_id,
            )  # fmt: skip
            uow.session.execute(due_now)  # past its backoff
    client.close()

    row = uow.session.get(WebhookDelivery, delivery_id, populate_existing=True)
    assert row is not None
    assert (row.status, row.attempts, row.last_error) == (
        "dead",
        POLICY.max_attempts,
        "internal error",
    )
