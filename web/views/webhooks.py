"""Webhook subscriptions of the calling org, and what was delivered to them."""

from __future__ import annotations

from typing import Any

from shared.webhooks.service import list_deliveries, list_webhooks, subscribe, unsubscribe
from web.auth import current_org
from web.runtime import runtime, unit_of_work
from web.schemas.common import dump
from web.schemas.webhooks import (
    CreatedWebhookOut,
    DeliveriesOut,
    DeliveryOut,
    WebhookIn,
    WebhookOut,
    WebhookPath,
    WebhooksOut,
)
from web.views.common import api_blueprint

bp = api_blueprint("webhooks", "webhooks")


@bp.post("/webhooks", responses={201: CreatedWebhookOut})
def create_webhook(body: WebhookIn) -> tuple[dict[str, Any], int]:
    """Subscribe a URL to event types; the answer holds the signing secret, shown only here
    and stored sealed (409 `sealing_key_missing` when the server has no
    DRIFTLESS_SECRET_KEYS to seal it with)."""
    rt = runtime()
    with unit_of_work() as uow:
        created = subscribe(
            uow=uow,
            org_id=current_org(),
            url=body.url,
            events=body.events,
            secret=body.secret,
            box=rt.secret_box,
            allow_private=rt.settings.webhook_allow_private,
        )
        shown = WebhookOut.model_validate(created.webhook)
        answer = CreatedWebhookOut(**dict(shown), secret=created.secret)
        uow.commit()
    return dump(answer), 201


@bp.get("/webhooks", responses={200: WebhooksOut})
def get_webhooks() -> dict[str, Any]:
    """The org's subscriptions (never their secrets)."""
    with unit_of_work() as uow:
        webhooks = list_webhooks(uow=uow, org_id=current_org())
        return dump(WebhooksOut(webhooks=[WebhookOut.model_validate(w) for w in webhooks]))


@bp.delete("/webhooks/<webhook_id>", responses={204: None})
def delete_webhook(path: WebhookPath) -> tuple[str, int]:
    """Delete a subscription and its deliveries: nothing more is sent to it."""
    with unit_of_work() as uow:
        unsubscribe(uow=uow, org_id=current_org(), webhook_id=path.webhook_id)
        uow.commit()
    return "", 204


@bp.get("/webhooks/<webhook_id>/deliveries", responses={200: DeliveriesOut})
def get_deliveries(path: WebhookPath) -> dict[str, Any]:
    """The subscription's newest deliveries first: status, attempts, the last answer."""
    with unit_of_work() as uow:
        views = list_deliveries(uow=uow, org_id=current_org(), webhook_id=path.webhook_id)
        deliveries = [DeliveryOut.model_validate(view) for view in views]
    return dump(DeliveriesOut(deliveries=deliveries))
