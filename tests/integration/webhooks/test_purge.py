"""The purge of old webhook events: one pass deletes every due batch (each its own
transaction) until its time budget is spent, never a recent event, and two passes at
once share the backlog."""

from __future__ import annotations

import datetime as dt
import itertools
import threading
import uuid
from collections.abc import Iterator

import pytest
from sqlalchemy import delete, func, select, text
from sqlalchemy.orm import Session, sessionmaker

from shared.auth.models import Org
from shared.infra.db.uow import UnitOfWork
from shared.infra.queue import RecordingQueue
from shared.webhooks.events import FACTS_CHANGED, RETENTION, purge_old_events
from shared.webhooks.models import Webhook, WebhookDelivery, WebhookEvent

# Long before any row other tests committed: the purge finds only ours.
NOW = dt.datetime(2000, 1, 1, 12, 0, tzinfo=dt.UTC)
DUE = NOW - RETENTION - dt.timedelta(hours=1)

_SEED = text(
    """
    WITH event AS (
        INSERT INTO webhook_events (id, org_id, type, body, created_at)
        SELECT gen_random_uuid(), :org_id, :type, '{}', :at FROM generate_series(1, :n)
        RETURNING id
    )
    INSERT INTO webhook_deliveries (webhook_id, event_id) SELECT :webhook_id, id FROM event
    """
)


def new_org(factory: sessionmaker[Session]) -> tuple[uuid.UUID, uuid.UUID]:
    """A committed org with a facts.changed subscription: (org id, webhook id)."""
    with UnitOfWork(factory, RecordingQueue()) as uow:
        org = Org(name=f"org-{uuid.uuid4().hex[:8]}")
        uow.session.add(org)
        uow.session.flush()
        webhook = Webhook(
            org_id=org.id, url="http://127.0.0.1:9/", events=[FACTS_CHANGED], sealed_secret="-"
        )
        uow.session.add(webhook)
        uow.session.flush()
        uow.commit()
        return org.id, webhook.id


def seed(
    factory: sessionmaker[Session], ids: tuple[uuid.UUID, uuid.UUID], n: int, at: dt.datetime
) -> None:
    """`n` events of the org created `at`, each with its delivery."""
    org_id, webhook_id = ids
    with UnitOfWork(factory, RecordingQueue()) as uow:
        uow.session.execute(
            _SEED,
            {"org_id": org_id, "webhook_id": webhook_id, "type": FACTS_CHANGED, "at": at, "n": n},
        )
        uow.commit()


def left(factory: sessionmaker[Session], org_id: uuid.UUID) -> tuple[int, int]:
    """(events, deliveries) the org still has."""
    with factory() as session:
        events = session.scalar(select(func.count()).where(WebhookEvent.org_id == org_id))
        deliveries = session.scalar(
            select(func.count())
            .select_from(WebhookDelivery)
            .join(WebhookEvent, WebhookEvent.id == WebhookDelivery.event_id)
            .where(WebhookEvent.org_id == org_id)
        )
        return events or 0, deliveries or 0


@pytest.fixture
def org(session_factory: sessionmaker[Session]) -> tuple[uuid.UUID, uuid.UUID]:
    return new_org(session_factory)


def test_one_pass_purges_every_due_batch_and_keeps_the_recent_events(
    session_factory: sessionmaker[Session], org: tuple[uuid.UUID, uuid.UUID]
) -> None:
    seed(session_factory, org, 25, DUE)
    seed(session_factory, org, 3, NOW - RETENTION + dt.timedelta(hours=1))

    purged = purge_old_events(
        new_uow=lambda: UnitOfWork(session_factory, RecordingQueue()), now=NOW, batch=10
    )

    assert purged == 25  # three batches in one pass, not one batch a period
    assert left(session_factory, org[0]) == (3, 3)  # and the due events' deliveries went too


def test_a_pass_ends_at_its_budget_and_the_next_pass_goes_on(
    session_factory: sessionmaker[Session], org: tuple[uuid.UUID, uuid.UUID]
) -> None:
    seed(session_factory, org, 25, DUE)
    ticks = itertools.count(step=5.0)  # every batch takes 5 s by this clock
    new_uow = lambda: UnitOfWork(session_factory, RecordingQueue())  # noqa: E731

    first = purge_old_events(
        new_uow=new_uow, now=NOW, batch=10, budget_s=8.0, clock=lambda: next(ticks)
    )
    assert first == 20  # a batch started within the budget runs to its end, then no more
    assert left(session_factory, org[0]) == (5, 5)
    assert purge_old_events(new_uow=new_uow, now=NOW, batch=10) == 5


@pytest.fixture
def committed_org(
    committed_factory: sessionmaker[Session],
) -> Iterator[tuple[uuid.UUID, uuid.UUID]]:
    ids = new_org(committed_factory)
    yield ids
    with committed_factory() as session:  # its webhook, events and deliveries go with it
        session.execute(delete(Org).where(Org.id == ids[0]))
        session.commit()


def test_two_passes_at_once_share_the_backlog_without_waiting_or_deadlocking(
    committed_factory: sessionmaker[Session], committed_org: tuple[uuid.UUID, uuid.UUID]
) -> None:
    seed(committed_factory, committed_org, 3000, DUE)
    start = threading.Barrier(2)
    counts: list[int] = []
    errors: list[BaseException] = []

    def purge() -> None:
        try:
            start.wait()
            counts.append(
                purge_old_events(
                    new_uow=lambda: UnitOfWork(committed_factory, RecordingQueue()),
                    now=NOW,
                    batch=50,
                )
            )
        except BaseException as exc:
            errors.append(exc)

    passes = [threading.Thread(target=purge) for _ in range(2)]
    for thread in passes:
        thread.start()
    for thread in passes:
        thread.join(timeout=60)

    assert errors == []
    assert sum(counts) == 3000  # every event deleted once, by one pass or the other
    assert left(committed_factory, committed_org[0]) == (0, 0)
