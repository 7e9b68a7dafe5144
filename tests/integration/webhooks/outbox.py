"""Reading an org's outbox in tests: its events and their deliveries (other tests'
committed rows share the database, so every read is of one org)."""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from shared.auth.service import org_for_key
from shared.infra.db.uow import UnitOfWork
from shared.infra.queue import RecordingQueue
from shared.webhooks.models import WebhookDelivery, WebhookEvent


def org_of(session_factory: sessionmaker[Session], auth: dict[str, str]) -> Any:
    with UnitOfWork(session_factory, RecordingQueue()) as uow:
        return org_for_key(uow=uow, key=auth["Authorization"].removeprefix("Bearer "))


def events_of(
    session_factory: sessionmaker[Session], auth: dict[str, str]
) -> list[tuple[str, dict[str, Any]]]:
    """(type, body) of the org's events, oldest first."""
    org_id = org_of(session_factory, auth)
    with session_factory() as session:
        rows = session.execute(
            select(WebhookEvent.type, WebhookEvent.body)
            .where(WebhookEvent.org_id == org_id)
            .order_by(WebhookEvent.created_at)
        )
        return [(type_, json.loads(body)) for type_, body in rows]


def deliveries_of(
    session_factory: sessionmaker[Session], auth: dict[str, str]
) -> list[tuple[str, str]]:
    """(webhook id, status) of the org's deliveries."""
    org_id = org_of(session_factory, auth)
    with session_factory() as session:
        rows = session.execute(
            select(WebhookDelivery.webhook_id, WebhookDelivery.status)
            .join(WebhookEvent, WebhookEvent.id == WebhookDelivery.event_id)
            .where(WebhookEvent.org_id == org_id)
        )
        return [(str(webhook_id), status) for webhook_id, status in rows]
