"""One deadline per attempt (DRIFTLESS_WEBHOOK_TIMEOUT_S): a receiver that trickles its
answer a byte at a time, each byte well within any per-read timeout, is cut off at the
deadline, and its delivery is failed like any other (dead at the last attempt)."""

from __future__ import annotations

import datetime as dt
import time
import uuid
from collections.abc import Iterator

import httpx
import pytest
import redis
from sqlalchemy import update
from sqlalchemy.orm import Session, sessionmaker

from shared.auth.models import Org
from shared.infra.db.uow import UnitOfWork
from shared.infra.queue import RecordingQueue
from shared.infra.sealing import SecretBox
from shared.webhooks.attempt import Answer, Attempt, attempt
from shared.webhooks.deadline import webhook_client
from shared.webhooks.delivery import deliver
from shared.webhooks.events import FACTS_CHANGED, record_event
from shared.webhooks.models import WebhookDelivery
from shared.webhooks.policy import Policy
from shared.webhooks.service import subscribe
from shared.webhooks.slots import WebhookSlots
from tests.helpers import wait_for
from tests.services import SEALING_KEY
from tests.webhook_receiver import Answer as ReceiverAnswer
from tests.webhook_receiver import Receiver, Trickle

BOX = SecretBox(SEALING_KEY)
SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
DEADLINE_S = 1.0
# Each byte comes well within a per-read timeout of DEADLINE_S; the whole head would take
# more than ten deadlines.
TRICKLE_S = 0.25
POLICY = Policy(max_attempts=2, backoff_s=1e-6, timeout_s=DEADLINE_S, allow_private=True)


@pytest.fixture
def http() -> Iterator[httpx.Client]:
    with webhook_client(limits=httpx.Limits(max_connections=4)) as client:
        yield client


@pytest.fixture
def trickling() -> Iterator[Receiver]:
    with Receiver() as receiver:
        receiver.answer_with(lambda _request, _n: ReceiverAnswer(204, trickle_s=TRICKLE_S))
        yield receiver


def _ended(receiver: Receiver) -> list[Trickle]:
    """The receiver's trickles, once each has ended (the sender's hang-up noticed)."""
    return wait_for(
        lambda: receiver.trickles if all(t.ended for t in receiver.trickles) else None,
        timeout=10,
        what="the trickles to end",
    )


def test_a_trickling_receiver_is_cut_off_at_the_attempts_deadline(
    http: httpx.Client, trickling: Receiver
) -> None:
    claimed = Attempt(
        delivery_id=1, webhook_id=uuid.uuid4(), event_id=uuid.uuid4(), url=trickling.url,
        sealed_secret=BOX.seal(SECRET), body="{}", number=1,
    )  # fmt: skip

    started = time.perf_counter()
    answer = attempt(claimed, http=http, box=BOX, policy=POLICY)
    took = time.perf_counter() - started

    # Tenant-safe, as any connection that gave no answer in time.
    assert answer == Answer(None, "connection failed")
    (trickle,) = _ended(trickling)
    assert trickle.total * TRICKLE_S > 10 * DEADLINE_S  # the whole head: over 10 deadlines
    assert trickle.broken  # the sender hung up mid-head...
    assert trickle.sent * TRICKLE_S < 3 * DEADLINE_S  # ...about when its deadline came
    assert DEADLINE_S * 0.9 < took < DEADLINE_S + 1.5  # generous: the deadline, not a read


def test_a_trickled_delivery_fails_and_is_dead_after_its_last_attempt(
    session_factory: sessionmaker[Session], http: httpx.Client, trickling: Receiver,
    redis_url: str,
) -> None:  # fmt: skip
    with UnitOfWork(session_factory, RecordingQueue()) as uow:
        org = Org(name=f"org-{uuid.uuid4().hex[:8]}")
        uow.session.add(org)
        uow.session.flush()
        webhook = subscribe(
            uow=uow, org_id=org.id, url=trickling.url, events=[FACTS_CHANGED],
            secret=SECRET, box=BOX, allow_private=True,
        ).webhook  # fmt: skip
        record_event(uow, org_id=org.id, type=FACTS_CHANGED, data={"agentId": "a", "userId": "u"})
        uow.commit()
        (delivery_id,) = uow.session.scalars(
            update(WebhookDelivery)
            .where(WebhookDelivery.webhook_id == webhook.id)
            .values(next_attempt_at=dt.datetime.now(dt.UTC))
            .returning(WebhookDelivery.id)
        ).all()
        uow.commit()
    client = redis.Redis.from_url(redis_url)
    slots = WebhookSlots(client, hold=POLICY.lease, per_org=4)
    try:
        # One job: the first attempt, then (the backoff being short) the second, the last.
        made = deliver(
            new_uow=lambda: UnitOfWork(session_factory, RecordingQueue()), slots=slots,
            http=http, box=BOX, policy=POLICY, delivery_id=delivery_id,
        )  # fmt: skip
    finally:
        client.close()

    with UnitOfWork(session_factory, RecordingQueue()) as uow:
        row = uow.session.get(WebhookDelivery, delivery_id)
        assert row is not None
        assert (made, row.status, row.attempts) == (POLICY.max_attempts, "dead", 2)
        assert (row.last_status_code, row.last_error) == (None, "connection failed")
    assert len(_ended(trickling)) == POLICY.max_attempts
