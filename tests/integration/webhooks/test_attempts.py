"""One attempt at a time per delivery: a claim is a lease, a duplicate job finds nothing,
an attempt overtaken by a newer one records nothing, and the dispatcher finds what a
lost job left owed. A redirect to a private address is refused, not followed."""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Iterator

import httpx
import pytest
from sqlalchemy import update
from sqlalchemy.orm import Session, sessionmaker

from shared.auth.models import Org
from shared.infra.db.uow import UnitOfWork
from shared.infra.queue import DELIVER_WEBHOOK, RecordingQueue
from shared.webhooks import delivery
from shared.webhooks.delivery import Answer, Attempt, Policy, attempt, claim, overdue_jobs, settle
from shared.webhooks.events import FACTS_CHANGED, record_event
from shared.webhooks.models import WebhookDelivery
from shared.webhooks.secrets import SecretBox
from shared.webhooks.service import subscribe
from tests.webhook_receiver import Answer as ReceiverAnswer
from tests.webhook_receiver import Receiver

POLICY = Policy(max_attempts=3, backoff_s=1.0, timeout_s=2.0, allow_private=True)
BOX = SecretBox(None)
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


@pytest.fixture
def http() -> Iterator[httpx.Client]:
    with httpx.Client() as client:
        yield client


def test_a_redirect_to_a_private_address_is_refused_not_followed(
    http: httpx.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_check = delivery.check_target
    with Receiver() as receiver:
        receiver.answer_with(
            lambda _r, _n: ReceiverAnswer(307, location="http://169.254.169.254/latest/meta-data")
        )

        def receiver_is_public(url: str, *, allow_private: bool) -> None:
            # Stands in for DNS: the receiver on 127.0.0.1 counts as a public host here.
            if not url.startswith(receiver.url):
                real_check(url, allow_private=allow_private)

        monkeypatch.setattr(delivery, "check_target", receiver_is_public)
        claimed = Attempt(
            delivery_id=1, webhook_id=uuid.uuid4(), event_id=uuid.uuid4(),
            url=receiver.url + "/hook", sealed_secret=BOX.seal(SECRET),
            body="{}", number=1,
        )  # fmt: skip

        answer = attempt(
            claimed, http=http, box=BOX, policy=Policy(3, 1.0, 2.0, allow_private=False)
        )

    assert answer.status_code is None and not answer.delivered
    assert answer.error is not None and "169.254.169.254" in answer.error
    assert [r.path for r in receiver.requests] == ["/hook"]
