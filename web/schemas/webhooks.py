"""Webhook subscriptions and their deliveries (shared/webhooks/)."""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Literal, get_args

from pydantic import BaseModel, Field

from shared.infra.targets import MAX_URL_LENGTH
from web.schemas.common import Body, CamelModel

EventType = Literal[
    "topic.summarized",
    "topic.forked",
    "topic.memory_changed",
    "facts.changed",
    "reevaluation.finished",
    "org.budget_exhausted",
]


class WebhookPath(BaseModel):  # snake_case, as the route's <webhook_id>
    webhook_id: uuid.UUID


class WebhookIn(Body):
    url: str = Field(min_length=1, max_length=MAX_URL_LENGTH)
    events: list[EventType] = Field(min_length=1, max_length=len(get_args(EventType)))
    # Standard Webhooks form (whsec_ + base64); omitted: the service makes one.
    secret: str | None = Field(default=None, max_length=200)


class WebhookOut(CamelModel):
    id: uuid.UUID
    url: str
    events: list[str]
    created_at: dt.datetime


class CreatedWebhookOut(WebhookOut):
    secret: str  # shown only in this answer


class WebhooksOut(CamelModel):
    webhooks: list[WebhookOut]


class DeliveryOut(CamelModel):
    id: int
    event_id: uuid.UUID
    type: str
    status: Literal["pending", "delivered", "failed", "dead"]
    attempts: int
    last_status_code: int | None
    last_error: str | None
    created_at: dt.datetime
    delivered_at: dt.datetime | None
    next_attempt_at: dt.datetime | None  # null once delivered or dead


class DeliveriesOut(CamelModel):
    deliveries: list[DeliveryOut]
